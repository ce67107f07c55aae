"""Real-code sweep: `scan`, then `apply` twice, over code nobody here wrote.

    python benchmarks/real_code_sweep.py [--site-packages] [--downloads CACHE_DIR [--download]]
                                         [--packages NAME ...] [--jobs N] [--keep DIR]
                                         [--style faithful|global]

Sources: every .py file of the installed packages (this interpreter's site-packages) and the
wheels / sdists of public JAX packages in CACHE_DIR (`--download` fetches the newest releases
there first, with `pip download --no-deps`). Everything is copied or unpacked into a temporary
work tree; the installed packages are never written. The tool runs as a user runs it (the CLI
in a subprocess) and the sweep prints, as counts:

- files, files changed, pmap sites (migrated and left to a human), findings by code;
- internal errors: PM005 findings and any traceback on stderr (must be 0);
- outputs that do not parse, and files that parsed before and do not after (must be 0);
- files the second `apply` changes (must be 0: the rewrite is idempotent);
- of the migrated files, how many are fully global: no pmap-contract code left (the JSON
  report's `fully_global`, from transforms/contract_names.py).

Exit status 0 when all four checks hold, 1 otherwise. Slow by nature (minutes for ~20,000
files); tests/test_real_code_sweep.py runs it on a small subset.
"""

from __future__ import annotations

import argparse
import ast
import collections
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import warnings
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Public packages with pmap-era code: the newest release of each is swept, or the release
# pinned here where the newest dropped its pmap code (diffusers removed its flax pipelines,
# which pmap with flax's replicate and shard, after 0.25).
JAX_PACKAGES = (
    "blackjax", "brax", "chex", "clu", "deepqmc", "diffrax", "diffusers==0.25.0", "distrax",
    "dm-acme", "dm-haiku",
    "dopamine-rl", "dynamax", "equinox", "evojax", "evosax", "flashbax", "flax", "gymnax",
    "jax-cfd", "jax-md", "jaxline", "jraph", "jumanji", "kfac-jax", "lineax", "mctx",
    "neural-tangents", "numpyro", "objax", "optax", "optimistix", "optuna-integration",
    "orbax-checkpoint", "paxml", "pgx", "praxis", "qdax", "rlax", "t5x",
    "tensorflow-probability", "trax",
)
ARCHIVE_SUFFIXES = (".whl", ".tar.gz", ".zip", ".tgz")
# One finding per pmap site: migrated (PM100 faithful, PM600 global, PM612 pmap's contract),
# refused with the reason (PM2xx), a host barrier rewritten or kept (PM503, PM504), kept in a
# multi-process module (PM505).
SITE_CODES = re.compile(r"PM100|PM600|PM612|PM2\d\d|PM50[345]")
FINDING = re.compile(r": (PM\d{3}) (?:error|warning|info) ")


def _canonical(name: str) -> str:
    """The project a name or a pinned requirement (`diffusers==0.25.0`) names, as PyPI does."""
    return re.sub(r"[-_.]+", "-", re.split(r"[=<>!~]", name, maxsplit=1)[0]).lower()


def _archive_project(path: Path) -> str:
    """The project name an archive file holds (`dm_haiku-0.0.17-py3-none-any.whl`)."""
    stem = path.name
    for suffix in ARCHIVE_SUFFIXES:
        stem = stem.removesuffix(suffix)
    return _canonical(re.split(r"-\d", stem, maxsplit=1)[0])


# -- sources ------------------------------------------------------------------------------


def download(cache: Path, names: tuple[str, ...]) -> list[str]:
    """`pip download --no-deps` every package not in `cache` yet; the names that failed."""
    cache.mkdir(parents=True, exist_ok=True)
    present = {_archive_project(p) for p in cache.iterdir()}
    failed = []
    for name in names:
        if _canonical(name) in present:
            continue
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest",
             str(cache), name],
            capture_output=True, text=True, check=False,
        )
        if done.returncode != 0:
            failed.append(name)
    return failed


def unpack(archive: Path, into: Path) -> None:
    """A wheel or an sdist, unpacked (only its .py files) under `into`."""
    into.mkdir(parents=True, exist_ok=True)
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zipped:
            for member in zipped.infolist():
                if member.filename.endswith(".py") and _safe(member.filename):
                    zipped.extract(member, into)
        return
    with tarfile.open(archive) as tarred:
        members = [
            m for m in tarred.getmembers()
            if m.isfile() and m.name.endswith(".py") and _safe(m.name)
        ]
        tarred.extractall(into, members=members, filter="data")


