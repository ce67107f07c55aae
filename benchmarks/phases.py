"""Where the time of a file goes: each phase of `migrate_source`, next to libcst's no-op codemod.

usage: python benchmarks/phases.py TREE [TREE ...]

One process, no workers, every file of the trees that passes the prefilter's words. For each
file the phases run in the order the pipeline runs them, each timed on its own; then the same
file goes through what `python -m libcst.tool codemod noop.NOOPCommand` does per file (parse,
`transform_module`, which copies the tree for its metadata wrapper, and codegen). Times are
summed over the files (CPU time of this process: other load inflates it less than wall
time); start-up (imports) is printed apart.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def main() -> int:
    start = time.process_time()
    import libcst as cst

    libcst_import = time.process_time() - start
    start = time.process_time()
    from migrator.runner import _does_not_parse
    from transforms import pipeline
    from transforms.imports import RuleContext, apply_queued_imports
    from transforms.module_helpers import insert_helpers, requested_helpers
    from transforms.reading.prefilter import might_need_migration, parse_or_none, referenced_rules
    from transforms.rule_runner import ModuleFacts, RuleRunner
    from transforms.suppressions import Suppressions
    from transforms.traversal import transform_module

    rules_import = time.process_time() - start
    start = time.process_time()
    from libcst.codemod import CodemodContext  # the NOOP's; the rules do not import it
    from libcst.codemod.commands.noop import NOOPCommand

    codemod_import = time.process_time() - start
    paths = [p for tree in sys.argv[1:] for p in sorted(Path(tree).rglob("*.py"))]
    sources = [p.read_bytes() for p in paths]
    times: dict[str, float] = {}

    def timed(name, function, *args):
        begin = time.process_time()
        value = function(*args)
        times[name] = times.get(name, 0.0) + time.process_time() - begin
        return value

    def insert_helpers_as_text(module, helpers):
        return insert_helpers(module, helpers, as_text=True)

    counted = referenced = 0
    for source in sources:
        if not timed("words (all files)", might_need_migration, source):
            continue
        counted += 1
        tree = timed("ast.parse", parse_or_none, source)
        rule_names = timed("references (ast walk)", referenced_rules, source, tree)
        if not rule_names:
            continue
        referenced += 1
        module = timed("libcst parse", cst.parse_module, source)
        context = RuleContext()
        suppressions = Suppressions.from_source(source)
        rules = [rule(context, pipeline.DEFAULT_TARGET, suppressions) for rule in pipeline.RULES
                 if rule.__name__ in rule_names]
        facts = timed("import table (ast walk)", ModuleFacts, module, source, tree)
        for rule in rules:
            rule.facts = facts
        out = timed("rules (one visit)", transform_module, module, RuleRunner(rules, facts))
        timed("finding positions", facts.placed, [f for rule in rules for f in rule.findings])
        out = timed("helpers", insert_helpers_as_text, out, requested_helpers(context))
        out = timed("imports", apply_queued_imports, out, context)
        code = timed("codegen of the output", lambda: out.bytes)
        timed("re-parse of the output (ast)", _does_not_parse, source, code)
        noop_module = timed("NOOP: libcst parse", cst.parse_module, source)
        noop_out = timed("NOOP: transform_module",
                         NOOPCommand(CodemodContext()).transform_module, noop_module)
        timed("NOOP: codegen", lambda: noop_out.code)

    print(f"{len(sources)} files, {counted} with a rule's word, {referenced} with a reference")
    print(f"imports: libcst {libcst_import:.3f} s, the rules {rules_import:.3f} s, "
          f"libcst.codemod (NOOP only) {codemod_import:.3f} s")
    ours = sum(v for k, v in times.items() if not k.startswith("NOOP"))
    noop = sum(v for k, v in times.items() if k.startswith("NOOP"))
    for name, seconds in times.items():
        total = noop if name.startswith("NOOP") else ours
        print(f"  {name:<32} {seconds:8.3f} s  {100 * seconds / max(total, 1e-9):5.1f}%")
    print(f"  {'ours, total':<32} {ours:8.3f} s")
    print(f"  {'NOOP, total':<32} {noop:8.3f} s  (NOOP / ours = {noop / max(ours, 1e-9):.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
