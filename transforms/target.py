"""The JAX version the generated code is written for (`--target-jax`)."""

from __future__ import annotations

import dataclasses
import re

NEWEST = "0.10"


@dataclasses.dataclass(frozen=True, order=True)
class TargetJax:
    """A JAX release as (major, minor, patch); decides which public spellings exist."""

    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: str) -> TargetJax:
        match = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.(\d+))?\s*", text or "")
        if not match:
            raise ValueError(f"not a JAX version: {text!r} (expected e.g. 0.10 or 0.4.38)")
        major, minor, patch = match.groups()
        return cls(int(major), int(minor), int(patch or 0))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    @property
    def has_public_shard_map(self) -> bool:
        """`jax.shard_map` with `check_vma` exists from 0.6.1 (research §3)."""
        return (self.major, self.minor, self.patch) >= (0, 6, 1)

    @property
    def has_tree_module(self) -> bool:
        """`jax.tree.map` exists from 0.4.25; `jax.tree_map` is gone from 0.6.0."""
        return (self.major, self.minor, self.patch) >= (0, 4, 25)


DEFAULT_TARGET = TargetJax.parse(NEWEST)
