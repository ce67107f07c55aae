"""Modelled on neural-tangents' kernel batching (`nt.batch`), used the way its README and
examples use it: analytic NNGP / NTK kernels and an empirical NTK computed in row blocks
spread over the devices, then GP / NTK inference on the host.

Source: github.com/google/neural-tangents, neural_tangents/_src/batching.py (with
`empirical.py` and `stax` for the kernels being batched) at commit
c17e770bb74f1771da7be4a69fabfa68b6078960 (2024-03-01). stax, the `Kernel` dataclass
path and `store_on_device=False` are not used: the analytic kernel is a closed-form
erf network returning a namedtuple, the empirical NTK a `jax.jacobian` contraction of a
two-layer MLP, the data seeded numpy. All code here is written anew.

pmap features kept:
- `from jax import jit, pmap`; a factory `_get_jit_or_pmap_broadcast()` returning
  `jit_or_pmap_broadcast(f, device_count)`, which builds, on each call, a closure `_f`
  over the non-array positional arguments and keyword arguments and caches
  `_f = jit(_f) if device_count == 0 else pmap(_f)` in a dict keyed by the function,
  the device count and those arguments (the second call with the same key reuses it);
  array arguments after the first are `jnp.broadcast_to((device_count,) + shape)`
  before the call (pmap's `in_axes` is not used);
- `_parallel`: rows of `x1` reshaped to `(device_count, n1 // device_count, ...)`; with
  fewer rows than devices the pmap runs on `n1` of them (the "ragged" branch); results
  flattened back with `reshape`, field by field of a namedtuple via `_replace`;
- `_serial` over the parallel function: an unrolled Python scan over row blocks of
  `batch_size * device_count` and column blocks of `batch_size`, stacked with
  `jnp.stack` and transposed back; `batch()` choosing parallel, jit-only
  (`device_count=0`) or serial-over-parallel;
- the batched kernel called with `x2=None` (`x2 = x1`), with a tuple `get` argument, and
  with a parameter pytree broadcast to every device.

Scaled down: 16 training and 8 test points of 5 features, batch size 1 on 8 devices.
"""
import collections

import jax
import jax.numpy as jnp
import numpy as np
from jax import jit, pmap
from jax.tree_util import tree_all, tree_flatten, tree_map, tree_unflatten

Kernel = collections.namedtuple("Kernel", ["nngp", "ntk"])


# ----------------------------------------------------------------- batching (nt.batch)

def _is_np_ndarray(x):
    if x is None:
        return False
    return tree_all(tree_map(lambda y: isinstance(y, (np.ndarray, jnp.ndarray)), x))


def _get_jit_or_pmap_broadcast():
    """A cache of pmapped (or jitted) closures over the non-array arguments."""
    cache = {}

    def jit_or_pmap_broadcast(f, device_count=-1):
        key = (f, device_count)
        if device_count == -1:
            device_count = jax.local_device_count()

        def broadcast(arg):
            if device_count == 0:
                return arg
            return jnp.broadcast_to(arg, (device_count,) + arg.shape)

        def f_pmapped(x, *args, **kwargs):
            args_np, args_np_idxs = [], []
            args_other = {}
            for i, arg in enumerate(args):
                if _is_np_ndarray(arg):
                    args_np.append(arg)
                    args_np_idxs.append(i)
                else:
                    args_other[i] = arg
            kwargs_other = dict(kwargs)

            _key = key + tuple(args_other.items()) + tuple(kwargs_other.items())
            if _key in cache:
                _f = cache[_key]
            else:
                def _f(_x, *_args_np):
                    _args = dict(zip(args_np_idxs, _args_np))
                    _args.update(args_other)
                    _args = tuple(v for _, v in sorted(_args.items()))
                    return f(_x, *_args, **kwargs_other)

                _f = jit(_f) if device_count == 0 else pmap(_f)
                cache[_key] = _f

            args_np = tree_map(broadcast, args_np)
            return _f(x, *args_np)

        return f_pmapped

    return jit_or_pmap_broadcast


_jit_or_pmap_broadcast = _get_jit_or_pmap_broadcast()


def _flatten_batch_dimensions(k, is_parallel):
    if is_parallel:
        return jnp.reshape(k, (k.shape[0] * k.shape[1],) + k.shape[2:])
    k = jnp.transpose(k, (0, 2, 1, 3) + tuple(range(4, k.ndim)))
    return jnp.reshape(k, (k.shape[0] * k.shape[1], k.shape[2] * k.shape[3]) + k.shape[4:])


