"""Regenerate tests/fixtures/*/after.py and findings.txt from the current tool.

Run it after changing a transform, then READ the git diff of the fixtures: it is the review
of what the change does to every form. `python tests/regen_fixtures.py [NAME_PREFIX ...]`
(with prefixes, only the cases whose directory name starts with one of them).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from transforms.pipeline import migrate_source  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# --style global cases (tests/test_global_view.py): migrated with style="global".
GLOBAL_FIXTURES = Path(__file__).resolve().parent / "fixtures_global"


def findings_text(findings) -> str:
    return "".join(f"{f.line}:{f.col} {f.code} {f.message}\n" for f in findings)


def main() -> None:
    prefixes = tuple(sys.argv[1:]) or ("",)
    cases = [(p, "faithful") for p in sorted(FIXTURES.iterdir()) if (p / "before.py").exists()]
    cases += [(p, "global") for p in sorted(GLOBAL_FIXTURES.iterdir()) if (p / "before.py").exists()]
    for case, style in cases:
        if not case.name.startswith(prefixes):
            continue
        result = migrate_source((case / "before.py").read_bytes(), style=style)
        (case / "after.py").write_bytes(result.source)
        (case / "findings.txt").write_text(findings_text(result.findings), encoding="utf-8")
        print(f"{case.name}: {len(result.findings)} findings")


if __name__ == "__main__":
    main()
