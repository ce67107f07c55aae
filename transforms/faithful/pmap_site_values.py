"""`jax.pmap` used as a value (`mapper = jax.pmap`, `wrap(jax.pmap)`) -> `_pmap_compat`.

Part of the PmapToShardMap rule (transforms/faithful/pmap_sites.py). Every reference to pmap
that is not a site is recorded while visiting; at the end of the module a value whose every
use is a call becomes `_pmap_compat`, a drop-in with pmap's signature (the uses are classified
by transforms/faithful/pmap_values.py), and any other value is reported.
"""

from __future__ import annotations

import libcst as cst

from transforms.codes import Code
from transforms.faithful.multiprocess import migration_note
from transforms.faithful.pmap_hazards import site_claimed
from transforms.faithful.pmap_values import ReplaceByIdentity, classify, refusal
from transforms.helpers.pmap_compat_helper import COMPAT_HELPER_NAME


class ValueUses:
    """PmapToShardMap's handling of pmap values (a mixin: it uses the rule's state)."""

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._check_value_use(node)

    def visit_Name(self, node: cst.Name) -> None:
        self._names.note(node, self._defs)
        self._check_value_use(node)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute):
        return self._keep_value_node(original_node, updated_node)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return self._keep_value_node(original_node, updated_node)

    def _keep_value_node(self, original, updated):
        """A pmap value stays the very input node, so leave_Module can find and replace it."""
        if original in self._value_nodes:
            return original
        return updated

    def _check_value_use(self, node: cst.Name | cst.Attribute) -> None:
        if not self._is_pmap(node):
            return
        parent = self._parent(node)
        if isinstance(parent, (cst.ImportAlias, cst.AsName)):
            return
        if isinstance(parent, cst.Call) and parent.func is node:
            return  # the Call is the site
        if isinstance(parent, cst.Decorator):
            return
        if isinstance(parent, cst.Arg):
            call = self._parent(parent)
            if isinstance(call, cst.Call) and self._is_pmap_partial(call) and call.args[0] is parent:
                return
        scope = self._defs[-1] if self._defs else None
        self._values.append(classify(node, scope, self._parent, self._code))
        self._value_nodes.add(node)

    def _migrate_values(self, module: cst.Module) -> cst.Module:
        """pmap values whose every use is a call -> `_pmap_compat`; the others are reported."""
        replacements = {}
        for use in self._values:
            label = f"`{self._code(use.node)}`"
            if site_claimed(self, use.node):
                continue
            reason = refusal(use, self._names, lambda node: self._position(node)[0])
            if reason:
                self._report(
                    use.node, Code.PMAP_AS_VALUE,
                    f"{label} is used as a value and {reason.removeprefix('is ')}; not migrated "
                    "(the _pmap_compat drop-in replaces it only when every use is a call)",
                )
                continue
            how = f"bound to `{use.name}`" if use.name else f"passed to `{use.callee}`"
            if self._report(
                use.node, Code.PMAP_MIGRATED,
                f"{label} used as a value ({how}, every use a call) -> _pmap_compat, "
                f"pmap's signature on jax.jit + jax.shard_map{migration_note(self)}",
            ):
                self.migrated_sites += 1
                self._needs_compat = True
                replacements[id(use.node)] = cst.Name(
                    self._helper_name(COMPAT_HELPER_NAME), lpar=use.node.lpar,
                    rpar=use.node.rpar)
        return module.visit(ReplaceByIdentity(replacements)) if replacements else module
