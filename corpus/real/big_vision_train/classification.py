"""Modelled on big_vision/evaluators/classification.py (@ 50622cb37bc4): `get_eval_fn` is
`lru_cache`d on (predict_fn, loss name) and returns a nested
`@partial(jax.pmap, axis_name="batch")` function that psums the masked losses, the top-1
hits and the example count; the Evaluator pops labels and mask off each prefetched batch and
reads every result back as `np.array(x[0])` (psummed, so replicated). Written anew."""
from functools import lru_cache, partial

import jax
import jax.numpy as jnp
import numpy as np

import big_vision_train.input_pipeline as input_pipeline
import big_vision_train.utils as u


@lru_cache(None)
def get_eval_fn(predict_fn, loss_name):
    @partial(jax.pmap, axis_name="batch")
    def _eval_fn(params, batch, labels, mask):
        logits, *_ = predict_fn(params, **batch)
        mask *= labels.max(axis=1)
        losses = getattr(u, loss_name)(logits=logits, labels=labels, reduction=False)
        loss = jax.lax.psum(losses * mask, axis_name="batch")
        top1_idx = jnp.argmax(logits, axis=1)
        top1_correct = jnp.take_along_axis(labels, top1_idx[:, None], axis=1)[:, 0]
        ncorrect = jax.lax.psum(top1_correct * mask, axis_name="batch")
        n = jax.lax.psum(mask, axis_name="batch")
        return ncorrect, loss, n
    return _eval_fn


class Evaluator:
    """Classification evaluator over a fixed number of host batches."""

    def __init__(self, predict_fn, batch_size, loss_name, steps=3, prefetch=1,
                 label_key="labels"):
        self.steps = steps
        self.data = list(input_pipeline.synthetic_data(99, batch_size, steps, with_mask=True))
        self.prefetch = prefetch
        self.eval_fn = get_eval_fn(predict_fn, loss_name)
        self.label_key = label_key

    def run(self, params):
        data_iter = input_pipeline.start_input_pipeline(self.data, self.prefetch)
        ncorrect, loss, nseen = 0, 0, 0
        for _, batch in zip(range(self.steps), data_iter):
            labels, mask = batch.pop(self.label_key), batch.pop("_mask")
            batch_ncorrect, batch_losses, batch_n = self.eval_fn(params, batch, labels, mask)
            ncorrect += np.sum(np.array(batch_ncorrect[0]))
            loss += np.sum(np.array(batch_losses[0]))
            nseen += np.sum(np.array(batch_n[0]))
        yield ("prec@1", ncorrect / nseen)
        yield ("loss", loss / nseen)
