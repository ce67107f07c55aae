"""A pmapped step defined in one module and called from another (and from its own module)."""
