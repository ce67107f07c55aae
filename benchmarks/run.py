"""pmap-migrate benchmark: tool speed, migrated-code speed, check overhead. One run, one machine.

usage: python benchmarks/run.py [--tree PATH ...] [--jobs N] [--files 2000] [--quick]

Everything compared is measured in the same run, and every ratio is computed from numbers of
that run. See benchmarks/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(REPO))

from rich import box  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import gentree  # noqa: E402
import many_sites  # noqa: E402
import measure  # noqa: E402
import step_worker  # noqa: E402  (stdlib at import; jax only inside its functions)
from transforms.contract_names import is_fully_global  # noqa: E402

CORPUS = REPO / "corpus"
LEGACY_ORIGINAL_MARKER = b"# pmap-migrate-test: original needs legacy jax"
# Rewrites that remove collectives on purpose: a host barrier becomes sync_global_devices
# (PM503), a host read of x[0] skips the cross-device gather (PM410).
FEWER_BY_DESIGN = {"PM503", "PM410"}
STEP_PROGRAMS = ("train_step_pmean_donate", "class_held_step", "multiproc_big_vision_style")
QUICK_PROGRAMS = ("train_step_pmean_donate", "class_held_step", "collectives_zoo",
                  "multiproc_big_vision_style")

console = Console(width=200, highlight=False, soft_wrap=False)
log_console = Console(stderr=True, highlight=False)
T0 = time.perf_counter()


def log(message: str) -> None:
    log_console.print(f"[dim][{time.perf_counter() - T0:7.1f}s][/dim] {message}")


def executable(name: str) -> str | None:
    """The real script next to this interpreter (not a pyenv shim, which adds ~0.1 s a call)."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return shutil.which(name)


def table(title: str, columns: list[str], rows: list[list], right_from: int = 1) -> Table:
    result = Table(title=title, box=box.MARKDOWN, title_justify="left", pad_edge=False)
    for index, column in enumerate(columns):
        result.add_column(column, justify="right" if index >= right_from else "left", no_wrap=True)
    for row in rows:
        result.add_row(*[str(cell) for cell in row])
    return result


class Targets:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str]] = []

    def add(self, name: str, met: bool | None, detail: str) -> str:
        verdict = "n/a" if met is None else ("PASS" if met else "MISS")
        self.rows.append((name, verdict, detail))
        return verdict


TARGETS = Targets()


# ==========================================================================================
# Section 1: tool speed on large trees
# ==========================================================================================

def count_tree(root: Path) -> dict:
    """What the tools will see: .py files (the tool's skip rules), lines, and the files that
    pass each stage of the tool's prefilter (transforms/reading/prefilter.py): one of the rules' words,
    then a reference to an API a rule acts on. Only the latter go through libcst."""
    from migrator.files import SKIPPED_DIRS  # the project's own discovery rules
    from transforms.reading.prefilter import has_reference, might_need_migration, parse_or_none

    files = lines = hits = references = size = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        for name in filenames:
            if name.endswith(".py"):
                data = (Path(dirpath) / name).read_bytes()
                files += 1
                size += len(data)
                lines += data.count(b"\n")
                if might_need_migration(data):
                    hits += 1
                    references += has_reference(data, parse_or_none(data))
    return {"files": files, "lines": lines, "bytes": size, "prefilter_hits": hits,
            "references": references}


def libcst_workdir(tree: Path, scratch: Path, name: str) -> tuple[Path, str]:
    """A working dir with .libcst.codemod.yaml and a copy of the tree inside it."""
    work = scratch / f"libcst-{name}"
    work.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "libcst.tool", "initialize", str(work)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.copytree(tree, work / "tree", symlinks=True)
    return work, "tree"


def measure_tree(label: str, tree: Path, scratch: Path, jobs: int, tools: dict, run_libcst=True) -> dict:
    info = count_tree(tree)
    log(f"{label}: {info['files']} .py files, {info['lines']:,} lines, "
        f"{info['prefilter_hits']} with a rule's word, {info['references']} with a reference")
    results: dict[str, measure.Measured] = {}
    logs = scratch / "logs"
    logs.mkdir(exist_ok=True)
    safe = re.sub(r"\W+", "_", label)
    if tools["ruff"]:
        # First, so the page cache is warm for everyone after it.
        log(f"  ruff check --select E,F on {label}")
        results["ruff"] = measure.run(
            [tools["ruff"], "check", "--select", "E,F", "--no-cache", "--exit-zero", str(tree)],
            stderr_path=logs / f"{safe}-ruff.err",
        )
    for command in ("scan", "diff"):
        log(f"  pmap-migrate {command} -j {jobs} on {label}")
        results[command] = measure.run(
            [*tools["pmap-migrate"], command, str(tree), "--no-progress", "-j", str(jobs)],
            stderr_path=logs / f"{safe}-{command}.err",
        )
    if run_libcst:
        work, relative = libcst_workdir(tree, scratch, safe)
        log(f"  python -m libcst.tool codemod noop.NOOPCommand -j {jobs} on a copy of {label}")
        results["libcst"] = measure.run(
            [sys.executable, "-m", "libcst.tool", "codemod", "noop.NOOPCommand", relative,
             "-j", str(jobs), "--hide-progress", "--no-format"],
            cwd=work, stderr_path=logs / f"{safe}-libcst.err",
        )
        shutil.rmtree(work / relative, ignore_errors=True)
    problems = []
    for name, result in results.items():
        allowed = {0, 1} if name in ("scan", "diff") else {0}
        if result.returncode not in allowed:
            problems.append(f"{name} exited {result.returncode}: {result.stderr_tail[-400:]}")
        elif name in ("scan", "diff") and "pmap-migrate: " not in result.stderr_tail:
            # A Python traceback also exits 1, the code for "pending": only the summary line
            # proves the tool ran over the tree.
            raise SystemExit(f"pmap-migrate {name} printed no summary (crashed?): "
                             f"{result.stderr_tail[-800:]}")
    if "libcst" in results:
        match = re.search(r"Failed to codemod (\d+) files", results["libcst"].stderr_tail)
        if match and int(match.group(1)):
            problems.append(f"libcst failed on {match.group(1)} files")
    for problem in problems:
        log(f"  [yellow]warning:[/yellow] {problem}")
    summary_line = re.findall(r"pmap-migrate: .*", results["scan"].stderr_tail)
    return {"label": label, "info": info, "results": results, "problems": problems,
            "summary": summary_line[-1] if summary_line else ""}


