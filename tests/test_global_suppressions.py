"""`# pmap-migrate: ignore` in the global style: a covered site is left as written (PM011),
and the functions that call it keep pmap's layout with it. Before, the global pass rewrote it
regardless and the faithful rules then called the comment unused (PM012)."""

from __future__ import annotations

import pytest

from transforms.pipeline import migrate_source

SOURCE = '''import jax
import jax.numpy as jnp


@jax.pmap{comment}
def double(x):
    return 2 * x


@jax.pmap
def halve(x):
    return x / 2


def run():
    n = jax.local_device_count()
    x = jnp.arange(n * 2.0).reshape(n, 2)
    return {{"y": double(x), "z": halve(x)}}
'''


def migrate(comment: str, style: str = "global"):
    result = migrate_source(SOURCE.format(comment=comment).encode(), style=style)
    return result.source.decode(), [f.code for f in result.findings]


@pytest.mark.parametrize("style", ["global", "faithful"])
@pytest.mark.parametrize("comment", ["  # pmap-migrate: ignore", "  # pmap-migrate: ignore[PM600]",
                                     "  # pmap-migrate: ignore[PM100]",
                                     "  # pmap-migrate: ignore[PM612]"])
def test_a_suppressed_site_is_left_as_written_in_either_style(comment, style):
    text, codes = migrate(comment, style)
    assert "@jax.pmap" + comment + "\ndef double(x):" in text
    assert "PM011" in codes and "PM012" not in codes
    # the other site is migrated; the caller keeps pmap's layout for the suppressed one
    assert "def halve" in text and "@jax.pmap\ndef halve" not in text
    assert 'x = jnp.arange(n * 2.0).reshape(n, 2)' in text


def test_without_the_comment_both_sites_go_global():
    text, codes = migrate("")
    assert codes.count("PM600") == 2


def test_a_comment_naming_another_code_does_not_hold_the_site_back():
    text, codes = migrate("  # pmap-migrate: ignore[PM301]")
    assert codes.count("PM600") == 2 and "PM012" in codes
    # the decorator goes, its comment stays where it was
    assert "# pmap-migrate: ignore[PM301]\ndef _double(x):" in text
