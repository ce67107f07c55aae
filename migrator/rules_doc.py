"""Generate docs/RULES.md from transforms/rules.toml: `python -m migrator.rules_doc`; and one
rule's section of it for `pmap-migrate explain CODE` (`explain`)."""

from __future__ import annotations

import difflib
from pathlib import Path

from transforms.codes.rules import Rule, all_rules

DOC = Path(__file__).resolve().parent.parent / "docs" / "RULES.md"


FIX_SAFETY = {
    "safe": "Safe: the rewrite keeps the program's behaviour.",
    "review": "Review: rewritten, and the change can matter in the cases *What to do* names; "
              "read the diff, as ruff's unsafe fixes ask.",
    "none": "None: reported only; this rule changes no code.",
}


def render() -> str:
    out = [
        "# pmap-migrate finding codes\n",
        "Generated from `transforms/rules.toml` by `python -m migrator.rules_doc`; do not edit. "
        "Each rule's example is a complete program that tests/test_rule_examples.py runs.\n",
        "Severity: **info** (done), **warning** (a human must look; exit 1), **error** (file not "
        "processed; exit 2). Fix: **safe** (rewritten, behaviour kept), **review** (rewritten, "
        "read the diff), **none** (reported only).\n",
        "| code | name | severity | fix | what it does |",
        "|---|---|---|---|---|",
    ]
    rules = all_rules().values()
    out += [f"| {r.code} | {r.name} | {r.severity} | {r.fix} | {r.what} |" for r in rules]
    for r in rules:
        out.append("")
        out += _section(r)
    return "\n".join(out)


def _section(r: Rule, facts: bool = False) -> list[str]:
    """The rule's section of RULES.md, in ruff's shape (what it does, why, example, fix
    safety); `facts`: with its severity and fix kind under the title."""
    out = [f"## {r.code} {r.name}\n"]
    if facts:
        out.append(f"Severity: **{r.severity}**. Fix: **{r.fix}**.\n")
    out.append(f"**What it does.** {r.what}\n")
    out.append(f"**Why.** {r.why}\n")
    if r.message:
        out.append(f"**Reading the message.** {r.message}\n")
    out.append(f"**What to do.** {r.check}\n")
    if r.todo:
        out.append(f"After `apply`: `# TODO(pmap-migrate): {r.code} {r.todo}` above the "
                   "statement, reported as this code until removed.\n")
    if r.example.startswith("none:"):
        out.append(f"**Example.** None: {r.example.removeprefix('none:').strip()}.\n")
    elif r.before:
        # An example run through `apply` on files the test arranges, not through the pipeline;
        # a symlink example describes the link rather than holding code.
        how = f" ({r.example}, run through `apply`)" if r.example else ""
        lang = "text" if "symlink" in r.example else "python"
        out.append(f"**Example{how}.**\n\n```{lang}\n{r.before}\n```\n")
        if r.after:
            out.append(f"After:\n\n```python\n{r.after}\n```\n")
        elif r.fix == "none":
            out.append("After: unchanged; the finding is the output.\n")
    out.append(f"**Fix safety.** {FIX_SAFETY[r.fix]}\n")
    return out


def explain(code: str) -> str:
    """The Markdown section of one rule (a code, any case, or a rule name); KeyError naming the
    closest codes when there is none."""
    rules = all_rules()
    wanted = code.strip().upper()
    by_name = {r.name: r for r in rules.values()}
    found = rules.get(wanted) or by_name.get(code.strip().lower())
    if found is None:
        close = difflib.get_close_matches(wanted, rules, n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise KeyError(f"unknown finding code {code!r}{hint}; docs/RULES.md lists them all")
    return "\n".join(_section(found, facts=True))


if __name__ == "__main__":
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(render(), encoding="utf-8")
    print(f"wrote {DOC}")
