"""The notebook file: its JSON read, and written back in the layout it was read in.

Kept apart from migrator/notebooks.py, which migrates the cells' text: this module is the
file around them, which finds the code cells and puts their new sources back.

The indent, separators, ASCII escaping, line ends and surrounding whitespace are found by
re-serialising the original and comparing, keys keep their order, and only the `source` of
changed cells differs (a list of lines as nbformat writes them, or a string if it was one).
"""

from __future__ import annotations

import json

from migrator.notebook_cells import Cell


class NotebookError(Exception):
    """The bytes are not a notebook this tool can read (invalid JSON, not nbformat 4)."""


class NotebookDocument:
    """The parsed JSON and how it was laid out, so it can be written back the same way."""

    def __init__(self, notebook: dict, prefix: str, core: str, suffix: str):
        self.notebook = notebook
        self.prefix, self.core, self.suffix = prefix, core, suffix  # whitespace, JSON, whitespace

    @classmethod
    def load(cls, data: bytes) -> NotebookDocument:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise NotebookError(f"not UTF-8 text: {error}") from None
        bom = "\ufeff" if text.startswith("\ufeff") else ""
        text = text[len(bom):]
        try:
            notebook = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as error:
            raise NotebookError(f"not valid JSON: {error}") from None
        if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
            raise NotebookError("not a Jupyter notebook: no list of cells")
        major = notebook.get("nbformat")
        if not isinstance(major, int) or major < 4:
            raise NotebookError(f"nbformat {major!r} is not supported (4 is); convert it with nbconvert")
        for index, cell in enumerate(notebook["cells"]):
            source = cell.get("source") if isinstance(cell, dict) else None
            if not isinstance(source, (str, list)) or (
                isinstance(source, list) and not all(isinstance(s, str) for s in source)
            ):
                raise NotebookError(f"cell {index + 1}: not a cell with a text source")
        core = text.strip()
        prefix = bom + text[: len(text) - len(text.lstrip())]
        suffix = text[len(text.rstrip()):]
        return cls(notebook, prefix, core, suffix)

    def is_python(self) -> bool:
        metadata = self.notebook.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        info = metadata.get("language_info")
        spec = metadata.get("kernelspec")
        language = (info.get("name") if isinstance(info, dict) else None) or (
            spec.get("language") if isinstance(spec, dict) else None
        )
        return not isinstance(language, str) or language.lower().startswith(("python", "ipython"))

    def code_cells(self) -> list[Cell]:
        if not self.is_python():
            return []
        return [
            Cell(index, _join(cell["source"]))
            for index, cell in enumerate(self.notebook["cells"])
            if cell.get("cell_type") == "code"
        ]

    def set_source(self, index: int, text: str) -> None:
        cell = self.notebook["cells"][index]
        # nbformat writes a list of lines, each with its line end (str.splitlines(True)).
        cell["source"] = text.splitlines(True) if isinstance(cell["source"], list) else text

    def dump(self) -> bytes:
        layout = self._layout()
        return (self.prefix + _dumps(self.notebook, layout) + self.suffix).encode("utf-8")

    def _layout(self) -> tuple:
        """The json.dumps arguments that reproduce the original bytes, or nbformat's layout."""
        original = json.loads(self.core)  # a fresh copy: self.notebook has been edited
        newline = "\r\n" if "\r\n" in self.core else "\n"
        lines = self.core.split(newline)
        if len(lines) > 1:
            second = lines[1]
            indent = second[: len(second) - len(second.lstrip(" \t"))]
            separators = [(",", ": "), (", ", ": ")]
        else:
            indent = None
            separators = [(", ", ": "), (",", ":"), (",", ": "), (", ", ":")]
        for ensure_ascii in (False, True):
            for separator in separators:
                layout = (indent, separator, ensure_ascii, newline)
                if _dumps(original, layout) == self.core:
                    return layout
        return (indent, separators[0], False, newline)


def _dumps(value, layout: tuple) -> str:
    indent, separators, ensure_ascii, newline = layout
    text = json.dumps(value, indent=indent, separators=separators, ensure_ascii=ensure_ascii)
    return text.replace("\n", newline) if newline != "\n" else text  # JSON strings hold no raw newline


def _join(source: str | list[str]) -> str:
    return source if isinstance(source, str) else "".join(source)
