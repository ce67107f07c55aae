"""What a program compiled to: collectives and donation, read from XLA's optimised HLO dumps.

The worker runs with `--xla_dump_to`, so every module the entry compiled leaves a
`*.after_optimizations.txt`. From each we read the collectives (kind, operand count, device
groups) and the parameters aliased to outputs (donation).

Normalisation, so that only the migration shows up as a difference:
- legacy pmap compiles with replicas, shard_map with partitions: device groups are written
  as sorted tuples of ids whatever the spelling (`{{0,1}}`, `[2,4]<=[8]`, `mesh[...]`);
- the async forms (`all-reduce-start`) count as their op;
- an all-reduce of a constant is dropped (newer JAX folds `psum(constant)` before XLA sees it);
- modules JAX compiles for single eager operations (`jit_gather` for `x[0]`, `jit_squeeze`,
  ...) are "data movement", and eager jax.numpy reductions (`jit__mean` when the host calls
  `np.mean(x)` on a device array, which calls `x.mean()`) are "eager reductions": both are
  reported apart from the program's own collectives. On a value spread over devices such an
  operation runs on all of them; on legacy pmap's output it ran on one;
- the all-reduces with which jax < 0.5 assembles the outputs of a pmap inside jit (metadata
  `.../xla_pmap`, see `Collective.assembles_jit_of_pmap`), and the collectives XLA's
  partitioner adds to a jitted function the original compiled without any (see
  `placement_collectives`), are reported apart too: both come from where the data lives, not
  from what the program communicates.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from pathlib import Path

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_OP = re.compile(
    r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(?P<shape>.*?)\s(?P<kind>" + "|".join(KINDS) + r")"
    r"(?:-start)?\((?P<operands>[^)]*)\)(?P<attrs>.*)$"
)
_GROUPS = re.compile(r"replica_groups=(\{\{[^=]*?\}\}|\{\}|\[[^\]]*\][^,]*|mesh\[[^\]]*\]\s*\{[^}]*\})")
_PAIRS = re.compile(r"source_target_pairs=(\{\{[^=]*?\}\})")
_ALIAS = re.compile(r"input_output_alias=\{(?P<body>.*?)\}\s*(?:,|$)")
_OP_NAME = re.compile(r'op_name="(?P<name>[^"]*)"')
_HEADER = re.compile(r"^HloModule\s+(?P<name>[\w.\-]+)")
_COUNT = re.compile(r"(replica_count|num_partitions)=(\d+)")

# Modules JAX compiles for one eager operation outside the user's jitted code (data movement).
EAGER_OPERATIONS = {
    "gather", "squeeze", "convert_element_type", "broadcast_in_dim", "_multi_slice",
    "dynamic_slice", "slice", "concatenate", "reshape", "transpose", "_identity_fn",
    "device_put", "_reshard", "copy", "_take", "_unstack", "_where", "select_n", "_split",
    "expand_dims", "_getitem", "stack",
}
# jax.numpy's jitted reductions, compiled when run eagerly (np.mean(x) calls x.mean()).
EAGER_REDUCTIONS = {
    "_mean", "_var", "_std", "_reduce_sum", "_reduce_prod", "_reduce_max", "_reduce_min",
    "_reduce_all", "_reduce_any",
}


@dataclasses.dataclass(frozen=True)
class Collective:
    kind: str
    groups: str  # normalised device groups or source-target pairs
    operands: int
    op_name: str = ""  # the JAX operation it was lowered from (HLO metadata), "" if none

    def label(self) -> str:
        return f"{self.kind} {self.groups}"

    @property
    def assembles_jit_of_pmap(self) -> bool:
        """The all-reduce jax < 0.5 emits for each output of a pmap inside jit (pxla's
        `_hlo_unshard`): the jit runs on every replica, each writes its row into zeros and a
        cross-replica sum hands every device the whole output. Its metadata names the pmap
        primitive itself (`jit(f)/jit(main)/xla_pmap`), while a collective the mapped
        function asks for is named inside it (`.../pmap(f)/psum`). jit + shard_map keeps the
        output sharded and needs no such sum."""
        return self.kind == "all-reduce" and self.op_name.rsplit("/", 1)[-1] == "xla_pmap"

    @property
    def in_mapped_code(self) -> bool:
        """Lowered from a collective inside shard_map or pmap (one the program wrote), rather
        than added by XLA's partitioner to an ordinary jitted operation."""
        parts = self.op_name.split("/")
        return any(p == "shard_map" or p.startswith(("pmap(", "xmap(")) for p in parts)