def _flatten_kernel(k, is_parallel):
    if hasattr(k, "_asdict") and hasattr(k, "_replace"):
        return k._replace(**{name: _flatten_batch_dimensions(v, is_parallel)
                             for name, v in k._asdict().items()})
    return _flatten_batch_dimensions(k, is_parallel)


def _scan(f, init, xs):
    """An unrolled `lax.scan` (lower peak memory than the rolled one)."""
    carry = init
    ys = []
    flat_xs, tree_def = tree_flatten(xs)
    for flat_x in zip(*flat_xs):
        carry, y = f(carry, tree_unflatten(tree_def, flat_x))
        ys.append(y)
    return carry, tree_map(lambda *y: jnp.stack(y), *ys)


def _get_n_batches_and_batch_sizes(n1, n2, batch_size, device_count):
    max_serial_batch_size = np.gcd(n1, n2) // device_count
    n2_batch_size = min(batch_size, max_serial_batch_size)
    n1_batch_size = n2_batch_size * device_count
    n1_batches, ragged = divmod(n1, n1_batch_size)
    if ragged:
        raise ValueError(f"Number of rows of kernel must divide batch size: {n1}, {n1_batch_size}")
    n2_batches, ragged = divmod(n2, n2_batch_size)
    if ragged:
        raise ValueError(f"Number of columns must divide batch size: {n2}, {n2_batch_size}")
    return n1_batches, n1_batch_size, n2_batches, n2_batch_size


def _serial(kernel_fn, batch_size):
    device_count = max(getattr(kernel_fn, "device_count", 1), 1)

    def serial_fn(x1, x2=None, *args, **kwargs):
        if x2 is None:
            x2 = x1
        n1, n2 = x1.shape[0], x2.shape[0]
        n1_batches, n1_batch_size, n2_batches, n2_batch_size = (
            _get_n_batches_and_batch_sizes(n1, n2, batch_size, device_count))
        x1s = jnp.reshape(x1, (n1_batches, n1_batch_size) + x1.shape[1:])
        x2s = jnp.reshape(x2, (n2_batches, n2_batch_size) + x2.shape[1:])

        def row_fn(_, x1):
            return _, _scan(col_fn, x1, x2s)[1]

        def col_fn(x1, x2):
            return x1, kernel_fn(x1, x2, *args, **kwargs)

        _, kernel = _scan(row_fn, 0, x1s)
        return _flatten_kernel(kernel, is_parallel=False)

    return serial_fn


def _parallel(kernel_fn, device_count=-1):
    if device_count == -1:
        device_count = jax.local_device_count()

    def _get_n_per_device(n1):
        _device_count = device_count
        n1_per_device, ragged = divmod(n1, device_count)
        if n1_per_device and ragged:
            raise ValueError(f"Dataset size ({n1}) must divide number of devices ({device_count}).")
        elif not n1_per_device:
            _device_count = ragged
            n1_per_device = 1
        return n1_per_device, _device_count

    def parallel_fn(x1, x2=None, *args, **kwargs):
        if x2 is None:
            x2 = x1
        n1_per_device, _device_count = _get_n_per_device(x1.shape[0])
        _kernel_fn = _jit_or_pmap_broadcast(kernel_fn, _device_count)
        x1 = jnp.reshape(x1, (_device_count, n1_per_device) + x1.shape[1:])
        kernel = _kernel_fn(x1, x2, *args, **kwargs)
        return _flatten_kernel(kernel, is_parallel=True)

    parallel_fn.device_count = device_count
    return parallel_fn


def batch(kernel_fn, batch_size=0, device_count=-1):
    """`kernel_fn` computed in row blocks over the devices, then serially in batches."""
    use_multidevice = device_count > 0 or (device_count == -1 and jax.local_device_count() > 1)
    use_serial = bool(batch_size)
    if use_multidevice:
        kernel_fn = _parallel(kernel_fn, device_count)
    else:
        kernel_fn = _jit_or_pmap_broadcast(kernel_fn, 0)
    if not use_serial:
        return kernel_fn
    return _serial(kernel_fn, batch_size)


# ----------------------------------------------------------------- the kernels batched

W_STD, B_STD = 1.5, 0.1


