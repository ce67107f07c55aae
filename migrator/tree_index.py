"""The files of one run as one program: each module's import names, from where it sits, and
the module-level names other modules of the run use (transforms/tree_uses.py).

A module is named as Python would import it: up through the folders that hold an
`__init__.py` (`pkg/train.py` is `pkg.train`), and also by its path under the run's root where
that differs (a namespace package, or scripts in one folder importing each other by stem).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from migrator.files import SourceFile
from transforms.tree_uses import TreeContext, TreeModule, contexts, tree_facts


def tree_contexts(files: Iterable[SourceFile]) -> dict[Path, TreeContext]:
    """path -> what its migration learns from the other files of the run (its names they
    use, what their functions it calls return), for files with something to learn.
    Unreadable files are left out here; the run reports them itself."""
    modules: list[TreeModule] = []
    paths: dict[str, Path] = {}
    for file in files:
        if file.problem is not None:
            continue
        module = _tree_module(file)
        if module is not None:
            modules.append(module)
            paths[module.display] = file.path
    if len(modules) < 2:
        return {}
    return {paths[display]: context
            for display, context in contexts(tree_facts(modules), modules).items()}


def _tree_module(file: SourceFile) -> TreeModule | None:
    try:
        data = file.path.read_bytes()
    except OSError:
        return None
    if file.path.suffix == ".ipynb":
        return _notebook_module(file, data)
    if file.path.suffix != ".py":
        return None
    return TreeModule(file.display, module_names(file.path, file.root), data,
                      package=file.path.name == "__init__.py")


def module_names(path: Path, root: Path) -> tuple[str, ...]:
    """The dotted names `path` is imported by: its package path, then its path under `root`."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder != folder.parent:
        parts.insert(0, folder.name)
        folder = folder.parent
    names = [".".join(parts)] if parts else []
    try:
        relative = path.relative_to(root).with_suffix("")
    except ValueError:
        relative = None
    if relative is not None:
        under_root = [p for p in relative.parts if p != "__init__"]
        if under_root and ".".join(under_root) not in names:
            names.append(".".join(under_root))
    return tuple(name for name in names if all(p.isidentifier() for p in name.split(".")))


def _notebook_module(file: SourceFile, data: bytes) -> TreeModule | None:
    """A notebook imports modules of the run too; it is never imported itself."""
    from transforms.reading.ipython_lines import mask, unique_tag
    from migrator.notebook_json import NotebookDocument, NotebookError

    try:
        document = NotebookDocument.load(data)
    except NotebookError:
        return None
    texts = [cell.get("source", "") for cell in document.notebook["cells"]
             if isinstance(cell, dict) and cell.get("cell_type") == "code"]
    texts = ["".join(t) if isinstance(t, list) else t for t in texts]
    tag = unique_tag(*texts)
    code, starts, line = [], [], 1
    for text in texts:
        masked = mask(text, tag)
        cell = masked.text if masked is not None else ""
        starts.append(line)
        code.append(cell if cell.endswith("\n") else cell + "\n")
        line += code[-1].count("\n")
    return TreeModule(file.display, (), "".join(code).encode("utf-8"), cell_starts=tuple(starts))