def unpack_packages(source: Path, root: Path) -> int:
    """Every wheel, sdist (.tar.gz, .zip) in `source` unpacked under `root`, one folder each;
    a folder of sources is copied as it is. Returns the number of packages."""
    import tarfile
    import zipfile

    root.mkdir(parents=True)
    archives = sorted(p for p in source.iterdir() if p.name.endswith((".whl", ".zip", ".tar.gz")))
    if not archives:
        shutil.copytree(source, root / source.name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        return 1
    for archive in archives:
        target = root / re.sub(r"(\.tar\.gz|\.whl|\.zip)$", "", archive.name)
        if archive.name.endswith(".tar.gz"):
            with tarfile.open(archive) as handle:
                handle.extractall(target, filter="data")
        else:
            with zipfile.ZipFile(archive) as handle:
                handle.extractall(target)
    return len(archives)


# Speed targets on wall time, as libcst-NOOP time / ours: (tree kind, command) -> at least.
GOALS = {
    ("mixed", "scan"): 10.0, ("mixed", "diff"): 10.0,
    ("allpmap", "scan"): 1.0, ("allpmap", "diff"): 1.0,
    ("jax", "scan"): 10.0,
}


def section_tool_speed(args, scratch: Path, tools: dict) -> dict:
    log("[bold]Section 1: tool speed[/bold]")
    trees = []
    spec = [
        ("generated 3% pmap", args.files, 0.03, "mixed"),
        ("generated all-pmap", args.allpmap_files, 1.0, "allpmap"),
    ]
    for label, files, fraction, kind in spec:
        root = scratch / f"tree-{kind}"
        log(f"generating {label}: {files} files (seed {args.seed})")
        gentree.generate_tree(root, files, fraction, seed=args.seed)
        trees.append((f"{label} ({files})", root, kind))
    if args.jax_package:
        import importlib.metadata
        import importlib.util  # where jax is installed; it is not imported

        installed = Path(importlib.util.find_spec("jax").origin).parent
        copy = scratch / "jax-package" / "jax"
        log(f"copying the installed jax package ({installed}) to a temporary directory")
        shutil.copytree(installed, copy, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
        trees.append((f"installed jax {importlib.metadata.version('jax')}", copy, "jax"))
    for index, given in enumerate(args.real_world):
        root = scratch / f"real-world-{index}"
        count = unpack_packages(Path(given), root)
        log(f"unpacked {count} packages from {given}")
        trees.append((f"real world ({count} packages)", root, "realworld"))
    for index, given in enumerate(args.tree):
        given = Path(given)
        copy = scratch / f"given-{index}" / "tree"
        log(f"copying {given} to a temporary directory")
        shutil.copytree(given, copy, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        trees.append((f"{given.name or given}", copy, "given"))

    measured = [measure_tree(label, root, scratch, args.jobs, tools) | {"kind": kind}
                for label, root, kind in trees]

    # Memory: the same generator at twice the size, our commands only.
    mem_root = scratch / "tree-double"
    log(f"generating the double tree: {2 * args.files} files, 3% pmap")
    gentree.generate_tree(mem_root, 2 * args.files, 0.03, seed=args.seed + 1)
    double_info = count_tree(mem_root)
    double = {}
    for command in args.memory_commands:
        log(f"  pmap-migrate {command} -j {args.jobs} on the double tree ({double_info['files']} files)")
        double[command] = measure.run(
            [*tools["pmap-migrate"], command, str(mem_root), "--no-progress", "-j", str(args.jobs)],
            stderr_path=scratch / "logs" / f"double-{command}.err",
        )
    shutil.rmtree(mem_root, ignore_errors=True)

    # ---- print ------------------------------------------------------------------------
    console.rule("[bold]1. Tool speed on large trees[/bold]")
    rows = []
    for tree in measured:
        info = tree["info"]
        for name in ("scan", "diff", "libcst", "ruff"):
            result = tree["results"].get(name)
            if result is None:
                continue
            what = {"scan": "pmap-migrate scan", "diff": "pmap-migrate diff",
                    "libcst": "libcst codemod NOOP", "ruff": "ruff check E,F"}[name]
            rows.append([tree["label"], what, info["files"], f"{info['lines']:,}",
                         info["prefilter_hits"], info["references"], f"{result.wall:.2f}",
                         f"{info['files'] / result.wall:,.0f}", f"{result.cpu:.2f}",
                         f"{100 * result.other_load:.0f}%", f"{result.tree_rss_mb:,.0f}",
                         f"{result.max_rss_mb:,.0f}", result.returncode])
    console.print(table(
        f"Wall time per command (-j {args.jobs} where the tool takes it; {os.cpu_count()} cores)",
        ["tree", "command", ".py files", "lines", "words", "references", "wall s", "files/s",
         "cpu s", "other load", "peak tree PSS MB", "max proc RSS MB", "exit"], rows, right_from=2))
    for tree in measured:
        if tree["summary"]:
            console.print(f"  {tree['label']}: {tree['summary']}")

    ratio_rows = []
    for tree in measured:
        r = tree["results"]
        row = [tree["label"]]
        for ours in ("scan", "diff"):
            row.append(f"{r['libcst'].wall / r[ours].wall:.2f}x" if "libcst" in r else "-")
        for ours in ("scan", "diff"):
            row.append(f"{r['libcst'].cpu / r[ours].cpu:.2f}x" if "libcst" in r else "-")
        for ours in ("scan", "diff"):
            row.append(f"{r[ours].wall / r['ruff'].wall:.1f}x" if "ruff" in r else "-")
        goals, verdicts = [], []
        for ours in ("scan", "diff"):
            need = GOALS.get((tree["kind"], ours))
            if need is None:
                continue
            goal = (f"{ours} no slower than NOOP (>= 1.0x)" if need == 1.0
                    else f"{ours} >= {need:g}x faster than NOOP")
            goals.append(goal)
            if "libcst" in r:
                speedup = r["libcst"].wall / r[ours].wall
                verdicts.append(TARGETS.add(
                    f"{tree['label']}: {goal}", speedup >= need,
                    f"NOOP {r['libcst'].wall:.2f} s / {ours} {r[ours].wall:.2f} s = {speedup:.2f}x"))
        goal = "; ".join(goals) or "(no target)"
        row += [goal, " / ".join(verdicts) or "-"]
        ratio_rows.append(row)
    console.print(table(
        "Ratios (same run)",
        ["tree", "NOOP / our scan", "NOOP / our diff", "(cpu) NOOP / scan", "(cpu) NOOP / diff",
         "our scan / ruff", "our diff / ruff", "target (on wall time)", "verdict"], ratio_rows))
    busy = [res.other_load for t in measured for res in t["results"].values()]
    if max(busy, default=0) > 0.15:
        console.print(f"  [bold]note:[/bold] other processes used up to {100 * max(busy):.0f}% of the "
                      "machine during these measurements; wall times are inflated by that, the "
                      "cpu-time ratios much less so.")

    mixed = next(t for t in measured if t["kind"] == "mixed")
    mem_rows = []
    for command in args.memory_commands:
        small, large = mixed["results"][command], double[command]
        growth = large.tree_rss_kb / max(1, small.tree_rss_kb)
        growth_max = large.max_rss_kb / max(1, small.max_rss_kb)
        verdict = TARGETS.add(
            f"peak memory of {command} flat in tree size (2x files -> <= 1.2x, tree PSS and max RSS)",
            growth <= 1.2 and growth_max <= 1.2,
            f"tree PSS {small.tree_rss_mb:.0f} -> {large.tree_rss_mb:.0f} MB ({growth:.2f}x), "
            f"max proc RSS {small.max_rss_mb:.0f} -> {large.max_rss_mb:.0f} MB ({growth_max:.2f}x), "
            f"{mixed['info']['files']} -> {double_info['files']} files")
        mem_rows.append([f"pmap-migrate {command}", mixed["info"]["files"], f"{small.wall:.1f}",
                         f"{small.cpu:.1f}", f"{small.tree_rss_mb:.0f}", f"{small.max_rss_mb:.0f}",
                         double_info["files"], f"{large.wall:.1f}", f"{large.cpu:.1f}",
                         f"{100 * large.other_load:.0f}%", f"{large.tree_rss_mb:.0f}",
                         f"{large.max_rss_mb:.0f}", f"{growth:.2f}x / {growth_max:.2f}x", verdict])
    console.print(table(
        "Memory vs tree size (3% pmap trees; PSS summed over the process tree, and the largest single process RSS)",
        ["command", "files", "wall s", "cpu s", "tree PSS MB", "max proc MB", "files (2x)",
         "wall s (2x)", "cpu s (2x)", "other load (2x)", "tree PSS MB (2x)", "max proc MB (2x)",
         "growth PSS / max", "<= 1.2x"], mem_rows))
    return {"measured": measured, "double": double}


# ==========================================================================================
# Sections 2 and 3: migrated code speed, check overhead
# ==========================================================================================

def jax_env(devices: int = 8) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(
        [env.get("XLA_FLAGS", ""), f"--xla_force_host_platform_device_count={devices}"]).strip()
    env["JAX_PLATFORMS"] = "cpu"
    # The thread pool check gives its workers (equivalence.runner.cpu_thread_pool_size):
    # without it a 1000-step loop over numpy batches can stall the baseline itself.
    from equivalence.runner import cpu_thread_pool_size

    env["PJRT_NPROC"] = str(cpu_thread_pool_size(devices))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_json(command: list[str], env: dict, timeout: float = 900) -> dict:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr or done.stdout)[-600:].strip() or f"exit {done.returncode}"}
    return json.loads(lines[-1])


def migrate_corpus(tools: dict, out: Path) -> None:
    done = subprocess.run(
        [*tools["pmap-migrate"], "apply", str(CORPUS), "--out-dir", str(out), "--no-progress"],
        capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"pmap-migrate apply failed ({done.returncode}): {done.stderr[-800:]}")
    log(f"  {done.stderr.strip().splitlines()[-1]}")


def run_check(tools: dict, programs: list[str], scratch: Path) -> dict:
    """Section 3's timed command; its JSON report also gives section 2 the HLO collectives."""
    report = scratch / "check.json"
    command = [*tools["pmap-migrate"], "check", str(CORPUS)]
    for program in programs:
        command += ["--entry", f"{program}:run"]
    command += ["--devices", "8", "--report-json", str(report)]
    log(f"pmap-migrate check corpus ({len(programs)} entries) --devices 8")
    result = measure.run(command, cwd=REPO, stdout_path=scratch / "check.out",
                         stderr_path=scratch / "check.err")
    data = json.loads(report.read_text()) if report.exists() else {"results": []}
    return {"measured": result, "report": data}


def baseline_runs(programs: list[str], migrated: Path, jobs: int, scratch: Path) -> dict:
    """Each original and migrated run() once, in a fresh process each: what any checker pays.
    Two at a time (original and migrated of one entry together), as `check` runs them."""
    env = jax_env(8)
    env["JAX_THREEFRY_PARTITIONABLE"] = "1"  # as check sets it

    def one(root: Path, program: str) -> measure.Measured:
        result = measure.run(
            [sys.executable, "-c",
             f"import sys; sys.path.insert(0, {str(root)!r}); import {program}; {program}.run()"],
            cwd=root, env=env, stderr_path=scratch / f"baseline-{root.name}-{program}.err")
        if result.returncode:
            log(f"  [yellow]warning:[/yellow] {root.name}/{program}.run() exited {result.returncode}")
        return result

    busy_before = measure.busy_seconds()
    start = time.perf_counter()
    runs = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for program in programs:
            pair = [pool.submit(one, CORPUS, program), pool.submit(one, migrated, program)]
            runs += [f.result() for f in pair]
    wall = time.perf_counter() - start
    cpu = sum(r.cpu for r in runs)
    other = max(0.0, measure.busy_seconds() - busy_before - cpu) / (wall * (os.cpu_count() or 1))
    return {"wall": wall, "cpu": cpu, "other_load": other, "per_process": [r.wall for r in runs]}


def _collective_summary(summary: dict) -> dict:
    """Two views of one side's compiled HLO (the check report's SUMMARY, or run_entry's):
    - `check`: equivalence.hlo's program_collectives() (operands per kind and device group,
      programs deduplicated by name and collectives), what `pmap-migrate check` compares;
    - `modules`: every program module (not data movement) as (collective ops, aliased params),
      with no deduplication, so it cannot be fooled by two programs that share a name."""
    check = {row["collective"]: row["operands"] for row in summary["program_collectives"]}
    modules = sorted((m["collectives"], m["aliased_parameters"])
                     for m in summary["modules"] if not m["data_movement"])
    return {"check": check, "modules": modules}


def collectives_from_report(report: dict) -> dict:
    found = {}
    for result in report.get("results", []):
        section = result.get("collectives") or {}
        details = section.get("details") or {}
        if "original" in details and "migrated" in details:
            entry = found[result["entry"].split(":")[0]] = {
                side: _collective_summary(details[side]) for side in ("original", "migrated")}
            entry["check_verdict"] = section.get("verdict", "?")
    return found


def collectives_by_run_entry(program: str, migrated: Path) -> dict:
    """Fallback when the check report lacks an entry: equivalence.runner.run_entry directly."""
    from equivalence.runner import run_entry

    sides = {"check_verdict": "-"}
    for side, root in (("original", CORPUS), ("migrated", migrated)):
        outcome = run_entry(root, f"{program}:run", devices=8)
        sides[side] = _collective_summary(outcome.compiled.to_dict()) if outcome.ok else None
    return sides


def codes_by_program(tools: dict, programs: list[str]) -> dict[str, set[str]]:
    """Finding codes of each corpus program, from `pmap-migrate scan --format json`."""
    done = subprocess.run([*tools["pmap-migrate"], "scan", str(CORPUS), "--format", "json",
                           "--no-progress"], capture_output=True, text=True, cwd=REPO)
    found: dict[str, set[str]] = {}
    for finding in json.loads(done.stdout or "{}").get("findings", []):
        found.setdefault(Path(finding["path"]).stem, set()).add(finding["code"])
    return found


def fewer_collectives(coll: dict) -> bool:
    """The migrated program compiles a subset of the original's collectives, fewer of them."""
    original, migrated = coll.get("original"), coll.get("migrated")
    if not original or not migrated:
        return False
    return set(migrated["check"]) <= set(original["check"]) and all(
        count <= original["check"][kind] for kind, count in migrated["check"].items()
    ) and sum(migrated["check"].values()) < sum(original["check"].values())


def collective_cells(coll: dict) -> tuple[list[str], bool]:
    """Table cells and whether the two sides compiled the same collectives."""
    original, migrated = coll.get("original"), coll.get("migrated")
    if not original or not migrated:
        return ["?", "?", "?", "?", coll.get("check_verdict", "?")], False
    same = set(original["check"]) == set(migrated["check"]) and (
        original["check"] == migrated["check"] or original["modules"] == migrated["modules"])
    cells = [
        f"{sum(original['check'].values())} / {sum(migrated['check'].values())}",
        f"{sum(c for c, _ in original['modules'])} / {sum(c for c, _ in migrated['modules'])}",
        f"{len(original['modules'])} / {len(migrated['modules'])}",
        "PASS" if same else "MISS",
        coll.get("check_verdict", "?"),
    ]
    return cells, same


def section_code_speed(args, scratch: Path, tools: dict, programs: list[str], migrated: Path,
                       check: dict) -> None:
    log("[bold]Section 2: migrated code speed[/bold]")
    env = jax_env(8)
    worker = str(HERE / "step_worker.py")
    timings = {}
    for program in programs:
        log(f"  run() x{args.reps} alternating: {program}")
        timings[program] = run_json(
            [sys.executable, worker, "run", str(CORPUS), str(migrated), program, str(args.reps)], env)
    steps = {}
    for program in STEP_PROGRAMS:
        if program in programs:
            log(f"  single pmapped step x{args.step_calls}: {program}")
            steps[program] = run_json(
                [sys.executable, worker, "step", str(CORPUS), str(migrated), program,
                 str(args.step_calls)], env)
    collectives = collectives_from_report(check["report"])
    by_design = codes_by_program(tools, programs) 
    for program in programs:
        if program not in collectives:
            log(f"  collectives of {program} via equivalence.runner.run_entry")
            collectives[program] = collectives_by_run_entry(program, migrated)

    console.rule("[bold]2. Migrated code speed (jax 0.10.2, 8 fake CPU devices)[/bold]")
    rows = []
    ratios = []
    ratio_misses, collective_misses, designed = [], [], []
    for program in programs:
        timing = timings[program]
        cells, same = collective_cells(collectives.get(program, {}))
        reasons = sorted(by_design.get(program, set()) & FEWER_BY_DESIGN)
        if not same and reasons and fewer_collectives(collectives.get(program, {})):
            cells[-2] = f"fewer: {', '.join(reasons)}"
            designed.append(program)
        elif not same:
            collective_misses.append(program)
        if "error" in timing:
            rows.append([program, "error", "", "", "", "", "", "", *cells])
            ratio_misses.append(program)
            log(f"  [red]{program}: {timing['error']}[/red]")
            continue
        o, m = timing["original"], timing["migrated"]
        ratio = m["median_ms"] / o["median_ms"]
        ratios.append(ratio)
        if ratio > 1.03:
            ratio_misses.append(program)
        rows.append([program, f"{o['median_ms']:.2f}", f"{m['median_ms']:.2f}", f"{ratio:.3f}",
                     "PASS" if ratio <= 1.03 else "MISS",
                     f"{o['p10_ms']:.2f}-{o['p90_ms']:.2f}", f"{m['p10_ms']:.2f}-{m['p90_ms']:.2f}",
                     f"{o.get('compiles_per_call', 0):g} / {m.get('compiles_per_call', 0):g}",
                     *cells])
    console.print(table(
        "run() steady state: median of alternating calls after one warm-up call each (at "
        f"least {args.reps}, and at least 1 s per side). Two-number columns: original / migrated",
        ["program", "orig ms", "migr ms", "ratio", "<=1.03", "orig p10-p90", "migr p10-p90",
         "compiles/run()", "check count", "coll. ops", "modules", "same coll.", "check verdict"], rows))
    if ratios:
        console.print(f"  geometric mean ratio over {len(ratios)} programs: "
                      f"{statistics.geometric_mean(ratios):.3f}")
    step_rows = []
    for program, timing in steps.items():
        if "error" in timing:
            step_rows.append([program, "error", "", "", "", "", "", ""])
            ratio_misses.append(f"{program} (step)")
            log(f"  [red]{program} step: {timing['error']}[/red]")
            continue
        o, m = timing["original"], timing["migrated"]
        ratio = timing["interval"]["ratio"]  # paired: see step_worker.ratio_interval
        if ratio > 1.03:
            ratio_misses.append(f"{program} (step)")
        control = timing["control_interval"]
        step_rows.append([program, f"{o['median_ms'] * 1e3:.0f}", f"{m['median_ms'] * 1e3:.0f}",
                          f"{ratio:.3f}", interval_text(timing["interval"]),
                          f"{control['ratio']:.3f} {interval_text(control)}",
                          "PASS" if ratio <= 1.03 else "MISS",
                          f"{o['p10_ms'] * 1e3:.0f}-{o['p90_ms'] * 1e3:.0f} / "
                          f"{m['p10_ms'] * 1e3:.0f}-{m['p90_ms'] * 1e3:.0f}"])
    if step_rows:
        console.print(table(
            f"Single pmapped step: median of {args.step_calls} calls each (block_until_ready), "
            "the side order rotated every call; A/A is the original against a second copy of itself",
            ["step", "original us", "migrated us", "ratio", "95% interval", "A/A ratio [interval]",
             "<= 1.03", "p10-p90 us orig / migr"], step_rows))
    TARGETS.add("migrated code within 3% of the original (every program and step)",
                not ratio_misses, "misses: " + (", ".join(ratio_misses) or "none"))
    check_counts_differ = [
        p for p in programs
        if collectives.get(p, {}).get("original") and collectives[p].get("migrated")
        and collectives[p]["original"]["check"] != collectives[p]["migrated"]["check"]]
    TARGETS.add("identical program collectives in compiled HLO (every program)",
                not collective_misses,
                "differ or unknown: " + (", ".join(collective_misses) or "none")
                + "; check's deduplicated operand count differs: "
                + (", ".join(check_counts_differ) or "none")
                + "; fewer by design (PM503 barrier -> sync_global_devices, PM410 host read "
                "without gather): " + (", ".join(designed) or "none"))


# Host idioms of pmap's device axis that the global style removes (counted in the source).
HOST_IDIOMS = {
    "stack x n": re.compile(r"\.stack\(\[[^\]]*\]\s*\*\s*n"),
    "broadcast_to": re.compile(r"broadcast_to\("),
    "device_put_replicated/sharded": re.compile(r"device_put_(?:replicated|sharded)\("),
    "size=(n, ...)/reshape(n, ...)": re.compile(r"(?:size=\(n,|\.reshape\(n,)"),
    "row 0 reads": re.compile(r"\[0\]"),
}


def section_global_style(args, scratch: Path, tools: dict, programs: list[str]) -> None:
    """--style global: run() loops and a single step against the original pmap, same run."""
    log("[bold]Section 4: --style global code speed[/bold]")
    out = scratch / "corpus-global"
    done = subprocess.run(
        [*tools["pmap-migrate"], "apply", "--style", "global", str(CORPUS), "--out-dir", str(out),
         "--no-progress"], capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"pmap-migrate apply --style global failed: {done.stderr[-800:]}")
    # Timed: the programs with no faithful helper left (a site on pmap's calling contract,
    # PM612, is global-style code and is timed). Counted apart: the fully global ones, with no
    # pmap-contract code at all (transforms/contract_names.py, as the JSON report says).
    helpers = ("_pmap_style_shard_map", "_pmap_compat", "_first_replica", "_nested_pmap_shard_map")
    helper_free = [p for p in programs
                   if not any(h in (out / f"{p}.py").read_text() for h in helpers)]
    fully_global = [p for p in programs if is_fully_global((out / f"{p}.py").read_text())]
    env = jax_env(8)
    worker = str(HERE / "step_worker.py")
    rows, runs = [], {}
    for program in helper_free:
        log(f"  run() x{args.reps} alternating (global style): {program}")
        timing = run_json([sys.executable, worker, "run", str(CORPUS), str(out), program,
                           str(args.reps)], env)
        before = (CORPUS / f"{program}.py").read_text()
        after = (out / f"{program}.py").read_text()
        idioms = sum(len(r.findall(before)) for r in HOST_IDIOMS.values())
        left = sum(len(r.findall(after)) for r in HOST_IDIOMS.values())
        if "error" in timing:
            rows.append([program, "error", "", "", "", "", f"{idioms} -> {left}"])
            continue
        o, m, interval = timing["original"], timing["migrated"], timing["interval"]
        runs[program] = interval
        rows.append([program, f"{o['median_ms']:.2f}", f"{m['median_ms']:.2f}",
                     f"{interval['ratio']:.3f}", interval_text(interval), speed_verdict(interval),
                     f"{idioms} -> {left}"])
    console.rule("[bold]4. --style global vs the original pmap (jax 0.10.2, 8 fake CPU devices)[/bold]")
    console.print(f"  fully global (no pmap-contract code): {len(fully_global)} of {len(programs)} "
                  "programs: " + ", ".join(fully_global))
    console.print(f"  timed (no faithful helper left): {len(helper_free)} of {len(programs)}")
    console.print(table(
        "run() steady state, alternating calls, as in section 2; 95% bootstrap interval over the "
        "pairs. Host idioms: stacks, broadcast_to, device_put_replicated/sharded, (n, ...) shapes, "
        "[0] reads, before -> after",
        ["program", "orig ms", "global ms", "ratio", "95% interval", "verdict", "host idioms"],
        rows))
    steps, step_rows = {}, []
    calls = 12 * args.step_calls
    for program in GLOBAL_STEP_PROGRAMS:
        if program not in helper_free:
            continue
        log(f"  blocked step x{calls} (global style): {program}")
        step = run_json([sys.executable, worker, "globalstep", str(CORPUS), str(out), program,
                         str(calls)], env)
        if "error" in step:
            log(f"  [red]global step of {program}: {step['error']}[/red]")
            step_rows.append([program, "error", "", "", "", "", ""])
            continue
        o, m, interval = step["original"], step["migrated"], step["interval"]
        steps[program] = interval
        step_rows.append([program, f"{o['median_ms'] * 1e3:.0f}", f"{m['median_ms'] * 1e3:.0f}",
                          f"{interval['ratio']:.3f}", interval_text(interval),
                          f"{step['control_interval']['ratio']:.3f} "
                          f"{interval_text(step['control_interval'])}",
                          speed_verdict(interval)])
    step_rows.append(dp_step_row(scratch, env, 2 * args.step_calls))
    if step_rows:
        console.print(table(
            f"Blocked step (a loop iteration where the program loops): {calls} calls per side, "
            "the side order rotated every call. A/A: the original against a second copy of "
            "itself, the noise floor of the same run",
            ["step", "original us", "global us", "ratio", "95% interval", "A/A ratio [interval]",
             "verdict"], step_rows))
    passed, detail = global_speed_target(helper_free, runs, steps)
    TARGETS.add("--style global code not slower than the original pmap (ratio <= 1.0)",
                passed, detail)


GLOBAL_STEP_PROGRAMS = tuple(step_worker.GLOBAL_SETUPS)  # programs with a blocked-step setup


def dp_step_row(scratch: Path, env: dict, rounds: int) -> list[str]:
    """The issue's data-parallel step (benchmarks/dp_step.py) at its small size: pmap against
    the global migration, blocked steps interleaved with an A/A control. Reported, not part of
    the target: its full size is meant for an accelerator (figures in README.md)."""
    log(f"  blocked data-parallel step x{rounds} (dp_step.py --size small)")
    out = scratch / "dp_step.json"
    done = subprocess.run(
        [sys.executable, str(HERE / "dp_step.py"), "all", str(scratch / "dp_step"), "--size",
         "small", "--rounds", str(rounds), "--json", str(out)],
        env=env, capture_output=True, text=True, timeout=900)
    label = "dp_step small (4 x 256^2, batch 64)"
    if done.returncode or not out.exists():
        log(f"  [red]dp_step: {(done.stderr or done.stdout)[-600:]}[/red]")
        return [label, "error", "", "", "", "", ""]
    sides = json.loads(out.read_text())["sides"]
    o, m, interval = sides["original"], sides["global"], sides["global"]["vs_original"]
    control = sides["control"]["vs_original"]
    return [label, f"{o['median_ms'] * 1e3:.0f}", f"{m['median_ms'] * 1e3:.0f}",
            f"{interval['ratio']:.3f}", interval_text(interval),
            f"{control['ratio']:.3f} {interval_text(control)}",
            f"{speed_verdict(interval)} (not in target)"]


def interval_text(interval: dict) -> str:
    return f"[{interval['low']:.3f}-{interval['high']:.3f}]"


def speed_verdict(interval: dict) -> str:
    """PASS at ratio <= 1.0; a ratio above 1.0 is a MISS when the whole interval is above 1.0
    (slower, beyond the noise) and a tie when the interval still holds 1.0."""
    if interval["ratio"] <= 1.0:
        return "PASS"
    return "MISS" if interval["low"] > 1.0 else "tie"


def global_speed_target(programs: list[str], runs: dict, steps: dict) -> tuple[bool, str]:
    """Every program needs a ratio <= 1.0. A run() tie (ratio above 1.0, interval holding 1.0)
    is decided by the program's blocked step, timed call by call, which resolves a few percent
    where whole runs cannot; a tie with no blocked step fails, and so does any MISS."""
    failed, decided_by_step = [], []
    for program in programs:
        run, step = runs.get(program), steps.get(program)
        if program in GLOBAL_STEP_PROGRAMS and step is None:
            failed.append(f"{program} (step not timed)")
        if run is None:
            failed.append(f"{program} (run() not timed)")
            continue
        step_failed = step is not None and step["ratio"] > 1.0
        if step_failed:
            failed.append(f"{program} step {step['ratio']:.3f} {interval_text(step)}")
        verdict = speed_verdict(run)
        if verdict == "MISS" or (verdict == "tie" and step is None):
            failed.append(f"{program} run() {run['ratio']:.3f} {interval_text(run)}")
        elif verdict == "tie" and not step_failed:
            decided_by_step.append(f"{program} (run() {run['ratio']:.3f} {interval_text(run)}, "
                                   f"step {step['ratio']:.3f} {interval_text(step)})")
    ratios = [i["ratio"] for i in (*runs.values(), *steps.values())]
    detail = (f"worst run() or step ratio {max(ratios):.3f}" if ratios else "nothing timed")
    detail += "; misses: " + (", ".join(failed) or "none")
    if decided_by_step:
        detail += "; run() ties decided by the blocked step: " + ", ".join(decided_by_step)
    return not failed and bool(ratios), detail


def section_check_overhead(check: dict, baseline: dict, programs: list[str]) -> None:
    console.rule("[bold]3. Check overhead[/bold]")
    measured = check["measured"]
    summary = check["report"].get("summary", {})
    per = baseline["per_process"]
    rows = [
        ["pmap-migrate check corpus (single-path, --devices 8, "
         f"{len(programs)} entries)", f"{measured.wall:.1f}", f"{measured.cpu:.1f}",
         f"{100 * measured.other_load:.0f}%",
         f"exit {measured.returncode}; " + ", ".join(f"{k} {v}" for k, v in summary.items())],
        [f"baseline: {2 * len(programs)} fresh processes, each run() once, 2 at a time",
         f"{baseline['wall']:.1f}", f"{baseline['cpu']:.1f}", f"{100 * baseline['other_load']:.0f}%",
         f"per process: median {statistics.median(per):.2f} s, sum {sum(per):.1f} s"],
    ]
    console.print(table("Check vs the least a checker pays (run right after each other)",
                        ["what", "wall s", "cpu s", "other load", "notes"], rows, right_from=1))
    ratio = measured.wall / baseline["wall"]
    cpu_ratio = measured.cpu / max(1e-9, baseline["cpu"])
    console.print(f"  check / baseline = {ratio:.2f}x wall, {cpu_ratio:.2f}x cpu  "
                  f"(the check also migrates a copy, dumps and parses HLO, saves and compares outputs)")
    for result in check["report"].get("results", []):
        if result.get("verdict") != "equivalent":
            differences = [d for name in ("outputs", "collectives", "donation", "sharding")
                           for d in (result.get(name) or {}).get("differences", [])]
            console.print(f"  check said {result['verdict']}: {result['entry']}: "
                          + ("; ".join(differences) or result.get("migrated", {}).get("error", "")))
    TARGETS.add("check overhead (reported, no target)", None,
                f"check / baseline = {ratio:.2f}x wall, {cpu_ratio:.2f}x cpu")


# ==========================================================================================
# Section 5: one file with many sites
# ==========================================================================================

MANY_SITES_BLOCKS = (50, 100, 200, 400)
MANY_SITES_QUICK = (25, 50, 100)
# --five-mb: also the 5 MB file (4,000 blocks, 8,800 sites, 5.1 MB), in both styles:
# about 5 minutes on 2 free cores, so not run by default.
FIVE_MB_BLOCKS = 4000
FIVE_MB_RSS_MAX_MB = 2048
# Targets: at the largest file, `--style global` costs less than 3x the faithful style (cpu),
# and its cost grows near-linearly with the sites (log-log slope over the sizes measured).
GLOBAL_OVER_FAITHFUL_MAX = 3.0
GROWTH_EXPONENT_MAX = 1.2


def growth_exponent(sizes: list[int], seconds: list[float]) -> float:
    """The least-squares slope of log(seconds) against log(size): 1 is linear, 2 quadratic."""
    xs = [math.log(x) for x in sizes]
    ys = [math.log(max(y, 1e-9)) for y in seconds]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def section_many_sites(args, scratch: Path, tools: dict) -> None:
    """`diff` of one generated module with N blocks (benchmarks/many_sites.py), in both styles,
    at growing N: how the cost grows with the sites of one file."""
    console.rule("[bold]5. One file with many sites[/bold]")
    logs = scratch / "logs"
    logs.mkdir(exist_ok=True)
    rows, measured = [], []
    # A one-block file: start-up and the fixed cost of a file, taken off before the slope,
    # which would otherwise read the start-up as sub-linear growth.
    fixed = {}
    for blocks in [1, *args.many_sites]:
        path = scratch / f"many_sites_{blocks}.py"
        sites = many_sites.write(path, blocks)
        by_style = {}
        for style in ("faithful", "global"):
            log(f"  pmap-migrate diff --style {style} on one file of {sites} sites")
            result = measure.run([*tools["pmap-migrate"], "diff", "--style", style,
                                  "--no-progress", str(path)],
                                 stderr_path=logs / f"many-{blocks}-{style}.err")
            if result.returncode not in (0, 1) or "pmap-migrate: " not in result.stderr_tail:
                raise SystemExit(f"pmap-migrate diff --style {style} failed on {path.name}: "
                                 f"{result.stderr_tail[-800:]}")
            by_style[style] = result
        faithful, global_ = by_style["faithful"], by_style["global"]
        if blocks == 1:
            fixed = {style: result.cpu for style, result in by_style.items()}
            continue
        measured.append((sites, faithful, global_))
        rows.append([blocks, sites, f"{path.stat().st_size / 1024:.0f}",
                     f"{faithful.wall:.1f}", f"{faithful.cpu:.1f}", f"{faithful.max_rss_mb:.0f}",
                     f"{global_.wall:.1f}", f"{global_.cpu:.1f}", f"{global_.max_rss_mb:.0f}",
                     f"{global_.cpu / faithful.cpu:.2f}x",
                     f"{max(faithful.other_load, global_.other_load):.0%}"])
    console.print(table(
        "`diff` of one file, both styles (cpu s: user + system; RSS: the process's peak)",
        ["blocks", "sites", "KB", "faithful wall s", "faithful cpu s", "faithful RSS MB",
         "global wall s", "global cpu s", "global RSS MB", "global / faithful (cpu)",
         "other load"], rows))
    sizes = [sites for sites, _, _ in measured]
    exponents = {style: growth_exponent(sizes, [r[index].cpu - fixed[style] for r in measured])
                 for index, style in ((1, "faithful"), (2, "global"))}
    console.print(f"  growth exponent (log-log slope of cpu s on sites, {sizes[0]}-{sizes[-1]} "
                  f"sites, less a one-block file's cpu s: faithful {fixed['faithful']:.2f}, "
                  f"global {fixed['global']:.2f}): faithful {exponents['faithful']:.2f}, "
                  f"global {exponents['global']:.2f}")
    sites, faithful, global_ = measured[-1]
    ratio = global_.cpu / faithful.cpu
    TARGETS.add(f"one file of {sites} sites: --style global < {GLOBAL_OVER_FAITHFUL_MAX:.0f}x "
                "the faithful style (cpu)", ratio < GLOBAL_OVER_FAITHFUL_MAX,
                f"{ratio:.2f}x ({global_.cpu:.1f} s against {faithful.cpu:.1f} s)")
    if len(sizes) > 1:
        TARGETS.add(f"--style global grows near-linearly with the sites of a file (slope <= "
                    f"{GROWTH_EXPONENT_MAX})", exponents["global"] <= GROWTH_EXPONENT_MAX,
                    f"slope {exponents['global']:.2f} (faithful {exponents['faithful']:.2f})")
    if args.five_mb:
        peak = max(faithful.max_rss_mb, global_.max_rss_mb)
        TARGETS.add(f"the 5 MB file ({sites} sites): each style under {FIVE_MB_RSS_MAX_MB} MB "
                    "peak RSS", peak < FIVE_MB_RSS_MAX_MB,
                    f"faithful {faithful.max_rss_mb:.0f} MB, global {global_.max_rss_mb:.0f} MB")


# ==========================================================================================

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], metavar="PATH",
                        help="also measure this tree (copied to a temp dir first); repeatable")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1,
                        help="worker processes for every tool that takes them (default: cores)")
    parser.add_argument("--no-jax-package", dest="jax_package", action="store_false",
                        help="do not measure the installed jax package (measured by default)")
    parser.add_argument("--real-world", action="append", default=[], metavar="PATH",
                        help="a folder of downloaded packages (wheels, sdists) to unpack and "
                        "measure, or a folder of sources; repeatable")
    parser.add_argument("--files", type=int, default=None, help="files in the 3%% tree (2000)")
    parser.add_argument("--allpmap-files", type=int, default=None,
                        help="files in the all-pmap tree (30; --quick 6)")
    parser.add_argument("--reps", type=int, default=None, help="run() repetitions per side (20)")
    parser.add_argument("--step-calls", type=int, default=None, help="single-step calls (200)")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--quick", action="store_true", help="small version, about 2 minutes")
    parser.add_argument("--sections", default="1,2,3,4,5",
                        help="which sections to run, e.g. 2,3 (4: --style global; 5: one file "
                        "with many sites)")
    parser.add_argument("--many-sites", default=None, metavar="N,N,...",
                        help="blocks of the many-sites files of section 5 (50,100,200,400; "
                        "--quick 25,50,100)")
    parser.add_argument("--five-mb", action="store_true",
                        help=f"section 5 also measures the 5 MB file ({FIVE_MB_BLOCKS} blocks; "
                        "several minutes), its targets judged there")
    args = parser.parse_args()
    quick = args.quick
    args.files = args.files or (300 if quick else 2000)
    args.allpmap_files = args.allpmap_files or (6 if quick else 30)
    args.reps = args.reps or (5 if quick else 20)
    args.step_calls = args.step_calls or (40 if quick else 200)
    args.memory_commands = ["scan"] if quick else ["scan", "diff"]
    args.many_sites = [int(n) for n in args.many_sites.split(",")] if args.many_sites else \
        list(MANY_SITES_QUICK if quick else MANY_SITES_BLOCKS)
    if args.five_mb:
        args.many_sites.append(FIVE_MB_BLOCKS)
    sections = {s.strip() for s in args.sections.split(",")}

    # This checkout's code, whatever `pmap-migrate` on PATH points to: the same entry point
    # as the installed script (migrator.cli:main), with the repository first on the path.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    tools = {"pmap-migrate": [sys.executable, "-m", "migrator.cli"], "ruff": executable("ruff")}
    import importlib.metadata  # versions only: the parent stays small (no jax import)

    console.rule("[bold]pmap-migrate benchmark[/bold]")
    console.print(
        f"python {sys.version.split()[0]} | jax {importlib.metadata.version('jax')} | "
        f"libcst {importlib.metadata.version('libcst')} | "
        f"ruff {_version([tools['ruff'], '--version']) if tools['ruff'] else 'not installed'} | "
        f"{os.cpu_count()} cores | -j {args.jobs} | seed {args.seed} | "
        f"{'quick' if quick else 'full'}: {args.files} files (3% pmap), "
        f"{args.allpmap_files} files (all pmap), {args.reps} reps, {args.step_calls} step calls")
    if not tools["ruff"]:
        console.print("  ruff not found: the ruff column is left out (pip install ruff)")

    programs = sorted(p.stem for p in CORPUS.glob("*.py"))
    if quick:
        programs = [p for p in programs if p in QUICK_PROGRAMS]
    # Originals that use what JAX 0.10 removed (device_put_replicated, nested pmap) cannot run
    # on the current side, which is why they need migrating; .ci/run checks them against
    # jax 0.4.38. Timing them against another JAX would measure JAX, not the migration.
    legacy_only = [p for p in programs
                   if LEGACY_ORIGINAL_MARKER in (CORPUS / f"{p}.py").read_bytes()]
    programs = [p for p in programs if p not in legacy_only]

    with tempfile.TemporaryDirectory(prefix="pmap-migrate-bench-") as scratch_name:
        scratch = Path(scratch_name)
        if "1" in sections:
            section_tool_speed(args, scratch, tools)
        if sections & {"2", "3"}:
            migrated = scratch / "corpus-migrated"
            log("pmap-migrate apply corpus --out-dir TMP")
            migrate_corpus(tools, migrated)
            check = run_check(tools, programs, scratch)  # timed for section 3; HLO for section 2
            if "3" in sections:  # right after the check, so both see the same machine load
                log("baseline: each original and migrated run() once in a fresh process")
                baseline = baseline_runs(programs, migrated, 2, scratch)
            if legacy_only:
                console.print("  not timed (their originals need jax < 0.10, see .ci/run): "
                              + ", ".join(legacy_only))
            if "2" in sections:
                section_code_speed(args, scratch, tools, programs, migrated, check)
            if "3" in sections:
                section_check_overhead(check, baseline, programs)
        if "4" in sections:
            section_global_style(args, scratch, tools, programs)
        if "5" in sections:
            section_many_sites(args, scratch, tools)

    console.rule("[bold]Summary[/bold]")
    met = sum(1 for _, v, _ in TARGETS.rows if v == "PASS")
    missed = sum(1 for _, v, _ in TARGETS.rows if v == "MISS")
    console.print(f"Targets: {met} met, {missed} missed")
    for name, verdict, detail in TARGETS.rows:
        console.print(f"  {verdict:<4}  {name}")
        console.print(f"        {detail}")
    console.print(f"total benchmark time {time.perf_counter() - T0:.0f} s")
    return 0


def _version(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True).stdout.split()[-1]
    except (OSError, IndexError):
        return "?"


if __name__ == "__main__":
    sys.exit(main())