def _safe(name: str) -> bool:
    return not name.startswith(("/", "\\")) and ".." not in Path(name).parts


def copy_site_packages(into: Path, only: set[str] | None) -> None:
    """The .py files of every installed package (or of those named in `only`)."""
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in sorted(site.iterdir()):
        name = entry.name
        if name.endswith((".dist-info", ".egg-info", ".pth")) or name == "__pycache__":
            continue
        if only is not None and entry.stem not in only:
            continue
        if entry.is_file() and name.endswith(".py"):
            shutil.copy2(entry, into / name)
        elif entry.is_dir() and not entry.is_symlink():
            shutil.copytree(
                entry, into / name, symlinks=True, dirs_exist_ok=True,
                ignore=lambda d, names: [
                    n for n in names
                    if not n.endswith(".py") and not (Path(d) / n).is_dir()
                    or n == "__pycache__"
                ],
            )


# -- checks ---------------------------------------------------------------------------------


def python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if p.is_file() and not p.is_symlink())


def parses(path: Path) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(path.read_bytes())
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def digests(root: Path) -> dict[Path, str]:
    return {p.relative_to(root): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in python_files(root)}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "migrator.cli", *args], capture_output=True, text=True,
        env=environment, cwd=ROOT, check=False,  # exit 1 and 2 are findings, read below
    )


def tracebacks(stderr: str) -> int:
    return stderr.count("Traceback (most recent call last)")


def sweep(tree: Path, jobs: int, style: str = "faithful") -> dict:
    """scan, apply, apply again over `tree` (a throwaway copy) in `style`; the figures and
    failures."""
    styled = ("--style", style, "--jobs", str(jobs), "--no-progress")
    before = {p.relative_to(tree): parses(p) for p in python_files(tree)}
    original = digests(tree)

    scanned = run_cli("scan", str(tree), "--format", "json", *styled)
    (tree.parent / "scan.json").write_text(scanned.stdout)  # every finding, to look at
    report = json.loads(scanned.stdout)
    internal = [f for f in report["findings"] if f["code"] == "PM005"]

    first = run_cli("apply", str(tree), *styled)
    (tree.parent / "apply-1.txt").write_text(first.stdout + first.stderr)
    internal_apply = [line for line in first.stdout.splitlines() if ": PM005 " in line]
    after_first = digests(tree)
    changed = [p for p in original if after_first.get(p) != original[p]]
    unparsed_outputs = [str(p) for p in changed if not parses(tree / p)]
    broken = [str(p) for p, ok in before.items() if ok and not parses(tree / p)]
    not_parsed_before = [str(p) for p, ok in before.items() if not ok]

    second = run_cli("apply", str(tree), *styled)
    (tree.parent / "apply-2.txt").write_text(second.stdout + second.stderr)
    after_second = digests(tree)
    unstable = sorted(str(p) for p in after_first if after_second.get(p) != after_first[p])
    second_codes = collections.Counter(FINDING.findall(second.stdout))

    by_code = dict(sorted(report["summary"]["by_code"].items()))
    sites = sum(n for code, n in by_code.items() if SITE_CODES.fullmatch(code))
    return {
        "style": style,
        "python_files_in_tree": len(before),
        "files": report["summary"]["files"],
        "files_changed": report["summary"]["changed"],
        "sites": sites,
        "sites_migrated": report["summary"]["migrated_sites"],
        "findings_needing_a_human": report["summary"]["needs_human"],
        "findings_by_code": by_code,
        "internal_errors": [f"{f['path']}:{f['line']}: {f['message']}" for f in internal]
        + internal_apply,
        "tracebacks": tracebacks(scanned.stderr) + tracebacks(first.stderr)
        + tracebacks(second.stderr),
        "did_not_parse_before": len(not_parsed_before),
        "outputs_not_parsing": unparsed_outputs,
        "parse_regressions": broken,
        "changed_by_second_apply": unstable,
        "migrated_again_by_second_apply": second_codes.get("PM100", 0),
        "files_written_by_first_apply": len(changed),
        # Files with pmap-era code the migration changed, and those of them left with no
        # pmap-contract code (the report's per-file `fully_global`: true, false or null).
        "files_migrated": sum(f["fully_global"] is not None for f in report["files"]),
        "files_fully_global": sum(f["fully_global"] is True for f in report["files"]),
    }


