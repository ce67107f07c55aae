"""The faithful rules: each pmap-era idiom rewritten in place with the same meaning, or reported."""
