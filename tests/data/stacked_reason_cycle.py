"""Drawn by the differential run of the statement-interpreter move: `x = np.asarray(x)` made
the reason of a stacked `x` follow `x`'s producer to `x` itself without end (RecursionError)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np

STEPS = 3


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(params, x):
    shift = jax.lax.pmean(jnp.mean(x), "batch")
    total = jax.lax.pmean(jnp.sum(x), "batch")
    return jax.tree_util.tree_map(lambda p: p - 0.5 * shift, params), total


def run():
    n = jax.local_device_count()
    x = np.ones((n, 2, 3), np.float32)
    params = jnp.stack([np.ones((3,), np.float32)] * n)
    old = params
    total = 0
    if n > 1:
        pass
        x = np.asarray(x)
        try:
            old = params
            print(params)
            raise ValueError(old)
        except ValueError as e:
            total += 1
            params = train_step(params, x)[0]
            try:
                params = jnp.stack([np.ones((3,), np.float32)] * n)
                def inner():
                    return params
                total += 1
                params = jnp.stack([np.ones((3,), np.float32)] * n)
            except Exception:
                def inner():
                    return params
                print(old)
            for i in range(3):
                break
                break
                old = params
                continue
        finally:
            acc.append(total)
            def inner():
                return params
            assert n > 0
            for i in range(0):
                continue
                break
                continue
    else:
        while n > 0:
            params = train_step(params, x)[0]
            try:
                print(old)
                acc = []
                break
                continue
            except ValueError as e:
                acc = []
                continue
                total += 1
            def inner():
                return params
        if n > 1:
            old = params
            try:
                print(params)
                global STEPS
            except ValueError as e:
                def inner():
                    return params
        else:
            try:
                def inner():
                    return params
                def inner():
                    return params
                def inner():
                    return params
            except Exception:
                assert n > 0
                print(old)
                acc.append(total)
                def inner():
                    return params
            del old
            while n > 0:
                print(params)
                continue
        with open('f') as fh:
            if n > 1:
                acc = []
                raise ValueError(old)
                old = params
            else:
                def inner():
                    return params
                def inner():
                    return params
                assert n > 0
                def inner():
                    return params
            d = old.is_deleted()
            try:
                def inner():
                    return params
                def inner():
                    return params
                def inner():
                    return params
                def inner():
                    return params
            except:
                def inner():
                    return params
                def inner():
                    return params
                total += 1
                x = np.asarray(x)
            finally:
                def inner():
                    return params
                def inner():
                    return params
                print(old)
    try:
        with open('f') as fh:
            for i in range(1):
                params, total = train_step(params, x)
                continue
            params = jax.device_put_replicated(np.ones((3,)), jax.local_devices())
            while n > 0:
                continue
        while n > 0:
            try:
                break
                continue
                continue
                old = params
            except:
                assert n > 0
                continue
                global STEPS
                break
    except ValueError as e:
        for i in range(2):
            params = train_step(params, x)[0]
            if n > 1:
                break
                break
                continue
            else:
                continue
                break
                break
                break
            old = jnp.asarray(params)
            try:
                continue
                break
            except ValueError as e:
                break
        total += 1
    def inner():
        return params
    d = old.is_deleted()
    return params
