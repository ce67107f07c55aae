"""A batch-sharding helper used by its own module's pmap and by another module's."""
