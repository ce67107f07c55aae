"""The pmap-migrate tool around the pure transforms: files, diffs, writes, reports, CLI."""
