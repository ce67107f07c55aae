"""The `--style global` finding codes (PM600-PM612) by short names, so code says which blocker it
raises. Each name is its rule's `name` in rules.toml without the `global-view-` prefix
(tests/test_rules.py holds them together)."""

from transforms.codes.rules import Code

SITE = Code.GLOBAL_VIEW_SITE  # the site went global
PMAP_AS_VALUE = Code.GLOBAL_VIEW_PMAP_AS_VALUE
OPTIONS = Code.GLOBAL_VIEW_OPTIONS
CALLERS_UNSEEN = Code.GLOBAL_VIEW_CALLERS_UNSEEN
PRODUCER_UNKNOWN = Code.GLOBAL_VIEW_PRODUCER_UNKNOWN
CONSUMER_UNKNOWN = Code.GLOBAL_VIEW_CONSUMER_UNKNOWN
OUTPUT_NOT_REPLICATED = Code.GLOBAL_VIEW_OUTPUT_NOT_REPLICATED
UNAVAILABLE = Code.GLOBAL_VIEW_UNAVAILABLE
FALLS_BACK_WITH_CALLER = Code.GLOBAL_VIEW_FALLS_BACK_WITH_CALLER
CLASS_HELD = Code.GLOBAL_VIEW_CLASS_HELD
DONATED_COPY_READ = Code.GLOBAL_VIEW_DONATED_COPY_READ
STACKED_VALUE = Code.GLOBAL_VIEW_STACKED_VALUE  # an argument kept in pmap's layout
CONTRACT = Code.GLOBAL_VIEW_CONTRACT  # no global layout: pmap's contract without the helper
# A faithful code the global pass reports too: its own idioms of a multi-process module.
PROCESS_IDIOM_KEPT = Code.PROCESS_IDIOM_KEPT

# The blockers (PM601-PM609): why a site did not go global, which a contract site names.
FALLBACKS = frozenset({
    PMAP_AS_VALUE, OPTIONS, CALLERS_UNSEEN, PRODUCER_UNKNOWN, CONSUMER_UNKNOWN,
    OUTPUT_NOT_REPLICATED, UNAVAILABLE, FALLS_BACK_WITH_CALLER, CLASS_HELD,
})
