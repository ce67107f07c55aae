"""The equivalence check: run each entry, original and migrated, at each device count, and
compare outputs, collectives, donation and output sharding.

Verdicts per entry and device count:
- "equivalent": every section agrees;
- "different": a section differs, or the migrated side fails or times out while the original runs;
- "nondeterministic": a side disagreed with itself over its repeated runs (--repeat, default
  2): its outputs say nothing about the migration, so this is neither a pass nor a difference;
- "stalled": XLA:CPU's collective rendezvous stalled on a side (the runtime said so, see
  equivalence.runner.RENDEZVOUS_STALL): a harness stall, which says nothing about the program;
- "error": the check could not be made (the original itself fails or times out).
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import time
from pathlib import Path

from equivalence.compare import compare_outputs
from equivalence.layouts import INFERRED_NOTE, inferred_layouts
from equivalence.notebook_entry import is_notebook_entry
from equivalence.runner import RunOutcome, run_entry, worker_threads
from equivalence.sections import (
    DIFFERENT, EQUIVALENT, Section, collectives_section, donation_section, outputs_section,
    sharding_section, side_summary, through_layouts,
)

STALLED, ERROR = "stalled", "error"
NONDETERMINISTIC = "nondeterministic"
VERDICTS = (EQUIVALENT, DIFFERENT, NONDETERMINISTIC, STALLED, ERROR)
SIDES = ("original", "migrated")

# Who changed a differing output (EntryReport.attribution["verdict"]), and how it is said.
MIGRATION, UPGRADE, BOTH, UNKNOWN = "migration", "upgrade", "both", "unknown"
ATTRIBUTIONS = {
    MIGRATION: "the migration changed it",
    UPGRADE: "the JAX upgrade changed it",
    BOTH: "both the JAX upgrade and the migration changed it",
    UNKNOWN: "cannot say who changed it",
}
# Values shown per run for a leaf that disagrees with itself.
SHOWN_VALUES = 4


@dataclasses.dataclass
class EntryReport:
    entry: str
    devices: int
    verdict: str
    seconds: float
    original: dict
    migrated: dict
    sections: dict[str, Section]
    process: int = 0  # with --processes P > 1: which process of the job this compares
    processes: int = 1
    # The determinism guard: per side, the leaves that disagreed between its runs, each
    # {"path", "values_seen": [one entry per run]}; empty lists when each side agreed.
    nondeterminism: dict = dataclasses.field(default_factory=dict)
    # Who changed the differing outputs (see attribute): {"verdict", "message", "leaves", ...}.
    attribution: dict | None = None
    # The runs per side asked for (--repeat); a side whose first run failed ran once.
    repeat: int = 1

    @property
    def where(self) -> str:
        """`[8 devices]`, or `[8 devices, process 1 of 2]`."""
        process = f", process {self.process} of {self.processes}" if self.processes > 1 else ""
        return f"[{self.devices} devices{process}]"

    @property
    def label(self) -> str:
        return f"{self.entry}{self.where}"

    @property
    def nondeterministic(self) -> list[str]:
        """One line per leaf that disagreed with itself, e.g. `the original disagreed with
        itself over 2 runs: ['correct'] was 21, 35`."""
        lines = []
        for side in SIDES:
            runs = getattr(self, side).get("runs", 1)
            for leaf in self.nondeterminism.get(side, []):
                seen = ", ".join(leaf["values_seen"])
                who = "original" if side == "original" else "migrated program"
                lines.append(f"the {who} disagreed with itself over {runs} runs: "
                             f"{leaf['path']} was {seen}")
        return lines

    @property
    def differences(self) -> list[str]:
        """The failures (see `failures`), then each section's differences."""
        return self.failures + [f"{name}: {d}" for name, s in self.sections.items()
                                for d in s.differences]

    @property
    def failures(self) -> list[str]:
        """`original failed: ...` and `migrated failed: ...`, or one line when both sides
        failed with the same error (a program that fails before the migration matters, for
        example): two near-identical lines would hide that they agree. A stall is no failure
        of the program (see `stalls`)."""
        errors = {side: getattr(self, side).get("error") for side in SIDES
                  if getattr(self, side).get("error") and not getattr(self, side).get("stall")}
        if len(errors) == 2 and errors["original"] == errors["migrated"]:
            return [f"both sides failed the same way: {errors['original']}"]
        return [f"{side} failed: {error}" for side, error in errors.items()]

    @property
    def stalls(self) -> list[str]:
        """Sides whose run stalled in XLA:CPU's collective rendezvous, in the runtime's words."""
        return [f"{side} stalled in XLA:CPU's collective rendezvous: {getattr(self, side)['stall']}"
                for side in ("original", "migrated") if getattr(self, side).get("stall")]

    def to_dict(self) -> dict:
        return {
            "entry": self.entry,
            "devices": self.devices,
            **({"process": self.process, "processes": self.processes}
               if self.processes > 1 else {}),
            "verdict": self.verdict,
            "seconds": round(self.seconds, 3),
            "original": self.original,
            "migrated": self.migrated,
            **{name: dataclasses.asdict(section) for name, section in self.sections.items()},
            "nondeterminism": self.nondeterminism,
            **({"attribution": self.attribution} if self.attribution is not None else {}),
        }


