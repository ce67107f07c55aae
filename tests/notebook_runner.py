"""Run programs top to bottom as a kernel or `python file.py` would, on fake CPU devices.

`python tests/notebook_runner.py OUT.json PATH...` runs each notebook's code cells in order in
one namespace (a `.py` path: the module as `__main__`), each path in a fresh namespace, all in
this one process (JAX is imported once), and writes {path: {"error": ..., "result": ...}} to
OUT.json: the traceback's last lines or None, and the namespace's `result` as a list when there
is one. XLA_FLAGS must ask for the devices before this process starts (the test sets it).

Only the Python of a code cell runs. With IPython installed, its own transformer turns magics,
shell escapes and help lines into `get_ipython()` calls, answered by `_Shell`: a Python cell
magic (`%%time`, `%%capture`, ...) or line magic (`%time x = f()`) runs its code, anything else
(`%matplotlib`, `!pip`, `jax.pmap?`) does nothing. Without IPython, such lines become `pass`.
`cell_python` is also what tests/test_names_bound.py reads a notebook's cells as.
"""

from __future__ import annotations

import json
import os
import re
import sys
import traceback

PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun"}  # whose body is the cell's Python


def is_ipython_line(line: str) -> bool:
    """A magic, shell escape or help line (`%time ...`, `!ls`, `x = !ls`, `jax.pmap?`)."""
    stripped = line.lstrip()
    return (stripped[:1] in ("%", "!", "?") or line.rstrip().endswith("?")
            or re.match(r"\s*\w+\s*=\s*[!%]", line) is not None)


def cell_python(text: str) -> str | None:
    """The cell as plain Python, IPython lines masked to `pass` (blocks stay blocks); None for
    a cell magic whose body is not Python (`%%bash`)."""
    lines = text.splitlines()
    if lines and lines[0].startswith("%%"):
        if lines[0][2:].split()[0] not in PYTHON_CELL_MAGICS:
            return None
        lines = lines[1:]
    return "\n".join(re.match(r"\s*", line).group(0) + "pass" if is_ipython_line(line) else line
                     for line in lines) + "\n"


class _Shell:
    """The `get_ipython()` that IPython's transformed lines call."""

    def __init__(self, namespace: dict):
        self.namespace = namespace

    def _run(self, code: str, scoped: bool) -> None:
        # a cell magic's body is a cell of its own to IPython: its magics and `!` lines too
        from IPython.core.inputtransformer2 import TransformerManager

        code = TransformerManager().transform_cell(code)
        exec(compile(code, "<magic>", "exec"), dict(self.namespace) if scoped else self.namespace)

    def run_line_magic(self, name: str, line: str, *_):
        if name in PYTHON_CELL_MAGICS:
            self._run(line, scoped=name == "timeit")

    def run_cell_magic(self, name: str, line: str, cell: str, *_):
        if name in PYTHON_CELL_MAGICS:  # %%timeit runs in a namespace of its own
            self._run(cell, scoped=name == "timeit")

    def system(self, *_):
        return None

    def getoutput(self, *_):
        return []


def _cells(path: str, namespace: dict) -> list[str]:
    """The notebook's code cells as Python to run in `namespace`."""
    with open(path, encoding="utf-8") as f:
        notebook = json.load(f)
    texts = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
             for c in notebook["cells"] if c["cell_type"] == "code"]
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return [code for code in map(cell_python, texts) if code is not None]
    namespace["get_ipython"] = lambda shell=_Shell(namespace): shell
    manager = TransformerManager()
    return [manager.transform_cell(text) for text in texts]


def run(path: str) -> dict:
    """Run `path` from its own folder, on the import path first, as a kernel started beside
    a notebook (or `python file.py`) is: the modules and packages next to it import."""
    namespace: dict = {"__name__": "__main__"}
    path = os.path.abspath(path)
    folder, cwd = os.path.dirname(path), os.getcwd()
    sys.path.insert(0, folder)
    os.chdir(folder)
    try:
        if path.endswith(".ipynb"):
            for number, code in enumerate(_cells(path, namespace)):
                exec(compile(code, f"{path}:code cell {number}", "exec"), namespace)
        else:
            with open(path, encoding="utf-8") as f:
                exec(compile(f.read(), path, "exec"), namespace)
    except BaseException:  # noqa: BLE001 - reported per path, the next one still runs
        return {"error": "".join(traceback.format_exc().splitlines(True)[-6:]), "result": None}
    finally:
        os.chdir(cwd)
        sys.path.remove(folder)
    result = namespace.get("result")
    if result is not None:
        import numpy as np

        result = np.asarray(result).tolist()
    return {"error": None, "result": result}


def main(out: str, paths: list[str]) -> None:
    report = {path: run(path) for path in paths}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
