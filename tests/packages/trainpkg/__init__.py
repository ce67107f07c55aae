"""A small data-parallel training package spread over several modules, pmap-era style."""
