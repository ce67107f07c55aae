"""The real-code sweep (benchmarks/real_code_sweep.py) on a small subset: an installed package
and a wheel and an sdist built here from real-code shapes. The full sweep is run by hand; its
figures are in benchmarks/README.md."""

from __future__ import annotations

import io
import json
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import real_code_sweep  # noqa: E402

# Shapes met in real trees: a flag test broken after `not`, a name rebound to its own pmap.
TRAIN = '''\
import jax


def train(step, make_backend, module):
    if (not jax.config.jax_pmap_shmap_merge or not
            hasattr(module, "factory")):
        make_backend = None
    step = jax.pmap(step, axis_name="batch")
    return step, make_backend
'''
UTILS = '''\
import jax


def stack(trees):
    return jax.tree_map(lambda *xs: xs, *trees)
'''
PYTHON2 = "print 'a Python 2 file that mentions jax.pmap'\n"


# A module declared latin-1 (the global style once failed on it with PM005).
LATIN1 = (
    "# -*- coding: latin-1 -*-\nimport jax\n\nLABEL = 'caf\xe9'\n\n\n@jax.pmap\n"
    "def double(x):\n    return 2 * x\n\n\ndef run(x):\n    return double(x)\n"
).encode("latin-1")


def _wheel(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("demo/__init__.py", "")
        wheel.writestr("demo/train.py", TRAIN)
        wheel.writestr("demo/label.py", LATIN1)
        wheel.writestr("demo-1.0.dist-info/METADATA", "Name: demo\n")


def _sdist(path: Path) -> None:
    with tarfile.open(path, "w:gz") as sdist:
        for name, text in (("old_demo-0.1/old_demo/utils.py", UTILS),
                           ("old_demo-0.1/old_demo/legacy.py", PYTHON2),
                           ("old_demo-0.1/../escape.py", UTILS)):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            sdist.addfile(info, io.BytesIO(data))


@pytest.mark.slow
@pytest.mark.parametrize("style", ["faithful", "global"])
def test_sweep_of_a_small_subset(tmp_path, capsys, style):
    cache = tmp_path / "cache"
    cache.mkdir()
    _wheel(cache / "demo-1.0-py3-none-any.whl")
    _sdist(cache / "old_demo-0.1.tar.gz")
    figures_path = tmp_path / "figures.json"
    status = real_code_sweep.main([
        "--site-packages", "--downloads", str(cache),
        "--packages", "iniconfig", "demo", "old-demo",
        "--jobs", "1", "--keep", str(tmp_path / "work"), "--json", str(figures_path),
        "--style", style,
    ])
    printed = capsys.readouterr().out
    figures = json.loads(figures_path.read_text())
    assert status == 0, printed
    assert "OK" in printed.splitlines()[-1]
    assert figures["style"] == style
    # iniconfig's files, demo's three, old_demo's two; the member leaving the tree is skipped.
    assert figures["python_files_in_tree"] == figures["files"] >= 7
    assert not (tmp_path / "work" / "escape.py").exists()
    codes = figures["findings_by_code"]
    # The rebinding (train.py) and the latin-1 module's pmap are migrated; no PM206, no PM005.
    assert codes["PM100"] == 2 and "PM206" not in codes
    assert codes["PM305"] == 1  # the flag test is folded, no PM005
    assert codes["PM304"] == 1
    assert codes["PM001"] == 1  # the Python 2 file, reported
    assert figures["did_not_parse_before"] == 1
    assert figures["files_changed"] == figures["files_written_by_first_apply"] == 3
    # train.py and label.py keep a faithful helper; utils.py (jax.tree_map) is not a migrated file.
    assert figures["files_migrated"] == 2 and figures["files_fully_global"] == 0
    assert "files fully global            0 of 2 migrated" in printed
    assert figures["internal_errors"] == [] and figures["tracebacks"] == 0
    assert figures["parse_regressions"] == [] and figures["changed_by_second_apply"] == []
    if style == "global":
        assert codes["PM607"] == 1  # latin-1: the global pass edits UTF-8 only, so faithful
        assert codes["PM602"] == 1  # train.py maps a parameter, not a def it can see
    # The work tree was a copy: the installed package is untouched (it was only read).
    rewritten = tmp_path / "work" / "tree" / "downloads" / "demo-1.0-py3-none-any" / "demo"
    assert "_pmap_style_shard_map(step" in (rewritten / "train.py").read_text()
    assert "caf\xe9" in (rewritten / "label.py").read_text(encoding="latin-1")


def test_archive_names_give_the_project():
    assert real_code_sweep._archive_project(Path("dm_haiku-0.0.17-py3-none-any.whl")) == "dm-haiku"
    assert real_code_sweep._archive_project(Path("dm-acme-0.4.0.tar.gz")) == "dm-acme"
    assert real_code_sweep._archive_project(Path("jax_md-0.2.29-py3-none-any.whl")) == "jax-md"
