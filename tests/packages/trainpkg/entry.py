"""What `check` runs: a few training steps over host data, then evaluation."""
# pmap-migrate-test: original needs legacy jax
import jax
import numpy as np

from trainpkg import model, train


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    x = rng.normal(size=(n, 4, 3)).astype(np.float32)
    y = (x @ np.array([[0.5], [-1.0], [0.25]], np.float32)).astype(np.float32)
    params = train.init(n)
    losses = []
    for _ in range(3):
        params, loss = train.train_step(params, x, y)
        losses.append(float(loss[0]))
    host = jax.device_get(jax.tree_util.tree_map(lambda a: a[0], params))
    w = host["w"]
    return {
        "losses": np.array(losses),
        "eval": train.evaluate(params, x, y),
        "params": host,
        "predict": np.asarray(model.predict(x, w, host["b"])),
        "mean": np.asarray(model.mean_prediction(x, w, host["b"])),
    }
