"""Which sites and callers go global: the blocker fixpoint over a module.

Sites and their callers fall back together: a caller that cannot be followed keeps every site
it calls faithful, and a site that cannot go global keeps every caller faithful, so no value
ever crosses between the two layouts. A caller also stays faithful when it reaches code that
keeps pmap in the faithful style (PM608), or returns global values to module code that reads
them (PM605; a call that drops them or returns them as is reads nothing: handed_on.py);
a site whose callers disagree on its layouts stays faithful (PM604). Blocking only grows, so
the loop ends.
"""

from __future__ import annotations

import ast
import dataclasses

from transforms.codes.global_view import (
    CALLERS_UNSEEN,
    CONSUMER_UNKNOWN,
    FALLS_BACK_WITH_CALLER,
    PRODUCER_UNKNOWN,
)
from transforms.global_view.method_locals import is_method_caller
from transforms.global_view.callers import (
    MODULE_CALLER,
    called_function_names,
    callers_by_site,
    faithful_callee,
    find_callers,
    fold_callers,
    used_in_other_modules,
    NO_CALLER_HERE,
)
from transforms.global_view.class_uses import faithful_class_use
from transforms.global_view.classes import view_of
from transforms.global_view.dataflow import CallerResult
from transforms.global_view.handed_on import entry_points
from transforms.global_view.module_info import ModuleInfo
from transforms.global_view.site_edits import site_usage
from transforms.global_view.sites import Blocker, Site


@dataclasses.dataclass
class Decision:
    callers: dict[str, set[str]]  # module function -> keys of the sites it calls
    results: dict[str, CallerResult]  # the callers that go global, with their edits
    blocked: dict[str, Blocker]  # site key -> why it stays faithful
    # a global caller returning global values -> the functions that hand them out unchanged
    handed_on: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self.by_site = callers_by_site(self.callers)
        self._order = {caller: index for index, caller in enumerate(self.results)}

    def callers_of(self, site: str) -> list[str]:
        """The functions that call `site`, in `callers` order."""
        return self.by_site.get(site, [])

    def first_result(self, site: str) -> CallerResult | None:
        """The result of the first global caller of `site`, in `results` order."""
        going = [c for c in self.by_site.get(site, ()) if c in self._order]
        return self.results[min(going, key=self._order.__getitem__)] if going else None