@dataclasses.dataclass
class Module:
    name: str
    devices: int
    collectives: list[Collective]
    aliased_parameters: int

    @property
    def data_movement(self) -> bool:
        return self.name.removeprefix("jit_") in EAGER_OPERATIONS

    @property
    def eager_reduction(self) -> bool:
        return self.name.removeprefix("jit_") in EAGER_REDUCTIONS

    @property
    def eager(self) -> bool:
        """One eager operation outside the user's jitted code."""
        return self.data_movement or self.eager_reduction


def parse_module(text: str) -> Module:
    lines = text.splitlines()
    header = lines[0] if lines else ""
    match = _HEADER.match(header)
    counts = {k: int(v) for k, v in _COUNT.findall(header)}
    devices = max(counts.get("replica_count", 1), counts.get("num_partitions", 1))
    collectives = []
    for line in lines:
        if "from instruction" in line:
            continue
        op = _OP.match(line)
        if not op:
            continue
        operands = [o for o in op["operands"].split(",") if o.strip()]
        if op["kind"] == "all-reduce" and operands and all(
            re.search(r"%?constant[\w.]*\s*$", o.strip()) for o in operands
        ):
            continue
        name = _OP_NAME.search(op["attrs"])
        collectives.append(
            Collective(op["kind"], _normalise_groups(op["attrs"], devices), max(1, len(operands)),
                       name["name"] if name else "")
        )
    alias = _ALIAS.search(header)
    aliased = len(re.findall(r"\(\s*\d+\s*,", alias["body"])) if alias else 0
    return Module(match["name"] if match else "?", devices, collectives, aliased)


def _normalise_groups(attrs: str, devices: int) -> str:
    pairs = _PAIRS.search(attrs)
    if pairs:
        found = re.findall(r"\{(\d+),(\d+)\}", pairs.group(1))
        return "pairs " + " ".join(f"{a}->{b}" for a, b in sorted((int(a), int(b)) for a, b in found))
    groups = _GROUPS.search(attrs)
    everyone = "groups " + ",".join(str(d) for d in range(devices))
    if not groups or groups.group(1) in ("{}",):
        return everyone
    text = groups.group(1)
    if text.startswith("{{"):
        parsed = [sorted(int(d) for d in g.split(",") if d) for g in re.findall(r"\{([\d,]*)\}", text)]
        return "groups " + " | ".join(",".join(map(str, g)) for g in sorted(parsed))
    iota = re.fullmatch(r"\[(\d+),(\d+)\]<=\[(\d+)\]", text.strip())
    if iota:
        n_groups, size = int(iota.group(1)), int(iota.group(2))
        groups = [list(range(i * size, (i + 1) * size)) for i in range(n_groups)]
        return "groups " + " | ".join(",".join(map(str, g)) for g in groups)
    mesh = re.fullmatch(r"mesh\[(.*)\]\s*\{(.*)\}", text.strip())
    if mesh:
        axes = re.findall(r"'([^']+)'=(\d+)", mesh.group(1))
        reduced = set(re.findall(r"'([^']+)'", mesh.group(2)))
        # Over every axis of more than one device: everyone (XLA pads meshes with 1-axes).
        if reduced >= {name for name, size in axes if int(size) > 1}:
            return everyone
    return "raw " + text


