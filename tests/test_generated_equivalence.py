"""Generated pmap programs (tests/program_generator.py), migrated and run on 8 fake devices.

For each program: the tool does not crash, its output parses, a second migration changes
nothing, every pmap site yields a PM100 finding, and `check` finds the migrated program
equivalent to the original (outputs, collectives, donation).

- The CI test draws a few programs, seeded (derandomize), so CI is reproducible and short.
- The slow sweeps draw many more (`python3 -m pytest -m slow tests/test_generated_equivalence.py`);
  PMAP_MIGRATE_FUZZ_EXAMPLES (and PMAP_MIGRATE_FUZZ_LEGACY_EXAMPLES for the legacy one)
  override their example counts. One of them runs the original under the legacy interpreter
  (jax 0.4.38, the real legacy pmap); another migrates for --target-jax 0.4.38 and runs both
  sides there.
- Every difference fails the test. The one failure the sweeps have found so far was in the
  check itself (it deduplicated compiled programs by name, and new pmap names every program
  jit__fun); it is fixed in equivalence/hlo.py, with a regression test in test_harness.py.
"""

from __future__ import annotations

import difflib
import os
import sys
import tempfile
from pathlib import Path

import libcst as cst
import pytest
from conftest import legacy_python_or_skip
from hypothesis import HealthCheck, Phase, given, settings
from program_generator import ENTRY, MODULE_NAME, GeneratedProgram, pmap_programs

from equivalence.check import EQUIVALENT, CheckOptions, check
from transforms.pipeline import migrate_source
from transforms.target import DEFAULT_TARGET, TargetJax

SITE_CODES = {"PM100", "PM201", "PM202", "PM203", "PM204", "PM205", "PM206", "PM207", "PM208",
              "PM209", "PM210"}
SWEEP_EXAMPLES = int(os.environ.get("PMAP_MIGRATE_FUZZ_EXAMPLES", "200"))
LEGACY_SWEEP_EXAMPLES = int(
    os.environ.get("PMAP_MIGRATE_FUZZ_LEGACY_EXAMPLES",
                   os.environ.get("PMAP_MIGRATE_FUZZ_EXAMPLES", "100"))
)
TIMEOUT = 180.0


def _describe(program: GeneratedProgram, migrated: bytes | None = None) -> str:
    text = f"\n--- generated program ({program.sites} sites) ---\n{program.source}"
    if migrated is not None:
        diff = difflib.unified_diff(
            program.source.splitlines(keepends=True), migrated.decode().splitlines(keepends=True),
            "original", "migrated", n=0,
        )
        # The generated helper is the same in every program: show only the rewritten sites.
        rewritten = [line for line in diff if line.startswith(("-", "@@")) or (
            line.startswith("+") and "_pmap_style_shard_map" in line)]
        text += "--- rewritten sites ---\n" + "".join(rewritten)
    return text


def migrate_and_check(
    program: GeneratedProgram, reference_python: str = sys.executable,
    python: str = sys.executable, target: TargetJax = DEFAULT_TARGET,
) -> None:
    """Raise AssertionError, with the program and its rewrite, unless all properties hold."""
    source = program.source.encode()
    result = migrate_source(source, target)  # must not raise
    try:
        cst.parse_module(result.source)
        compile(result.source, f"{MODULE_NAME}.py", "exec")
    except Exception as error:
        raise AssertionError(
            f"migrated output does not parse: {error}{_describe(program, result.source)}"
        ) from error
    again = migrate_source(result.source, target)
    assert again.source == result.source, "second migration changed the output" + _describe(program)
    site_findings = [f for f in result.findings if f.code in SITE_CODES]
    assert [f.code for f in site_findings] == ["PM100"] * program.sites, (
        f"expected {program.sites} PM100 findings, got "
        f"{[f.to_text() for f in result.findings]}" + _describe(program)
    )
    left = [f.to_text() for f in again.findings if f.code in SITE_CODES]
    assert left == [], (
        f"pmap sites left after migration: {left}" + _describe(program, result.source))

    with tempfile.TemporaryDirectory(prefix="pmap-migrate-gen-") as work:
        original_root, migrated_root = Path(work, "original"), Path(work, "migrated")
        original_root.mkdir()
        migrated_root.mkdir()
        (original_root / f"{MODULE_NAME}.py").write_bytes(source)
        (migrated_root / f"{MODULE_NAME}.py").write_bytes(result.source)
        options = CheckOptions(devices=(8,), timeout=TIMEOUT, reference_python=reference_python,
                               python=python)
        (report,) = list(check(original_root, migrated_root, [ENTRY], options))
    if report.verdict == EQUIVALENT:
        return
    what = "generator bug? the original itself fails" if report.verdict == "error" else "tool bug?"
    differences = "\n".join(f"  {d}" for d in report.differences) or "  (none listed)"
    raise AssertionError(
        f"check verdict {report.verdict!r} ({what}); jax {report.original.get('jax_version')}"
        f" -> {report.migrated.get('jax_version')}\ndifferences:\n{differences}"
        + _describe(program, result.source)
    )


# -- the tests ----------------------------------------------------------------------------------