@dataclasses.dataclass
class CheckOptions:
    devices: tuple[int, ...] = (8,)
    reference_python: str = sys.executable  # runs the original
    python: str = sys.executable  # runs the migrated code
    # Per entry: each run of an entry (each side, each repeat, each device count, and the
    # attribution's run of the original under the new JAX) is killed after this many seconds.
    timeout: float = 300.0
    jobs: int = 2
    rng_compat: bool = True  # see equivalence.runner: same random streams on old and new JAX
    processes: int = 1  # > 1: each side runs as a jax.distributed job (equivalence.multiprocess)
    # The determinism guard: each side runs this many times and must agree with itself; the
    # runs after the first capture no HLO (collectives and donation come from the first).
    # 1 turns the guard off.
    repeat: int = 2
    # When outputs differ across JAX versions, run the original under `python` too and say
    # whether the upgrade or the migration changed them (attribute).
    attribute: bool = True
    # --style global: entry -> output layouts (equivalence.layouts); None compares as is.
    layouts: dict | None = None
    # Where the programs run: "cpu" (fake devices) or an accelerator's real devices ("tpu").
    platform: str = "cpu"


def check(original_root: Path, migrated_root: Path, entries: list[str], options: CheckOptions):
    """Yield an EntryReport per (entry, device count[, process]), in order, running sides in
    parallel."""
    same_jax = options.reference_python == options.python
    threads = 2 if options.processes > 1 else max(1, options.jobs)
    with worker_threads(threads) as pool:
        for entry in entries:
            for devices in options.devices:
                yield from _check_entry(pool, Path(original_root), Path(migrated_root), entry,
                                        devices, options, same_jax)


def _run(root: Path, entry: str, devices: int, python: str, options: CheckOptions,
         hlo: bool = True, lane: int = 0) -> list[RunOutcome]:
    """One run of `entry`: its outcome per process (one with --processes 1). `lane`: the
    repeat's number, so that no two runs of a side share an interpreter (runner.run_entry)."""
    if options.processes > 1:
        from equivalence.multiprocess import run_entry_processes

        return run_entry_processes(root, entry, devices=devices, processes=options.processes,
                                   python=python, timeout=options.timeout,
                                   rng_compat=options.rng_compat, hlo=hlo)
    return [run_entry(root, entry, devices=devices, python=python, timeout=options.timeout,
                      rng_compat=options.rng_compat, hlo=hlo, platform=options.platform,
                      lane=lane)]


def _run_side(root: Path, entry: str, devices: int, python: str, options: CheckOptions
              ) -> list[list[RunOutcome]]:
    """One side's runs of `entry`: the first (with HLO), then its `options.repeat - 1`
    repeats, each with the whole `options.timeout`. A first run that failed or timed out
    stands for its side (compare_repeated): the side is not run again, so a hanging entry
    costs one timeout, not one per repeat."""
    runs = [_run(root, entry, devices, python, options, hlo=True)]
    if all(outcome.ok for outcome in runs[0]):
        runs += [_run(root, entry, devices, python, options, hlo=False, lane=repeat)
                 for repeat in range(1, max(1, options.repeat))]
    return runs


