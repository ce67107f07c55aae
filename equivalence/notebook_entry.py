"""Notebook entries of `check`: `--entry path/name.ipynb[:NAME]`.

A notebook has no function to call: its code cells run top to bottom in one namespace, and
its final globals are the output (`:NAME`: that global; bare: every global that is an array
or a dict / list / tuple of arrays). This module is the harness's side: it reads the notebook
and masks each cell's IPython lines exactly as the migration does (transforms/reading/ipython_lines.py),
so both sides run the very Python the migrator read, and writes the cells for the worker
(equivalence/worker.py, which imports only the standard library, numpy and jax, and so cannot
mask them itself).
"""

from __future__ import annotations

import json
from pathlib import Path

NOTEBOOK_SUFFIX = ".ipynb"
CELLS_FILE = "notebook_cells.json"  # in the worker's output folder


def is_notebook_entry(entry: str) -> bool:
    return notebook_path(entry).endswith(NOTEBOOK_SUFFIX)


def notebook_path(entry: str) -> str:
    """`path/name.ipynb` of `path/name.ipynb:NAME` (a notebook path holds no colon)."""
    return entry.partition(":")[0] if ":" in entry else entry


def masked_cells(notebook: Path) -> list[dict]:
    """The notebook's code cells in order, each {"number": N, "text": its Python}: N is the
    cell's 1-based place among the code cells (`In [N]` when run top to bottom), the text
    has IPython lines masked as the migration masks them (transforms/reading/ipython_lines.py:
    same line count, so line numbers match the cell), and None stands for a cell whose cell
    magic is not Python (`%%bash`): it is not run."""
    from transforms.reading.ipython_lines import mask, unique_tag

    document = json.loads(notebook.read_bytes().decode("utf-8").lstrip("\ufeff"))
    texts = [source if isinstance(source, str) else "".join(source)
             for cell in document.get("cells", []) if cell.get("cell_type") == "code"
             for source in [cell.get("source", "")]]
    tag = unique_tag(*texts)
    found = []
    for number, text in enumerate(texts, start=1):
        masked = mask(text, tag)
        found.append({"number": number, "text": None if masked is None else masked.text})
    return found


def write_cells(root: Path, entry: str, out_dir: Path) -> None:
    """Write the entry's masked cells where the worker reads them (CELLS_FILE)."""
    cells = masked_cells(Path(root) / notebook_path(entry))
    (Path(out_dir) / CELLS_FILE).write_text(json.dumps(cells))