def run_examples(test_settings: settings, **check_arguments) -> None:
    """Check every drawn program; a failure fails the test (the sweeps shrink it). The number
    of programs checked goes to stderr (`pytest -s` shows it), for the sweep's figures."""
    checked = []

    @test_settings
    @given(pmap_programs())
    def examples(program):
        migrate_and_check(program, **check_arguments)
        checked.append(program.sites)

    examples()
    print(f"\n{len(checked)} generated programs ({sum(checked)} pmap sites) checked",
          file=sys.stderr)


def test_generated_programs_are_equivalent():
    """CI: six programs, seeded (derandomize): the same programs on every run."""
    run_examples(settings(max_examples=6, derandomize=True, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow],
                          # No shrinking in CI (each step runs two processes): the failing
                          # program is printed whole; the slow sweeps shrink.
                          phases=[Phase.explicit, Phase.reuse, Phase.generate]))


@pytest.mark.slow
def test_generated_programs_sweep():
    """Original and migrated program both under the current JAX (pmap is its shim)."""
    run_examples(settings(max_examples=SWEEP_EXAMPLES, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow]))


@pytest.mark.slow
def test_generated_programs_sweep_legacy_reference():
    """The original under jax 0.4.38 (the legacy pmap), the migrated program under current JAX."""
    run_examples(
        settings(max_examples=LEGACY_SWEEP_EXAMPLES, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow]),
        reference_python=legacy_python_or_skip(),
    )


@pytest.mark.slow
def test_generated_programs_sweep_old_target():
    """--target-jax 0.4.38 (jax.experimental.shard_map, check_rep=False): the original and the
    migrated program both under the legacy interpreter."""
    python = legacy_python_or_skip()
    run_examples(
        settings(max_examples=LEGACY_SWEEP_EXAMPLES, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow]),
        reference_python=python, python=python, target=TargetJax.parse("0.4.38"),
    )


# -- --style global ---------------------------------------------------------------------------
GLOBAL_SWEEP_EXAMPLES = int(os.environ.get("PMAP_MIGRATE_FUZZ_GLOBAL_EXAMPLES", "500"))
GLOBAL_CODES = SITE_CODES | {"PM600"}


def migrate_and_check_global(program: GeneratedProgram, tally: dict) -> None:
    """--style global: each site is either rewritten global (PM600) or faithful (PM100, with
    a PM60x finding saying why); a program with a global site is checked through the layout
    map and must be equivalent. Only a wrong rewrite fails; a fallback never does."""
    source = program.source.encode()
    result = migrate_source(source, style="global")
    compile(result.source, f"{MODULE_NAME}.py", "exec")
    again = migrate_source(result.source, style="global")
    assert again.source == result.source, "second migration changed the output" + _describe(program)
    codes = [f.code for f in result.findings]
    assert codes.count("PM600") + codes.count("PM100") == program.sites, (
        f"{program.sites} sites, findings {[f.to_text() for f in result.findings]}"
        + _describe(program))
    tally["programs"] += 1
    if "PM600" not in codes:
        return  # all faithful: the faithful sweeps check that translation
    tally["with_global_sites"] += 1
    tally["global_sites"] += codes.count("PM600")
    if "PM100" not in codes:
        tally["fully_global"] += 1
    with tempfile.TemporaryDirectory(prefix="pmap-migrate-gen-") as work:
        original_root, migrated_root = Path(work, "original"), Path(work, "migrated")
        original_root.mkdir()
        migrated_root.mkdir()
        (original_root / f"{MODULE_NAME}.py").write_bytes(source)
        (migrated_root / f"{MODULE_NAME}.py").write_bytes(result.source)
        layouts = {f"{MODULE_NAME}:{f.function}": f.outputs for f in result.layouts}
        options = CheckOptions(devices=(8,), timeout=TIMEOUT, layouts=layouts)
        (report,) = list(check(original_root, migrated_root, [ENTRY], options))
    assert report.verdict == EQUIVALENT, (
        f"check verdict {report.verdict!r}\n" + "\n".join(f"  {d}" for d in report.differences)
        + _describe(program, result.source))
    tally["checked"] += 1


def run_global_examples(test_settings: settings) -> dict:
    tally = dict.fromkeys(
        ("programs", "with_global_sites", "global_sites", "fully_global", "checked"), 0)

    @test_settings
    @given(pmap_programs(max_sites=1, global_producers=True))
    def examples(program):
        migrate_and_check_global(program, tally)

    examples()
    print(f"\nglobal style: {tally['programs']} generated programs, {tally['with_global_sites']} "
          f"with global sites ({tally['global_sites']} sites, {tally['fully_global']} programs "
          f"fully global), {tally['checked']} checked equivalent", file=sys.stderr)
    return tally


def test_generated_programs_global_style():
    """CI: a few seeded programs in the global style."""
    tally = run_global_examples(settings(
        max_examples=12, derandomize=True, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow],
        phases=[Phase.explicit, Phase.reuse, Phase.generate]))
    assert tally["programs"] == 12


@pytest.mark.slow
def test_generated_programs_global_style_sweep():
    """PMAP_MIGRATE_FUZZ_GLOBAL_EXAMPLES programs (500 by default) in the global style."""
    run_global_examples(settings(max_examples=GLOBAL_SWEEP_EXAMPLES, deadline=None,
                                 suppress_health_check=[HealthCheck.too_slow]))
