"""The functions a module with sites on pmap's calling contract gets (contract.py), once.

One template, with `# pmap-migrate: if FEATURE` blocks resolved as the faithful helper's are
(transforms/helpers/helper_templates.py), so a module carries only what its sites use:
- always: `_pmap_mesh` and `_per_device_shard_map` (about 40 lines);
- `multiprocess` (the module runs under jax.distributed): the mesh may span every process's
  devices, and `_across_processes` stands where one process has `jax.jit`: each process passes
  and gets back its host-local rows, `.lower(...).compile()` included;
- `devices` (a site passes pmap's `devices=`): the mesh is those devices, in their order.
`{jax}` and `{functools}` are the module's names for them; `{mesh}`, `{adapter}` and `{across}`
the functions' names.
"""

from __future__ import annotations

from transforms.helpers.helper_templates import MARKER_LINE, resolve_blocks
from transforms.module_helpers import renamed_text
from transforms.target import DEFAULT_TARGET

ADAPTER = "_per_device_shard_map"
MESH_OF_SIZE = "_pmap_mesh"
ACROSS_PROCESSES = "_across_processes"
# What a site's text may call; a helper module (`--helper-module`) defines them all.
CONTRACT_NAMES = (MESH_OF_SIZE, ADAPTER, ACROSS_PROCESSES)
# Every module-level name the functions define: where a module uses one for something of its
# own, they get free names instead (`_pmap_mesh_2`: module_info.ModuleInfo.contract_names).
DEFINED_NAMES = (*CONTRACT_NAMES, "_HostLocal")

