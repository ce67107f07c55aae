"""Finding codes: the rule table (from transforms/rules.toml) and the Finding record."""
