"""check's collectives on a pmap inside jit: what comes from where the data lives is a note, what
the program communicates is still compared.

jax 0.4.38 lowers `jax.jit(jax.pmap(f))` by running the whole jit on every device (replicas):
each device dynamic-slices its row of the inputs, runs `f`, writes its row of each output
into zeros, and one all-reduce per output (pxla's `_hlo_unshard`, metadata
`jit(f)/jit(main)/xla_pmap`) hands every device the whole output, replicated. The migrated
jax.jit over shard_map keeps the output sharded and needs no sum. Downstream, a jitted
function fed that output compiles for the same 8 devices on both sides: without collectives
on replicated inputs (original), with partitioner-added ones on sharded inputs (migrated).

The HLO tests read excerpts of real dumps (no JAX, fast); the check tests run the minimal
program on 8 fake devices, the original under jax 0.4.38 (marked `equivalence`).
"""

from __future__ import annotations

import pytest

from equivalence.hlo import CompiledSummary, parse_module, placed_modules

# jax 0.4.38, `jax.jit(jax.pmap(lambda x, s: (lax.psum(x, 'i'), x * s), in_axes=(0, None),
# axis_name='i'))`, optimised HLO (trimmed): the psum the function asks for, and the sums
# assembling its two outputs.
LEGACY_JIT_OF_PMAP = """\
HloModule jit__lambda_, is_scheduled=true, entry_computation_layout={(f32[8,1]{1,0}, f32[])->(f32[8,1]{1,0}, f32[8,1]{1,0})}, replica_count=8

ENTRY main.55 {
  all-reduce.19 = f32[1]{0} all-reduce(dynamic-slice_bitcast_fusion), replica_groups={{0,1,2,3,4,5,6,7}}, to_apply=region_0.15, metadata={op_name="jit(<lambda>)/jit(main)/pmap(<lambda>)/psum" source_file="rep.py" source_line=4}
  all-reduce.34 = f32[8,1]{1,0} all-reduce(bitcast_dynamic-update-slice_fusion.2), replica_groups={{0,1,2,3,4,5,6,7}}, to_apply=sum.30, metadata={op_name="jit(<lambda>)/jit(main)/xla_pmap" source_file="rep.py" source_line=5}
  all-reduce.44 = f32[8,1]{1,0} all-reduce(bitcast_dynamic-update-slice_fusion.1), replica_groups={{0,1,2,3,4,5,6,7}}, to_apply=sum.40, metadata={op_name="jit(<lambda>)/jit(main)/xla_pmap" source_file="rep.py" source_line=5}
  ROOT tuple.55 = (f32[8,1]{1,0}, f32[8,1]{1,0}) tuple(all-reduce.34, all-reduce.44)
}
"""

# A jitted reduction of replicated inputs (the original) and of sharded ones (the migrated
# run, jax 0.10.2: XLA's partitioner adds the all-reduce, metadata outside any shard_map).
QUIET_ORIGINAL = """\
HloModule jit_update_stats, is_scheduled=true, entry_computation_layout={(f32[12,32,6]{2,1,0})->f32[6]{0}}, num_partitions=8

ENTRY main.5 {
  ROOT reduce.4 = f32[6]{0} reduce(p, c), dimensions={0,1}, to_apply=region_0.0
}
"""
PARTITIONED = """\
HloModule jit_update_stats, is_scheduled=true, entry_computation_layout={(f32[12,4,6]{2,1,0})->f32[6]{0}}, num_partitions=8

ENTRY main.5 {
  %all-reduce.1 = f32[6]{0} all-reduce(%divide_reduce_fusion), channel_id=2, replica_groups=mesh['axis_0'=1,'axis_1'=8,'axis_2'=1] {'axis_1'}, use_global_device_ids=true, to_apply=%region_1.0.clone, metadata={op_name="jit(update_stats)/reduce_sum" stack_frame_id=17}
}
"""
# The same name with a psum written inside shard_map: the program's own collective.
IN_SHARD_MAP = PARTITIONED.replace("jit(update_stats)/reduce_sum",
                                   "jit(update_stats)/shard_map/psum")
EIGHT = "groups 0,1,2,3,4,5,6,7"


def test_the_legacy_jit_of_pmap_output_sums_are_apart_from_the_program_psum():
    summary = CompiledSummary([parse_module(LEGACY_JIT_OF_PMAP)])
    assert summary.program_collectives() == {f"all-reduce {EIGHT}": 1}
    assert summary.jit_of_pmap_assembly() == {f"all-reduce {EIGHT}": 2}


def test_a_partitioner_collective_in_a_function_the_original_compiled_without_any_is_placement():
    original = CompiledSummary([parse_module(QUIET_ORIGINAL)])
    migrated = CompiledSummary([parse_module(PARTITIONED)])
    placed = placed_modules(original, migrated)
    assert placed == {"jit_update_stats"}
    assert migrated.program_collectives(placed) == {}
    # A mesh over every axis of more than one device is all the devices.
    assert migrated.placement_collectives(placed) == {f"all-reduce {EIGHT}": 1}