@dataclasses.dataclass
class CompiledSummary:
    modules: list[Module]

    def program_collectives(self, placed: frozenset[str] = frozenset()) -> collections.Counter:
        """The program's own collectives; `placed`: names of modules whose partitioner-added
        collectives are left out (see `placed_modules`)."""
        return _count(self.program_modules(),
                      lambda m, c: not c.assembles_jit_of_pmap and not _placed(m, c, placed))

    def jit_of_pmap_assembly(self) -> collections.Counter:
        """The all-reduces assembling the outputs of a legacy pmap inside jit."""
        return _count(self.program_modules(), lambda m, c: c.assembles_jit_of_pmap)

    def placement_collectives(self, placed: frozenset[str]) -> collections.Counter:
        """The collectives XLA's partitioner added to the modules named in `placed`."""
        return _count(self.program_modules(), lambda m, c: _placed(m, c, placed))

    def program_modules(self) -> list[Module]:
        return [m for m in self.modules if not m.eager]

    def data_movement_collectives(self) -> collections.Counter:
        return _count(m for m in self.modules if m.data_movement)

    def eager_reduction_collectives(self) -> collections.Counter:
        return _count(m for m in self.modules if m.eager_reduction)

    @property
    def replica_lowered(self) -> bool:
        """Compiled by the legacy pmap (modules `pmap_<fn>`): collectives over replicas, with
        no channel ids, which XLA's CSE merges when two are identical. jit + shard_map
        (and JAX >= 0.8's pmap) lower them with channel ids, which older XLA never merges."""
        return any(m.name.startswith("pmap_") for m in self.modules if not m.eager)

    def donations(self) -> list[int]:
        """Aliased-parameter counts of the program modules that donate, sorted."""
        programs = _distinct(m for m in self.modules if not m.eager)
        return sorted(m.aliased_parameters for m in programs if m.aliased_parameters)

    def to_dict(self) -> dict:
        return {
            "program_collectives": _as_rows(self.program_collectives()),
            "jit_of_pmap_assembly": _as_rows(self.jit_of_pmap_assembly()),
            "data_movement_collectives": _as_rows(self.data_movement_collectives()),
            "eager_reduction_collectives": _as_rows(self.eager_reduction_collectives()),
            "donations": self.donations(),
            "modules": [
                {"name": m.name, "devices": m.devices, "collectives": len(m.collectives),
                 "aliased_parameters": m.aliased_parameters, "data_movement": m.data_movement,
                 "eager_reduction": m.eager_reduction}
                for m in self.modules
            ],
        }


def _distinct(modules) -> list[Module]:
    """One of each program: JAX may compile the same function again for inputs that are
    committed differently (new pmap and jit do, legacy pmap did not), which is not a change
    in what the program communicates."""
    seen, distinct = set(), []
    for module in modules:
        # Not keyed by name: JAX >= 0.8 names every pmap program `jit__fun`, so names cannot
        # tell programs apart on both sides alike; what it communicates and donates can. The
        # operands are summed per collective kind: XLA's combiners group them differently
        # per program and per JAX version (three one-operand all-reduces, or one of three),
        # and a key of the grouping kept two programs apart on one side and not the other.
        operands: collections.Counter = collections.Counter()
        for c in module.collectives:
            operands[c.label()] += c.operands
        key = (tuple(sorted(operands.items())), module.aliased_parameters)
        if key not in seen:
            seen.add(key)
            distinct.append(module)
    return distinct


def _count(modules, which=lambda module, collective: True) -> collections.Counter:
    """Operands per collective label over the distinct programs, of the collectives `which`
    selects."""
    selected = (dataclasses.replace(m, collectives=[c for c in m.collectives if which(m, c)])
                for m in modules)
    counter: collections.Counter = collections.Counter()
    for module in _distinct(selected):
        for c in module.collectives:
            counter[c.label()] += c.operands
    return counter


def _placed(module: Module, collective: Collective, placed: frozenset[str]) -> bool:
    return module.name in placed and not collective.in_mapped_code


def placed_modules(original: CompiledSummary, migrated: CompiledSummary) -> frozenset[str]:
    """Jitted functions whose collectives in the migrated run XLA's partitioner added: modules
    the original also compiled, by name (the same user function, `jit_update_stats`), and
    always without a collective of the program. Such a function communicates nothing itself;
    it computes on inputs that now arrive sharded (the migrated program's outputs stay on
    their devices, where a legacy jit-of-pmap replicated them on all), so XLA splits its work
    and adds an all-reduce to a reduction or an all-gather to a sort. Only collectives not
    lowered from shard_map / pmap code count as added (Collective.in_mapped_code)."""
    quiet: dict[str, bool] = {}
    for module in original.program_modules():
        own = [c for c in module.collectives if not c.assembles_jit_of_pmap]
        quiet[module.name] = quiet.get(module.name, True) and not own
    return frozenset(m.name for m in migrated.program_modules()
                     if quiet.get(m.name) and any(not c.in_mapped_code for c in m.collectives))


def _as_rows(counter: collections.Counter) -> list[dict]:
    return [{"collective": k, "operands": v} for k, v in sorted(counter.items())]


def read_dump(folder: Path | None) -> CompiledSummary:
    if folder is None or not folder.is_dir():
        return CompiledSummary([])
    files = sorted(folder.glob("*after_optimizations.txt"))
    return CompiledSummary([parse_module(f.read_text(errors="replace")) for f in files])
