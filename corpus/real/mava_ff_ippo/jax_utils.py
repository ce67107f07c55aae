"""Modelled on mava/utils/jax_utils.py (instadeepai/Mava @ 01ece2b9403c): reads of the
(devices, update batch, ...) learner layout: `unreplicate_n_dims` (`x[0, 0]`),
`unreplicate_batch_dim` (`x[:, 0]`, keeping the device axis for the evaluator's pmap),
`merge_leading_dims`; and flax's `replicate` with an explicit device list. Written anew."""
import jax


def replicate(tree, devices=None):
    devices = devices or jax.local_devices()
    return jax.device_put_replicated(tree, devices)


def merge_leading_dims(x, num_dims):
    return x.reshape((-1,) + x.shape[num_dims:])


def unreplicate_n_dims(x, unreplicate_depth=2):
    return jax.tree_util.tree_map(lambda y: y[(0,) * unreplicate_depth], x)


def unreplicate_batch_dim(x):
    return jax.tree_util.tree_map(lambda y: y[:, 0, ...], x)


def get_final_step_metrics(metrics):
    """Keeps the metrics of the steps that ended an episode (boolean mask on the host)."""
    metrics = dict(metrics)
    is_final_ep = metrics.pop("is_terminal_step")
    has_final_ep_step = bool(is_final_ep.any())
    if has_final_ep_step:
        metrics = jax.tree_util.tree_map(lambda x: x[is_final_ep], metrics)
    return metrics, has_final_ep_step