def erf_kernel_fn(x1, x2, get=("nngp", "ntk")):
    """NNGP / NTK of Dense -> Erf -> Dense -> Erf -> Dense in closed form."""
    d = x1.shape[-1]
    k12 = W_STD ** 2 * (x1 @ x2.T) / d + B_STD ** 2
    k11 = W_STD ** 2 * jnp.sum(x1 * x1, -1) / d + B_STD ** 2
    k22 = W_STD ** 2 * jnp.sum(x2 * x2, -1) / d + B_STD ** 2
    ntk = k12
    for _ in range(2):
        prod = (1 + 2 * k11)[:, None] * (1 + 2 * k22)[None, :]
        t = (2 / jnp.pi) * jnp.arcsin(2 * k12 / jnp.sqrt(prod))
        t_dot = (4 / jnp.pi) / jnp.sqrt(prod - 4 * k12 ** 2)
        t11 = (2 / jnp.pi) * jnp.arcsin(2 * k11 / (1 + 2 * k11))
        t22 = (2 / jnp.pi) * jnp.arcsin(2 * k22 / (1 + 2 * k22))
        ntk = W_STD ** 2 * (t + t_dot * ntk) + B_STD ** 2
        k12 = W_STD ** 2 * t + B_STD ** 2
        k11 = W_STD ** 2 * t11 + B_STD ** 2
        k22 = W_STD ** 2 * t22 + B_STD ** 2
    kernel = Kernel(nngp=k12, ntk=ntk)
    if isinstance(get, str):
        return getattr(kernel, get)
    return Kernel(*(getattr(kernel, g) for g in get))


def mlp_apply(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def empirical_ntk_fn(apply_fn):
    """The finite-width NTK, traced over the outputs: J(x1) J(x2)^T."""

    def ntk_fn(x1, x2, params):
        def flat_jacobian(x):
            jac = jax.jacobian(apply_fn)(params, x)
            leaves = jax.tree_util.tree_leaves(jac)
            return jnp.concatenate([l.reshape(l.shape[0], l.shape[1], -1) for l in leaves], -1)

        return jnp.einsum("iap,jap->ij", flat_jacobian(x1), flat_jacobian(x2))

    return ntk_fn


def gp_predict(k_train_train, k_test_train, y_train, diag_reg=1e-2):
    """Posterior mean on the host, in float64."""
    k = np.asarray(k_train_train, np.float64)
    k = k + diag_reg * np.trace(k) / k.shape[0] * np.eye(k.shape[0])
    return np.asarray(k_test_train, np.float64) @ np.linalg.solve(k, y_train)


def run():
    rng = np.random.RandomState(0)
    x_train = rng.normal(size=(16, 5)).astype(np.float32)
    x_test = rng.normal(size=(8, 5)).astype(np.float32)
    y_train = np.sin(x_train.sum(-1, keepdims=True)) + 0.1 * rng.normal(size=(16, 1))

    kernel_fn = batch(erf_kernel_fn, batch_size=1, device_count=-1)
    k_train_train = kernel_fn(x_train, None, ("nngp", "ntk"))
    k_test_train = kernel_fn(x_test, x_train, ("nngp", "ntk"))
    nngp_mean = gp_predict(k_train_train.nngp, k_test_train.nngp, y_train)
    ntk_mean = gp_predict(k_train_train.ntk, k_test_train.ntk, y_train)

    parallel_only = batch(erf_kernel_fn, device_count=-1)
    ntk_parallel = parallel_only(x_test, x_train, "ntk")
    ragged = parallel_only(x_test[:4], x_train, "nngp")
    jit_only = batch(erf_kernel_fn, device_count=0)
    nngp_jit = jit_only(x_test, x_train, "nngp")

    k1, k2 = jax.random.split(jax.random.PRNGKey(3))
    params = {"w1": jax.random.normal(k1, (5, 12)) / np.sqrt(5), "b1": jnp.zeros((12,)),
              "w2": jax.random.normal(k2, (12, 2)) / np.sqrt(12), "b2": jnp.zeros((2,))}
    emp_ntk = batch(empirical_ntk_fn(mlp_apply), device_count=-1)
    emp_train = emp_ntk(x_train, None, params)
    emp_test = emp_ntk(x_test, x_train, params)
    emp_mean = gp_predict(emp_train, emp_test, y_train, diag_reg=0.1)

    return {
        "k_train_nngp": np.asarray(k_train_train.nngp),
        "k_train_ntk": np.asarray(k_train_train.ntk),
        "k_test_ntk": np.asarray(k_test_train.ntk),
        "nngp_mean": nngp_mean,
        "ntk_mean": ntk_mean,
        "ntk_parallel": np.asarray(ntk_parallel),
        "ragged_nngp": np.asarray(ragged),
        "nngp_jit": np.asarray(nngp_jit),
        "emp_train": np.asarray(emp_train),
        "emp_mean": emp_mean,
    }
