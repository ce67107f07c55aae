"""The per-process idioms around pmap in a multi-process module (issue 12 item 3).

The faithful multi-process translation keeps pmap's host-local contract, so the code around
a site keeps its meaning as written:
- data chosen by `jax.process_index()` (a subscript, a slice, `shard(index=...)`): each
  process still feeds its own host-local slice;
- a per-process key `jax.random.fold_in(key, jax.process_index())`: still one stream per
  process, split per local device;
- a block run on process 0 only (`if jax.process_index() == 0:`): outputs are host-local as
  before, so process 0 reads its own rows (its logs are unchanged).
Each is reported (PM506, info) so a reviewer sees it was looked at and why it stays.

What changes is renamed: `jax.host_id` / `jax.host_count` / `jax.host_ids` and
`local_devices(host_id=...)` are deprecated aliases that warn on JAX 0.10 and will be removed;
they become `process_index` / `process_count` / `process_indices` / `process_index=` (PM507),
the same functions. Not covered here: `jax.device_count()` sizing a host-local batch (PM405)
and the psum host barrier (PM503 / PM504).

Runs only where MultiProcess found evidence (it runs first and decides in visit_Module).
"""

from __future__ import annotations

import libcst as cst

from transforms.codes import Code
from transforms.faithful.multiprocess import SCRATCH_KEY
from transforms.reading.snippets import one_line, shorten
from transforms.reporting import ReportingTransformer

PROCESS_INDEX = {"jax.process_index", "jax.host_id"}
FOLD_IN = {"jax.random.fold_in"}
RENAMED = {  # deprecated alias -> the same function's name
    "jax.host_id": "process_index",
    "jax.host_count": "process_count",
    "jax.host_ids": "process_indices",
}
LOCAL_DEVICES = {"jax.local_devices"}


class ProcessIdioms(ReportingTransformer):
    PREFILTER_WORDS = (rb"pmap",)  # like MultiProcess: only modules with a pmap site

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._active = False
        self._process_names: set[str] = set()  # names assigned `jax.process_index()`
        self._reported: set[cst.CSTNode] = set()

    def visit_Module(self, node: cst.Module) -> None:
        self._active = self.context.scratch.get(SCRATCH_KEY) is not None

    # -- what is a process index ------------------------------------------------------------

    def _is_process_index(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Call) and not node.args:
            return bool(self._qualified(node.func) & PROCESS_INDEX)
        return isinstance(node, cst.Name) and node.value in self._process_names

    def _mentions_process_index(self, node: cst.CSTNode) -> bool:
        found = []

        class Finder(cst.CSTVisitor):
            def on_visit(inner, child):  # noqa: N805 - libcst's visitor signature
                if not found and self._is_process_index(child):
                    found.append(child)
                return not found

        node.visit(Finder())
        return bool(found)

    def visit_Assign(self, node: cst.Assign) -> None:
        if self._active and self._is_process_index(node.value):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    self._process_names.add(target.target.value)

    # -- the kept idioms (PM506) ---------------------------------------------------------------

    def _kept(self, node: cst.CSTNode, what: str, why: str) -> None:
        if node in self._reported:
            return
        self._reported.add(node)
        self._report(node, Code.PROCESS_IDIOM_KEPT,
                     f"{what} `{shorten(one_line(node), 60)}` kept: {why}")

    def visit_Call(self, node: cst.Call) -> None:
        if not self._active:
            return
        if self._qualified(node.func) & FOLD_IN and len(node.args) == 2 and (
            self._mentions_process_index(node.args[1].value)
        ):
            self._kept(node, "per-process RNG", "each process draws its own stream, as before")
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value == "shard" and any(
            self._mentions_process_index(arg.value) for arg in node.args
        ):
            self._kept(node, "per-process data selection", DATA_KEPT)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if self._active and any(self._mentions_process_index(s) for s in node.slice):
            self._kept(node, "per-process data selection", DATA_KEPT)

    def visit_If(self, node: cst.If) -> None:
        test = node.test
        if (self._active and isinstance(test, cst.Comparison) and len(test.comparisons) == 1
                and isinstance(test.comparisons[0].operator, cst.Equal)):
            sides = (test.left, test.comparisons[0].comparator)
            if any(self._is_process_index(s) for s in sides) and any(
                isinstance(s, cst.Integer) and s.value == "0" for s in sides
            ):
                self._kept(test, "block run on process 0 only,", (
                    "outputs stay host-local, so process 0 reads its own rows"))

    # -- renamed aliases (PM507) -----------------------------------------------------------------

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        if not self._active:
            return updated_node
        names = self._qualified(original_node) & RENAMED.keys()
        if not names or isinstance(self._parent(original_node), (cst.ImportAlias, cst.AsName)):
            return updated_node
        new = RENAMED[names.pop()]
        if not self._report(original_node, Code.HOST_ALIAS_RENAMED, (
                f"`{one_line(original_node)}` (a deprecated alias that warns on JAX 0.10) -> "
                f"`{one_line(original_node.value)}.{new}`, the same function")):
            return updated_node
        return updated_node.with_changes(attr=cst.Name(new))

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if not self._active or not self._qualified(original_node.func) & LOCAL_DEVICES:
            return updated_node
        args = list(updated_node.args)
        for index, arg in enumerate(args):
            if arg.keyword is not None and arg.keyword.value == "host_id":
                if self._report(original_node, Code.HOST_ALIAS_RENAMED, (
                        "`local_devices(host_id=...)` (a deprecated alias) -> "
                        "`local_devices(process_index=...)`, the same argument")):
                    args[index] = arg.with_changes(keyword=cst.Name("process_index"))
        return updated_node.with_changes(args=args)


DATA_KEPT = ("each process still feeds its own host-local slice (leading axis "
             "jax.local_device_count()) to the migrated pmap")