_TEMPLATE = '''@{functools}.cache
# pmap-migrate: if devices
def {mesh}(size, axis_name, devices=None):
# pmap-migrate: else
def {mesh}(size, axis_name):
# pmap-migrate: end
# pmap-migrate: if multiprocess and devices
    """The mesh pmap maps an axis of `size` over: `devices` where pmap was given them, else
    this process's first `size` devices, or for a bigger size (several processes) every
    process's devices grouped by process, as pmap."""
    if devices is None:
        devices = {jax}.local_devices()
        if size > len(devices):
            devices = [d for p in range({jax}.process_count()) for d in {jax}.local_devices(p)]
    return {jax}.make_mesh((size,), (axis_name,), devices=list(devices)[:size],
                         axis_types=(AxisType.Auto,))
# pmap-migrate: end
# pmap-migrate: if multiprocess and not devices
    """The mesh pmap maps an axis of `size` over: this process's first `size` devices, or for a
    bigger size (several processes) every process's devices grouped by process, as pmap."""
    devices = {jax}.local_devices()
    if size > len(devices):
        devices = [d for p in range({jax}.process_count()) for d in {jax}.local_devices(p)]
    return {jax}.make_mesh((size,), (axis_name,), devices=devices[:size],
                         axis_types=(AxisType.Auto,))
# pmap-migrate: end
# pmap-migrate: if devices and not multiprocess
    """The mesh pmap maps an axis of `size` over: `devices` where pmap was given them, else the
    first `size` devices."""
    devices = {jax}.devices()[:size] if devices is None else list(devices)
    return {jax}.make_mesh((size,), (axis_name,), devices=devices, axis_types=(AxisType.Auto,))
# pmap-migrate: end
# pmap-migrate: if not devices and not multiprocess
    """The mesh pmap maps an axis of `size` over: the first `size` devices."""
    devices = {jax}.devices()[:size]
    return {jax}.make_mesh((size,), (axis_name,), devices=devices, axis_types=(AxisType.Auto,))
# pmap-migrate: end


@{functools}.lru_cache(maxsize=256)
# pmap-migrate: if devices
def {adapter}(
    function, axis_name, in_specs, out_specs, static_argnums=(), devices=None
):
    """`function` with pmap's calling contract, for jax.jit: shard_map over `devices` (pmap's
    devices=) or else the first n devices, n the leading axis of the mapped arguments (jit
    traces once per n, as pmap compiled once per size). `function` sees one device's row of
    each mapped argument (keyword arguments are mapped too), and its results get the device
    axis back unless out_specs is P(). Cached, so a site built again (in a function, a loop)
    reuses jit's compiled program, as pmap did."""
# pmap-migrate: else
def {adapter}(function, axis_name, in_specs, out_specs, static_argnums=()):
    """`function` with pmap's calling contract, for jax.jit: shard_map over the first n devices,
    n the leading axis of the mapped arguments (jit traces once per n, as pmap compiled once
    per size). `function` sees one device's row of each mapped argument (keyword arguments are
    mapped too), and its results get the device axis back unless out_specs is P(). Cached, so
    a site built again (in a function, a loop) reuses jit's compiled program, as pmap did."""
# pmap-migrate: end
    squeeze = lambda tree: {jax}.tree.map(lambda x: {jax}.lax.squeeze(x, (0,)), tree)

    def call(*args, **kwargs):
        static = {{i: args[i] for i in static_argnums}}
        mapped = tuple(a for i, a in enumerate(args) if i not in static)
        specs = in_specs if isinstance(in_specs, tuple) else (in_specs,) * len(mapped)

        def one_device(mapped, kwargs):
            rows = iter(a if s == P() else squeeze(a) for a, s in zip(mapped, specs))
            every = [static[i] if i in static else next(rows) for i in range(len(args))]
            out = function(*every, **squeeze(kwargs))
            return out if out_specs == P() else {jax}.tree.map(
                lambda x: {jax}.lax.expand_dims(x, (0,)), out)

        leaves = {jax}.tree.leaves(([a for a, s in zip(mapped, specs) if s != P()], kwargs))
# pmap-migrate: if devices
        mesh = {mesh}(leaves[0].shape[0], axis_name, devices)
# pmap-migrate: else
        mesh = {mesh}(leaves[0].shape[0], axis_name)
# pmap-migrate: end
        return {jax}.shard_map(one_device, mesh=mesh, in_specs=(specs, P(axis_name)),
                             out_specs=out_specs, check_vma=False)(mapped, kwargs)

# pmap-migrate: if multiprocess and devices
    call.pmap_contract = (axis_name, in_specs, out_specs, static_argnums, devices)
# pmap-migrate: end
# pmap-migrate: if multiprocess and not devices
    call.pmap_contract = (axis_name, in_specs, out_specs, static_argnums)
# pmap-migrate: end
    # Named as `function`, but without its signature: pmap donates and holds static only
    # arguments passed by position, and jit would read the signature to take keywords too.
    {functools}.update_wrapper(call, function)
    del call.__wrapped__
    return call
# pmap-migrate: if multiprocess


def {across}(per_device, **jit_options):
    """jax.jit(per_device), called as pmap is with several processes (jax.distributed): each
    process passes its host-local rows and gets its own rows back, and the program runs over
    every process's devices; `.lower(...).compile()` too. With one process, or under another
    trace, the jitted function itself."""
    program = {jax}.jit(per_device, **jit_options)
# pmap-migrate: end
# pmap-migrate: if multiprocess and devices
    axis_name, in_specs, out_specs, static_argnums, devices = per_device.pmap_contract
# pmap-migrate: end
# pmap-migrate: if multiprocess and not devices
    axis_name, in_specs, out_specs, static_argnums = per_device.pmap_contract
# pmap-migrate: end
# pmap-migrate: if multiprocess

    def one_process(args, kwargs):
        if {jax}.process_count() == 1:
            return True
        return any(isinstance(x, {jax}.core.Tracer) for x in {jax}.tree.leaves((args, kwargs)))

    def made_global(args, kwargs):
        """The mesh of every process's devices, and the arguments as global arrays on it
        (as shapes, where lowering is given shapes)."""
        mapped = [i for i in range(len(args)) if i not in static_argnums]
        specs = in_specs if isinstance(in_specs, tuple) else (in_specs,) * len(mapped)
        rows = {jax}.tree.leaves(([args[i] for i, s in zip(mapped, specs) if s != P()], kwargs))
# pmap-migrate: end
# pmap-migrate: if multiprocess and devices
        size = len(devices) if devices is not None else rows[0].shape[0] * {jax}.process_count()
        mesh = {mesh}(size, axis_name, devices)
# pmap-migrate: end
# pmap-migrate: if multiprocess and not devices
        mesh = {mesh}(rows[0].shape[0] * {jax}.process_count(), axis_name)
# pmap-migrate: end
# pmap-migrate: if multiprocess

        def to_global(tree, spec):
            def leaf(x):
                if isinstance(x, {jax}.ShapeDtypeStruct):
                    size = x.shape[:1] if spec == P() else (x.shape[0] * {jax}.process_count(),)
                    return {jax}.ShapeDtypeStruct(size + x.shape[1:], x.dtype,
                                                sharding=NamedSharding(mesh, spec))
                return x if isinstance(x, {jax}.Array) else {jax}.numpy.asarray(x)

            tree = {jax}.tree.map(leaf, tree)
            if any(isinstance(x, {jax}.ShapeDtypeStruct) for x in {jax}.tree.leaves(tree)):
                return tree
            return multihost_utils.host_local_array_to_global_array(tree, mesh, spec)

        args = [to_global(a, specs[mapped.index(i)]) if i in mapped else a
                for i, a in enumerate(args)]
        return mesh, args, to_global(kwargs, P(axis_name))

    def host_local(run):
        """`run` (the program, or one compiled from it) called with host-local rows."""
        def call(*args, **kwargs):
            mesh, args, kwargs = made_global(args, kwargs)
            out = run(*args, **kwargs)
            return multihost_utils.global_array_to_host_local_array(out, mesh, out_specs)

        return call

    def call(*args, **kwargs):
        if one_process(args, kwargs):
            return program(*args, **kwargs)
        return host_local(program)(*args, **kwargs)

    def lower(*args, **kwargs):
        if one_process(args, kwargs):
            return program.lower(*args, **kwargs)
        _, args, kwargs = made_global(args, kwargs)
        return _HostLocal(program.lower(*args, **kwargs), host_local)

    call.lower = lower
    return {functools}.wraps(per_device)(call)


class _HostLocal:
    """A lowered or compiled program whose compiled form takes and returns host-local rows, as
    pmap's did; its other attributes (as_text, cost_analysis, ...) are the program's."""

    def __init__(self, stage, host_local):
        self.stage, self.host_local = stage, host_local

    def compile(self, *args, **kwargs):
        return _HostLocal(self.stage.compile(*args, **kwargs), self.host_local)

    def __call__(self, *args, **kwargs):
        return self.host_local(self.stage)(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.stage, name)
# pmap-migrate: end
'''


def contract_functions_text(features: frozenset[str], renamed: dict[str, str] | None = None,
                            **names) -> str:
    """The contract functions for a module whose sites need `features` (a subset of
    {"multiprocess", "devices"}); `names`: `jax` and `functools` as the module names them;
    `renamed`: name -> the free name it has in this module, for names the module uses."""
    text = resolve_blocks(_TEMPLATE, DEFAULT_TARGET, features, "the contract template")
    text = text.format(across=ACROSS_PROCESSES, mesh=MESH_OF_SIZE, adapter=ADAPTER, **names)
    return renamed_text(text, renamed) if renamed else text


_HELPER_MODULE_IMPORTS = '''import functools

import jax
from jax.experimental import multihost_utils
from jax.sharding import AxisType, PartitionSpec as P
'''


def contract_module_text() -> str:
    """The contract functions as a helper module (`--helper-module`) holds them: every
    feature (each is a no-op where a site does not use it), after the imports they need."""
    return (f"{MARKER_LINE}\n{_HELPER_MODULE_IMPORTS}\n\n"
            + contract_functions_text(frozenset({"multiprocess", "devices"}),
                                      jax="jax", functools="functools"))