@pytest.mark.parametrize("case", ["original communicates", "written in shard_map"])
def test_the_program_collectives_stay_compared(case):
    if case == "original communicates":  # the original's function had a collective itself
        original = CompiledSummary([parse_module(QUIET_ORIGINAL),
                                    parse_module(PARTITIONED.replace("reduce_sum", "psum"))])
        migrated = CompiledSummary([parse_module(PARTITIONED)])
    else:
        original = CompiledSummary([parse_module(QUIET_ORIGINAL)])
        migrated = CompiledSummary([parse_module(IN_SHARD_MAP)])
    placed = placed_modules(original, migrated)
    assert placed == set()
    assert migrated.program_collectives(placed) == {f"all-reduce {EIGHT}": 1}


# The minimal reproduction: before the rule, "all-reduce groups 0..7: removed (1 -> 0 operands)".
MINIMAL = """import jax
import jax.numpy as jnp
import numpy as np


def run():
    n = jax.local_device_count()
    x = jnp.arange(n * 3, dtype=jnp.float32).reshape(n, 3)
    stacked = jax.jit(jax.pmap(lambda x, s: jnp.stack([x * s, x + s]), in_axes=(0, None)))
    return {"stacked": np.asarray(stacked(x, 2.0))}
"""

# With a psum through jit-of-pmap, and a jitted reduction and sort of the pmap's output
# (evojax's observation statistics and ranking, corpus/real/evojax_es).
JIT_OF_PMAP = """import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


@jax.jit
def statistics(y):
    return jnp.sum(y, axis=(0, 1)), jnp.argsort(y[:, 0, 0])


def run():
    n = jax.local_device_count()
    x = jnp.arange(n * 3, dtype=jnp.float32).reshape(n, 3)
    stacked = jax.jit(jax.pmap(lambda x, s: jnp.stack([x * s, x + s]), in_axes=(0, None)))
    total = jax.jit(jax.pmap(lambda x: lax.psum(x, "i") * 2.0, axis_name="i"))
    y = stacked(x, 2.0)
    sums, order = statistics(y)
    return {"stacked": np.asarray(y), "sums": np.asarray(sums), "order": np.asarray(order),
            "total": np.asarray(total(x))}
"""


def check_jit_of_pmap(tmp_path, source, edit=lambda migrated: migrated):
    from conftest import legacy_python_or_skip
    from equivalence.check import CheckOptions, check
    from transforms.pipeline import migrate_source

    for side, text in (("original", source),
                       ("migrated", edit(migrate_source(source.encode()).source.decode()))):
        (tmp_path / side).mkdir()
        (tmp_path / side / "prog.py").write_text(text)
    options = CheckOptions(devices=(8,), reference_python=legacy_python_or_skip(), repeat=1)
    [report] = check(tmp_path / "original", tmp_path / "migrated", ["prog:run"], options)
    assert report.original["jax_version"] == "0.4.38"
    return report


@pytest.mark.equivalence  # two JAX processes; .ci/run runs `pytest -m equivalence`
def test_the_minimal_jit_of_pmap_is_equivalent_with_its_output_sum_as_a_note(tmp_path):
    report = check_jit_of_pmap(tmp_path, MINIMAL)
    assert report.verdict == "equivalent", report.differences
    collectives = report.sections["collectives"]
    assert collectives.details["original"]["program_collectives"] == []
    assert collectives.details["migrated"]["program_collectives"] == []
    assert collectives.details["original"]["jit_of_pmap_assembly"] == [
        {"collective": f"all-reduce {EIGHT}", "operands": 1}]
    [note] = collectives.notes
    assert note.startswith(f"the original's jit-of-pmap assembles its outputs: all-reduce {EIGHT}")


@pytest.mark.equivalence
def test_jit_of_pmap_is_equivalent_with_its_assembly_and_placement_as_notes(tmp_path):
    report = check_jit_of_pmap(tmp_path, JIT_OF_PMAP)
    assert report.verdict == "equivalent", report.differences
    collectives = report.sections["collectives"]
    assert collectives.verdict == "equivalent"
    details = collectives.details
    # The psum is compared; the output sums are notes (one operand: the two pmaps' sums of
    # one output each count once, as programs that communicate alike do).
    assert [r["collective"] for r in details["original"]["program_collectives"]] == [
        f"all-reduce {EIGHT}"]
    assert details["original"]["jit_of_pmap_assembly"] == [
        {"collective": f"all-reduce {EIGHT}", "operands": 1}]
    assert any("jit-of-pmap assembles its outputs" in n for n in collectives.notes), collectives.notes
    # `statistics` reduces and sorts sharded inputs in the migrated run only.
    assert any("jitted functions the original compiled without any (jit_statistics)" in n
               for n in collectives.notes), collectives.notes


@pytest.mark.equivalence
def test_a_missing_psum_in_a_jit_of_pmap_is_still_a_difference(tmp_path):
    psum = 'lax.psum(x, "i")'
    report = check_jit_of_pmap(tmp_path, JIT_OF_PMAP, lambda migrated: (
        migrated.replace(psum, "x") if psum in migrated else pytest.fail(migrated)))
    collectives = report.sections["collectives"]
    assert collectives.verdict == "different"
    assert collectives.differences == [f"all-reduce {EIGHT}: removed (1 -> 0 operands)"]
