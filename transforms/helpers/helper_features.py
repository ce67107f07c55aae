"""Which variant of `_pmap_style_shard_map` a module gets: the features its sites use.

The template (transforms/templates/pmap_style_shard_map.py) has a block per feature; a module's
helper holds the blocks of the features below that one of its sites needs, so a reviewer reads
only code that can run. Over-including a feature is always safe (its block changes nothing where
it is not used); leaving one out is not, so each is read from what the module shows:

- `static`, `donate`, `devices`: a site passes static_broadcasted_argnums, donate_argnums, or
  devices / backend / axis_size.
- `cached`: a site is evaluated more than once (in a function, a method, a loop, a lambda or a
  comprehension): its later evaluations reuse the programs the first one compiled, as pmap did.
  A site at module level (a decorator of a module-level def included) runs once.
- `committed`: arrays committed to other devices than the mesh's are moved onto it, as pmap
  moved them. Such arrays come from placing values on chosen devices, so the module shows it: it
  names `device_put*`, `devices()` / `local_devices()`, a sharding or mesh, `addressable_shards`,
  flax's `replicate` / `shard`, or a site passes `devices=`.
- `multiprocess`: the module shows multi-process use (transforms/faithful/multiprocess.py);
  that variant also keeps the device options, which its multi-process mesh reads.

A module with a `_pmap_compat` site (pmap's arguments only known at run time) gets every
feature: the drop-in passes every option. So does a notebook (its first cell needing the helper
gets it for the later cells too). A helper module (`--helper-module`) always holds the
full helper (helper_templates.FEATURES), which serves every module that imports it. A module
migrated before keeps its helper, unless a new site needs a feature that helper lacks: then it
gets the helper with the features of both (`features_of` reads them from the helper's text).
"""

from __future__ import annotations

import re

import libcst as cst

from transforms.helpers.helper_templates import FEATURES

# pmap's keyword -> the feature the helper needs for it.
SITE_OPTIONS = {
    "static_broadcasted_argnums": "static",
    "donate_argnums": "donate",
    "devices": "devices",
    "backend": "devices",
    "axis_size": "devices",
}
# Code that places arrays on chosen devices (see the module docstring).
PLACES_ARRAYS = re.compile(
    rb"device_put|devices\s*\(|sharding|Sharding|\bMesh\b|make_mesh|addressable_|"
    rb"\breplicate\b|\bshard\b|make_array_from"
)
# What an emitted helper's text shows of each feature. (A helper written before the features
# existed had all of them but multiprocess, and reads so.)
_SHOWN_BY = {
    "static": "static_argnums=()", "donate": "donate_argnums=()", "devices": "axis_size=None",
    "committed": "def onto_mesh(", "cached": '.setdefault("compiled"',
    "multiprocess": "multihost_utils",
}
# A notebook cell as migrator/notebooks.py hands it over: the first cell that needs the helper
# gets it, for every later cell, whose sites are not seen yet; so it gets every feature.
NOTEBOOK_CELL = re.compile(rb"__pmap_migrate_nb\d*_context__")
# Scopes whose code runs more than once per import of the module.
_REPEATED = (cst.FunctionDef, cst.Lambda, cst.For, cst.While, cst.CompFor)


def site_features(keywords: set[str], node: cst.CSTNode, parent) -> set[str]:
    """The features one site needs: its pmap keywords, and `cached` when `node` (the site, in
    the original module; `parent` maps a node to its parent) can be evaluated more than once."""
    features = {SITE_OPTIONS[k] for k in keywords if k in SITE_OPTIONS}
    if "devices" in keywords:
        features.add("committed")
    if _evaluated_again(node, parent):
        features.add("cached")
    return features


def _evaluated_again(node: cst.CSTNode, parent) -> bool:
    decorated = False
    while node is not None and not isinstance(node, cst.Module):
        if isinstance(node, _REPEATED) and not (decorated and isinstance(node, cst.FunctionDef)):
            return True
        decorated = isinstance(node, cst.Decorator)  # the next def is the one it decorates
        node = parent(node)
    return False


def module_features(
    sites: set[str], source: bytes, *, multiprocess: bool, compat: bool
) -> frozenset[str]:
    """The helper's features for a module whose sites need `sites`."""
    if compat or NOTEBOOK_CELL.search(source):
        return FEATURES
    features = set(sites)
    if PLACES_ARRAYS.search(source):
        features.add("committed")
    if multiprocess:
        features |= {"multiprocess", "devices"}
    return frozenset(features)


def features_of(helper: str) -> frozenset[str]:
    """The features of an emitted `_pmap_style_shard_map`, read from its text."""
    return frozenset(feature for feature, shown in _SHOWN_BY.items() if shown in helper)
