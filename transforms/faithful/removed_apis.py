"""Report, or rename where it is the same function, APIs that pmap-era code uses and that JAX
removed (research §3, R15): `jax.tree_map`, `device_put_replicated/_sharded`, pmap internals.

Rules that are data: the table below maps a qualified name to its finding code, and the rename
table maps a removed name to its replacement for the target JAX.
"""

from __future__ import annotations

import libcst as cst

from transforms.codes import Code
from transforms.reporting import ReportingTransformer

REPORTED = {
    "jax.sharding.PmapSharding": Code.REMOVED_PMAP_INTERNALS,
    "jax.interpreters.pxla.ShardedDeviceArray": Code.REMOVED_PMAP_INTERNALS,
    "jax.pxla.ShardedDeviceArray": Code.REMOVED_PMAP_INTERNALS,
}
# jax_pmap_shmap_merge is folded away or reported by transforms/faithful/config_flags.py.
REPORTED_ATTRIBUTES = {"device_buffers": Code.REMOVED_PMAP_INTERNALS}
TREE_MAP = "jax.tree_map"


class RemovedApis(ReportingTransformer):
    # jax.tree_util.tree_map is common and fine: it must not send a file down the slow path.
    PREFILTER_WORDS = (
        rb"device_put_replicated", rb"device_put_sharded", rb"(?<!tree_util\.)tree_map",
        rb"PmapSharding", rb"ShardedDeviceArray", rb"device_buffers",
    )

    def _in_import(self, node: cst.CSTNode) -> bool:
        parent = self._parent(node)
        return isinstance(parent, (cst.ImportAlias, cst.AsName))

    def visit_Name(self, node: cst.Name) -> None:
        self._check_reference(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value in REPORTED_ATTRIBUTES and not self._qualified(node) & REPORTED.keys():
            self._report(node, REPORTED_ATTRIBUTES[node.attr.value],
                         f"`.{node.attr.value}` belongs to the removed pmap implementation")
            return
        self._check_reference(node)

    def _check_reference(self, node: cst.Name | cst.Attribute) -> None:
        names = self._qualified(node)
        if not names & REPORTED.keys() and TREE_MAP not in names:
            return  # (asked first: the parent lookup of _in_import costs more)
        if self._in_import(node):
            return
        for name in names & REPORTED.keys():
            self._report(node, REPORTED[name], f"`{name}` was removed from JAX; not migrated")
        if TREE_MAP in self._qualified(node) and isinstance(node, cst.Name):
            self._report(node, Code.TREE_MAP_RENAMED,
                         "`tree_map` imported from jax: change the import to "
                         "`jax.tree_util.tree_map` by hand")

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        if TREE_MAP not in self._qualified(original_node) or self._in_import(original_node):
            return updated_node
        replacement = "tree.map" if self.target.has_tree_module else "tree_util.tree_map"
        if not self._report(original_node, Code.TREE_MAP_RENAMED,
                            f"jax.tree_map -> jax.{replacement}"):
            return updated_node
        parts = replacement.split(".")
        value = updated_node.value
        for part in parts[:-1]:
            value = cst.Attribute(value=value, attr=cst.Name(part))
        return updated_node.with_changes(value=value, attr=cst.Name(parts[-1]))