def decide(module: ModuleInfo, sites: list[Site], blockers: list[Blocker], analysis: type,
           barrier_pmaps: set[int], demote: bool = False,
           unfolded: frozenset[str] = frozenset(),
           returning: frozenset[str] = frozenset()) -> Decision:
    """Run each caller's analysis (`analysis`: CallerAnalysis or its multi-process form) until
    no site or caller is blocked anew. `demote`: a blocker one site's call raises keeps that
    site off global layouts and the caller is analysed again without it (the site then keeps
    pmap's calling contract, contract.py, and takes the caller's values as they are).
    A function folded into its callers (callers.py) whose sites did not all go global is
    decided again as a caller of its own (`unfolded`), as it was before folding: read inside
    its callers it could only have held them back. A caller that returns values in the global
    layout to a function of this module that calls no site (flax imagenet's
    `train_and_evaluate`, returning the trained state to `run`) is decided again folded into
    that function (`returning`), which then reads what it returns. A caller may also call
    the module's nested pmaps written in the global style (`module.nested_steps`), which take
    and return what pmap's did."""
    tree, imported = module.tree, module.imported
    by_name = {s.key: s for s in sites}
    faithful = {name: b for b in blockers for name in b.names}
    callers, blocked = find_callers(tree, by_name, faithful,
                                    module.functions.get(MODULE_CALLER))
    blocked.update(used_in_other_modules(module, sites, blocked))
    # A step whose callers in other modules are followed (cross_module.py) needs none here.
    for site in sites:
        if site.owner is None and site.name in module.followed and site.key in blocked \
                and NO_CALLER_HERE in blocked[site.key].message:
            del blocked[site.key]
    # A function another module calls keeps its signature: it is not folded into this
    # module's callers, whose values it would then be written for.
    exported = frozenset(name for name in module.functions if module.elsewhere(name))
    module.folded = fold_callers(tree, by_name, callers, unfolded | exported,
                                 module.functions.get(MODULE_CALLER), returning - unfolded)
    module.callers = set(callers)
    results: dict[str, CallerResult] = {}
    analysed: dict[str, set[str]] = {}  # caller -> the sites its result was analysed with
    blocked_callers: dict[str, Blocker] = {}
    returns_blocked: set[str] = set()  # callers blocked for returning global values
    handed_on: dict[str, tuple[str, ...]] = {}
    functions = module.functions
    called_names = called_function_names(tree)
    followed = {**callers, **module.folded}  # a folded caller's pmaps are its hosts' sites
    by_site = callers_by_site(callers)
    classes = {s.name: view_of(s, tree) for s in tree.body if isinstance(s, ast.ClassDef)}
    # A caller analysed again with the same live sites gets the same outcome (the analysis
    # reads only the module, constant here): kept, so a pass after a change re-reads only
    # the callers it touched. Not in multi-process modules, whose analyses share state.
    outcomes: dict[tuple[str, frozenset[str]], CallerResult | Blocker] | None = \
        {} if demote else None
    module_sites = [s for s in sites if s.owner is None]
    always_callable = {s.name for s in module_sites} | module.nested_steps if demote else None
    changed = True
    while changed:
        changed = False
        for caller, called in sorted(callers.items()):
            if caller in blocked_callers:
                continue
            live = {s for s in called if s not in blocked}
            failed = None if demote else next((blocked[s] for s in sorted(called)
                                               if s in blocked), None)
            if demote and not live:
                results.pop(caller, None)  # nothing of it goes global
                continue
            if failed is None:
                try:
                    result = _outcome(outcomes, caller, live, lambda: analysis(
                        functions[caller], {s: by_name[s] for s in live}, module).run())
                    # Module sites a caller may call: the global ones, and with `demote` those
                    # kept on pmap's contract too (no mesh context is set around them).
                    callable_sites = always_callable if always_callable is not None else \
                        {s.name for s in module_sites if s.key not in blocked} \
                        | module.nested_steps
                    faithful_call = faithful_callee(
                        functions[caller], functions, followed, blocked_callers, imported,
                        set(callable_sites), barrier_pmaps) or faithful_class_use(
                        functions[caller], classes, imported, sites, blocked,
                        lambda method: faithful_callee(
                            method, functions, followed, blocked_callers, imported,
                            callable_sites
                            | {s.statement.name for s in sites if s.holder and s.factory},
                            barrier_pmaps))
                    if faithful_call is not None:
                        raise Blocker(FALLS_BACK_WITH_CALLER, faithful_call, f"`{caller}` calls "
                                      f"`{faithful_call.id}`, which keeps pmap code in the "
                                      "faithful style; it would run under this function's mesh")
                    entries = entry_points(tree, caller, module.elsewhere,
                                           frozenset(callers) | frozenset(module.folded)) \
                        if result.returns_changed and caller in called_names else None
                    if entries is not None:
                        handed_on[caller] = entries  # every call drops or returns them
                    elif result.returns_changed and caller in called_names:
                        returns_blocked.add(caller)
                        raise Blocker(CONSUMER_UNKNOWN, functions[caller],
                                      f"`{caller}` returns values "
                                      "in the global layout to callers in this module")
                    if result.returns_changed and is_method_caller(caller):
                        raise Blocker(CONSUMER_UNKNOWN, functions[caller],
                                      f"`{caller}` returns values in the global layout to "
                                      "its callers, which the global style does not follow")
                    if result.returns_changed and module.elsewhere(caller):
                        raise Blocker(CONSUMER_UNKNOWN, functions[caller],
                                      f"`{caller}` returns values in the global layout, and "
                                      f"another module calls it ({module.elsewhere(caller)}), "
                                      "which the global style does not follow yet")
                    results[caller] = result
                    analysed[caller] = live
                    continue
                except Blocker as blocker:
                    if demote and blocker.site in live:
                        blocked[blocker.site] = blocker
                        results.pop(caller, None)
                        changed = True
                        continue
                    failed = blocker
            blocked_callers[caller] = failed
            results.pop(caller, None)
            for site in (live if demote else called):
                if site not in blocked:
                    blocked[site] = failed if failed.code != FALLS_BACK_WITH_CALLER else failed
                    changed = True
        # A site's in_specs, result mode and mesh axis must agree across its callers.
        for name in by_name:
            if name in blocked:
                continue
            using = [c for c in by_site.get(name, ()) if c in results]
            idle = next((c for c in using if name not in results[c].specs), None)
            if idle is not None:  # built there and never called: no layout to give it
                blocked[name] = Blocker(CALLERS_UNSEEN, by_name[name].node,
                                        f"{by_name[name].label} is never called in "
                                        f"`{idle}`, so the layouts of its arguments are "
                                        "unknown")
                changed = True
                continue
            seen = {site_usage(results[c], name) for c in using}
            if len(seen) > 1:
                blocked[name] = Blocker(PRODUCER_UNKNOWN, by_name[name].node,
                                        f"{by_name[name].label} is called with different layouts")
                changed = True
        for caller in list(results):
            stale = analysed[caller] & set(blocked) if demote else \
                any(s in blocked for s in callers[caller])
            if stale:
                results.pop(caller)
                changed = True
    # First the callers that returned global values, folded: what folded into them may have
    # failed only for that.
    retry = frozenset(returns_blocked) - returning - unfolded
    if retry:
        return decide(module, sites, blockers, analysis, barrier_pmaps, demote, unfolded,
                      returning | retry)
    failed = {name for name, keys in module.folded.items() if keys & set(blocked)}
    if failed:
        return decide(module, sites, blockers, analysis, barrier_pmaps, demote,
                      unfolded | failed, returning)
    return Decision(callers, results, blocked,
                    {c: e for c, e in handed_on.items() if c in results})


def _outcome(outcomes, caller: str, live: set[str], analyse):
    """`analyse()`'s result, or the Blocker it raised; kept in `outcomes` (when not None) by
    the caller and the sites it was analysed with."""
    if outcomes is None:
        return analyse()
    key = (caller, frozenset(live))
    if key not in outcomes:
        try:
            outcomes[key] = analyse()
        except Blocker as blocker:
            outcomes[key] = blocker
    if isinstance(outcomes[key], Blocker):
        raise outcomes[key]
    return outcomes[key]
