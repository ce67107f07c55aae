"""Regenerate tests/fixtures*/*/after.py and findings.txt, and the helper snapshots, from the
current tool.

Run it after changing a transform or a helper template, then READ the git diff: it is the
review of what the change does to every form. `python tests/regen_fixtures.py [NAME_PREFIX ...]`
(with prefixes, only the cases whose directory name starts with one of them; the helper
snapshots are always rewritten).

The fixtures are migrated as with `--helper-module _pmap_helpers`: each after.py imports the
helpers it calls (`from _pmap_helpers import _pmap_style_shard_map`) instead of carrying their
text, global fixtures the contract functions (`_per_device_shard_map`) too, and
tests/fixtures/_pmap_helpers.py is what that helper module holds (every helper, with every
feature). A change to a helper template changes the snapshots, not every fixture.
tests/fixtures/_pmap_style_shard_map.no_features.py is the helper a module carries whose sites
use no optional feature (transforms/helpers/helper_features.py). The equivalence runs
(`pytest -m equivalence`) run the migration a module gets without a helper module, with its
own copy of the helpers, in the variant its sites need.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from migrator.helper_module import HelperModule  # noqa: E402
from transforms.global_view.contract_text import CONTRACT_NAMES  # noqa: E402
from transforms.helpers.helper_templates import helper_text  # noqa: E402
from transforms.module_helpers import HELPER_ORDER  # noqa: E402
from transforms.pipeline import migrate_source  # noqa: E402
from transforms.target import DEFAULT_TARGET  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# --style global cases (tests/test_global_view.py): migrated with style="global".
GLOBAL_FIXTURES = Path(__file__).resolve().parent / "fixtures_global"
# The helper module the fixtures import from, and its snapshot (copied next to an after.py
# that is run).
HELPER_MODULE = "_pmap_helpers"
HELPER_SNAPSHOT = FIXTURES / f"{HELPER_MODULE}.py"
SHORT_HELPER_SNAPSHOT = FIXTURES / "_pmap_style_shard_map.no_features.py"


def findings_text(findings) -> str:
    return "".join(f"{f.line}:{f.col} {f.code} {f.message}\n" for f in findings)


def migrate_fixture(source: bytes, style: str = "faithful"):
    """A fixture's migration as its after.py shows it: helpers imported from HELPER_MODULE."""
    return migrate_source(source, style=style, helper_module=HELPER_MODULE)


def helper_module_text() -> bytes:
    """What `--helper-module _pmap_helpers` writes for every helper (migrator/helper_module.py)."""
    module = HelperModule(HELPER_MODULE, HELPER_SNAPSHOT.with_name("(none).py"), FIXTURES)
    needed = {name: DEFAULT_TARGET for name in (*HELPER_ORDER, *CONTRACT_NAMES)}
    _, text = module.updated_text(needed)
    return text


def short_helper_text() -> str:
    return helper_text("_pmap_style_shard_map", DEFAULT_TARGET, frozenset())


def main() -> None:
    prefixes = tuple(sys.argv[1:]) or ("",)
    HELPER_SNAPSHOT.write_bytes(helper_module_text())
    SHORT_HELPER_SNAPSHOT.write_text(short_helper_text(), encoding="utf-8")
    cases = [(p, "faithful") for p in sorted(FIXTURES.iterdir()) if (p / "before.py").exists()]
    cases += [(p, "global") for p in sorted(GLOBAL_FIXTURES.iterdir()) if (p / "before.py").exists()]
    for case, style in cases:
        if not case.name.startswith(prefixes):
            continue
        result = migrate_fixture((case / "before.py").read_bytes(), style)
        (case / "after.py").write_bytes(result.source)
        (case / "findings.txt").write_text(findings_text(result.findings), encoding="utf-8")
        print(f"{case.name}: {len(result.findings)} findings")


if __name__ == "__main__":
    main()
