"""Generate docs/RULES.md from transforms/rules.toml: `python -m migrator.rules_doc`."""

from __future__ import annotations

from pathlib import Path

from transforms.codes.rules import all_rules

DOC = Path(__file__).resolve().parent.parent / "docs" / "RULES.md"


def render() -> str:
    out = [
        "# pmap-migrate finding codes\n",
        "Generated from `transforms/rules.toml` by `python -m migrator.rules_doc`; do not edit.\n",
        "Severity: **info** (done), **warning** (a human must look; exit 1), **error** (file not "
        "processed; exit 2). Fix: **safe** (rewritten, behaviour kept), **none** (reported only).\n",
        "| code | name | severity | fix | meaning |",
        "|---|---|---|---|---|",
    ]
    rules = all_rules().values()
    out += [f"| {r.code} | {r.name} | {r.severity} | {r.fix} | {r.summary} |" for r in rules]
    for r in rules:
        out.append(f"\n## {r.code} {r.name}\n\n{r.summary}\n\n**What to do:** {r.check}\n")
        if r.todo:
            out.append(f"After `apply`: `# TODO(pmap-migrate): {r.code} {r.todo}` above the "
                       "statement, reported as this code until removed.\n")
        if r.before:
            out.append(f"Before:\n\n```python\n{r.before}\n```\n")
        if r.after:
            out.append(f"After:\n\n```python\n{r.after}\n```\n")
        elif r.fix == "none":
            out.append("After: unchanged; the finding is the output.\n")
    return "\n".join(out)


if __name__ == "__main__":
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(render(), encoding="utf-8")
    print(f"wrote {DOC}")
