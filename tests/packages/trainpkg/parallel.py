"""A project wrapper around pmap, as many codebases have one; callers pass pmap's keywords."""
import jax


def data_parallel(fun, **pmap_kwargs):
    return jax.pmap(fun, axis_name="batch", **pmap_kwargs)