def _check_entry(pool, original_root, migrated_root, entry, devices, options, same_jax):
    """The reports of one entry at one device count: the two sides side by side, each run
    `options.repeat` times (_run_side), compared process by process."""
    start = time.perf_counter()
    sides = ((original_root, options.reference_python), (migrated_root, options.python))
    futures = {side: pool.submit(_run_side, root, entry, devices, python, options)
               for side, (root, python) in zip(SIDES, sides)}
    runs = {side: future.result() for side, future in futures.items()}
    seconds = time.perf_counter() - start
    # --style global: a process's host-local rows in the original against what the migrated
    # program returns in that process, through the same layout map.
    layouts = None if options.layouts is None else options.layouts.get(entry, ())
    inferred = layouts is not None and entry not in options.layouts and is_notebook_entry(entry)
    reports = []
    for process in range(len(runs["original"][0])):
        if inferred:
            layouts = _notebook_layouts(runs, process, devices // options.processes)
        report = compare_repeated(
            entry, devices, [run[process] for run in runs["original"]],
            [run[process] for run in runs["migrated"]], same_jax=same_jax, seconds=seconds,
            layouts=layouts)
        report.process, report.processes = process, options.processes
        report.repeat = max(1, options.repeat)
        if inferred and "layout" in report.sections:
            report.sections["layout"].notes.insert(0, INFERRED_NOTE)
        reports.append(report)
    differing = [r for r in reports if r.verdict == DIFFERENT
                 and r.sections.get("outputs", Section(EQUIVALENT)).verdict == DIFFERENT]
    if differing and options.attribute:
        if same_jax:
            for report in differing:
                report.attribution = _attribution(
                    MIGRATION, f"both sides ran jax {report.original['jax_version']}")
        else:
            extra = time.perf_counter()
            upgraded = _run(original_root, entry, devices, options.python, options, hlo=False)
            for report in differing:
                attribute(report, runs["original"][0][report.process],
                          upgraded[report.process], runs["migrated"][0][report.process],
                          layouts)
                report.seconds += time.perf_counter() - extra
    yield from reports


def _notebook_layouts(runs: dict, process: int, local_devices: int) -> tuple:
    """A notebook entry's layouts, read off the first runs' shapes (inferred_layouts); none
    when a side failed."""
    original, migrated = runs["original"][0][process], runs["migrated"][0][process]
    if not (original.ok and migrated.ok):
        return ()
    return inferred_layouts(original.output, migrated.output, local_devices)


def compare_repeated(entry: str, devices: int, originals: list[RunOutcome],
                     migrateds: list[RunOutcome], *, same_jax: bool, seconds: float = 0.0,
                     layouts=None) -> EntryReport:
    """compare_runs of the first runs, and the determinism guard over all of them: a side
    whose runs disagree makes the verdict "nondeterministic". A run that failed stands for
    its side (a stall or a failure in a repeat is still one)."""
    first = {side: next((r for r in runs if not r.ok), runs[0])
             for side, runs in zip(SIDES, (originals, migrateds))}
    report = compare_runs(entry, devices, first["original"], first["migrated"],
                          same_jax=same_jax, seconds=seconds, layouts=layouts)
    for side, runs in zip(SIDES, (originals, migrateds)):
        outcome = getattr(report, side)
        outcome["runs"] = len(runs)
        outcome["repeat_seconds"] = round(sum(r.seconds for r in runs[1:]), 3)
    if not (all(r.ok for r in originals) and all(r.ok for r in migrateds)):
        return report
    report.nondeterminism = {side: disagreements(runs)
                             for side, runs in zip(SIDES, (originals, migrateds))}
    if any(report.nondeterminism.values()):
        report.verdict = NONDETERMINISTIC
    return report


def disagreements(runs: list[RunOutcome]) -> list[dict]:
    """The leaves on which the runs of one side disagree (with the check's own tolerances),
    each with the values every run gave: the whole leaf when it is small, else the values at
    the first position that differed."""
    if len(runs) < 2:
        return []
    first = runs[0].output
    found: dict[str, tuple | None] = {}  # path -> the first differing index, or None
    for run in runs[1:]:
        for difference in compare_outputs(first, run.output):
            # A leaf that is not an array is never equal, not even to itself.
            if difference.comparable and difference.path not in found:
                index = (difference.values or {}).get("first") or [{"index": None}]
                found[difference.path] = index[0]["index"]
    result = []
    for path, index in found.items():
        result.append({"path": path, "values_seen": [_leaf_text(run.output, path, index)
                                                     for run in runs]})
    return result


def _leaf_text(output: dict, path: str, index) -> str:
    leaf = next((leaf for leaf in output["leaves"] if leaf["path"] == path), None)
    if leaf is None or "key" not in leaf:
        return f"<{output['treedef']}>" if path == "<root>" else "<not an array>"
    array = output["arrays"][leaf["key"]]
    if array.size <= SHOWN_VALUES:
        return str(array.tolist())
    if index is None:
        return f"{array.dtype}{list(array.shape)}"
    return f"{array[tuple(index)].item()} at {list(index)}"


def attribute(report: EntryReport, old: RunOutcome, upgraded: list[RunOutcome] | RunOutcome,
              migrated: RunOutcome, layouts=None) -> None:
    """Say who changed the outputs that differ: the original run again under the migrated
    side's JAX (`upgraded`) is compared with the original on the old JAX (did the upgrade
    change it?) and with the migrated run (did the migration change it?), leaf by leaf."""
    version = migrated.jax_version or "the new JAX"
    if isinstance(upgraded, list):
        upgraded = upgraded[0]
    if not upgraded.ok:
        why = upgraded.stall or upgraded.error
        report.attribution = _attribution(
            UNKNOWN, f"the original does not run on jax {version}: {why}"[:1000],
            upgraded=side_summary(upgraded))
        return
    upgrade = {d.path: d for d in compare_outputs(old.output, upgraded.output)}
    converted = upgraded
    if layouts is not None:
        converted, _ = through_layouts(upgraded, layouts)
    migration = {d.path: d for d in compare_outputs(converted.output, migrated.output)}
    differing = [d.path for d in compare_outputs(
        (through_layouts(old, layouts)[0] if layouts is not None else old).output,
        migrated.output)]
    leaves = []
    for path in differing:
        by_upgrade, by_migration = path in upgrade, path in migration
        who = (BOTH if by_upgrade and by_migration else UPGRADE if by_upgrade
               else MIGRATION if by_migration else BOTH)
        leaves.append({"path": path, "verdict": who, "message": ATTRIBUTIONS[who],
                       "upgrade": str(upgrade[path]) if by_upgrade else "",
                       "migration": str(migration[path]) if by_migration else ""})
    verdicts = {leaf["verdict"] for leaf in leaves}
    overall = verdicts.pop() if len(verdicts) == 1 else BOTH
    report.attribution = _attribution(
        overall, f"the original on jax {version} "
        + {MIGRATION: f"matches the original on jax {old.jax_version}; the migrated run "
                      "does not",
           UPGRADE: f"already differs from jax {old.jax_version} as the migrated run does",
           BOTH: f"differs from jax {old.jax_version}, and the migrated run differs from it "
                 "too"}[overall],
        leaves=leaves, upgraded=side_summary(upgraded))


def _attribution(verdict: str, why: str, **more) -> dict:
    return {"verdict": verdict, "message": ATTRIBUTIONS[verdict], "why": why, **more}


def compare_runs(
    entry: str, devices: int, original: RunOutcome, migrated: RunOutcome, *, same_jax: bool,
    seconds: float = 0.0, layouts=None,
) -> EntryReport:
    """`layouts`: with --style global, the entry's output layouts (possibly empty)."""
    sides = {"original": side_summary(original), "migrated": side_summary(migrated)}
    if not original.ok:
        # A stalled original proves nothing either way; any other failure is the original's own.
        verdict = STALLED if original.stall else ERROR
        return EntryReport(entry, devices, verdict, seconds, **sides, sections={})
    if not migrated.ok:
        verdict = STALLED if migrated.stall else DIFFERENT
        return EntryReport(entry, devices, verdict, seconds, **sides, sections={})
    layout_section = None
    if layouts is not None:
        original, layout_section = through_layouts(original, layouts)
    sections = {
        "outputs": outputs_section(original, migrated),
        "collectives": collectives_section(original, migrated, same_jax),
        "donation": donation_section(original, migrated),
        "sharding": sharding_section(original, migrated),
    }
    if layout_section is not None:
        sections["layout"] = layout_section
    verdict = DIFFERENT if any(s.verdict == DIFFERENT for s in sections.values()) else EQUIVALENT
    return EntryReport(entry, devices, verdict, seconds, **sides, sections=sections)


def summary(reports: list[EntryReport]) -> dict:
    verdicts = collections.Counter(r.verdict for r in reports)
    return {"checks": len(reports), **{v: verdicts.get(v, 0) for v in VERDICTS}}


def guard_cost(reports: list[EntryReport]) -> dict:
    """What the determinism guard cost: runs per side, and the worker seconds of the first
    runs and of the repeats (both sides, summed; sides and repeats run in parallel)."""
    first = repeats = 0.0
    runs = 1
    for r in reports:
        if r.process:  # a job's processes share their timing
            continue
        for side in SIDES:
            outcome = getattr(r, side)
            runs = max(runs, r.repeat, outcome.get("runs", 1))
            first += outcome.get("seconds", 0.0)
            repeats += outcome.get("repeat_seconds", 0.0)
    return {"runs_per_side": runs, "first_run_seconds": round(first, 1),
            "repeat_seconds": round(repeats, 1)}


def exit_code(reports: list[EntryReport]) -> int:
    """2 when some check could not be made (a broken original, or a harness stall), else 1 on
    any difference or a side that disagreed with itself, else 0."""
    counts = summary(reports)
    if counts[ERROR] or counts[STALLED]:
        return 2
    return 1 if counts[DIFFERENT] or counts[NONDETERMINISTIC] else 0