def print_report(figures: dict, failed_downloads: list[str]) -> bool:
    print(f"style                         {figures['style']}")
    print(f"python files in the tree      {figures['python_files_in_tree']}")
    print(f"files (as the CLI counts)     {figures['files']}")
    print(f"files changed                 {figures['files_changed']} "
          f"(first apply wrote {figures['files_written_by_first_apply']})")
    print(f"files fully global            {figures['files_fully_global']} of "
          f"{figures['files_migrated']} migrated (no pmap-contract code left)")
    print(f"pmap sites                    {figures['sites']} "
          f"({figures['sites_migrated']} migrated to jit + shard_map)")
    print(f"findings needing a human      {figures['findings_needing_a_human']}")
    print("findings by code              " + ", ".join(
        f"{code} {n}" for code, n in figures["findings_by_code"].items()))
    print(f"did not parse before (Python {sys.version_info.major}.{sys.version_info.minor})"
          f"   {figures['did_not_parse_before']}")
    checks = {
        "internal errors (PM005)": figures["internal_errors"],
        "tracebacks": figures["tracebacks"],
        "rewritten files not parsing": figures["outputs_not_parsing"],
        "parse regressions": figures["parse_regressions"],
        "files changed by the second apply": figures["changed_by_second_apply"],
        "sites migrated by the second apply": figures["migrated_again_by_second_apply"],
    }
    ok = True
    for label, value in checks.items():
        count = value if isinstance(value, int) else len(value)
        ok &= count == 0
        print(f"{label:<45} {count}")
        if not isinstance(value, int):
            for item in value[:20]:
                print(f"    {item}")
    if failed_downloads:
        print(f"downloads that failed         {', '.join(failed_downloads)}")
    print("OK" if ok else "FAILED")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site-packages", action="store_true",
                        help="sweep the .py files of this interpreter's installed packages")
    parser.add_argument("--downloads", type=Path, metavar="CACHE_DIR",
                        help="sweep the wheels and sdists in this directory")
    parser.add_argument("--download", action="store_true",
                        help="first pip-download the public JAX packages into CACHE_DIR")
    parser.add_argument("--packages", nargs="+", metavar="NAME",
                        help="only these installed packages / downloaded projects")
    parser.add_argument("--jobs", type=int, default=0, help="worker processes (0: one per core)")
    parser.add_argument("--style", choices=("faithful", "global"), default="faithful",
                        help="the migration style scan and apply use (default faithful)")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="work in DIR (emptied first) and keep it, instead of a temp dir")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here")
    args = parser.parse_args(argv)
    if not args.site_packages and not args.downloads:
        parser.error("nothing to sweep: give --site-packages and/or --downloads CACHE_DIR")

    only = set(args.packages) if args.packages else None
    failed_downloads = []
    work = args.keep or Path(tempfile.mkdtemp(prefix="real-code-sweep-"))
    try:
        if args.keep:
            shutil.rmtree(work, ignore_errors=True)
        tree = work / "tree"
        tree.mkdir(parents=True)
        if args.site_packages:
            # not "site-packages": the CLI skips directories of that name, as it skips venvs
            (tree / "installed").mkdir()
            copy_site_packages(tree / "installed", only)
        if args.downloads:
            if args.download:
                names = tuple(n for n in JAX_PACKAGES
                              if only is None or _canonical(n) in {_canonical(o) for o in only})
                failed_downloads = download(args.downloads, names)
            for archive in sorted(args.downloads.iterdir()):
                if not archive.name.endswith(ARCHIVE_SUFFIXES):
                    continue
                if only is not None and _archive_project(archive) not in {_canonical(n) for n in only}:
                    continue
                stem = archive.name
                for suffix in ARCHIVE_SUFFIXES:
                    stem = stem.removesuffix(suffix)
                unpack(archive, tree / "downloads" / stem)
        figures = sweep(tree, args.jobs, args.style)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0 if print_report(figures, failed_downloads) else 1


if __name__ == "__main__":
    sys.exit(main())
