"""The `--style global` finding codes (PM600-PM612) as names, so code says which blocker it
raises. Each name is its rule's `name` in rules.toml without the `global-view-` prefix
(tests/test_rules.py holds them together)."""

SITE = "PM600"  # global-view-site: the site went global
PMAP_AS_VALUE = "PM601"
OPTIONS = "PM602"
CALLERS_UNSEEN = "PM603"
PRODUCER_UNKNOWN = "PM604"
CONSUMER_UNKNOWN = "PM605"
OUTPUT_NOT_REPLICATED = "PM606"
UNAVAILABLE = "PM607"
FALLS_BACK_WITH_CALLER = "PM608"
CLASS_HELD = "PM609"
DONATED_COPY_READ = "PM610"
STACKED_VALUE = "PM611"  # global-view-stacked-value: an argument kept in pmap's layout
CONTRACT = "PM612"  # global-view-contract: no global layout, pmap's contract without the helper
