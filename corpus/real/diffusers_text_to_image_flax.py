"""Modelled on Hugging Face diffusers' Flax text-to-image fine-tuning script
(examples/text_to_image/train_text_to_image_flax.py).

Source: github.com/huggingface/diffusers, examples/text_to_image/train_text_to_image_flax.py
at commit 000280f56a6a81e355313e77ec831575ad571d8b, with flax's `jax_utils.replicate` /
`unreplicate`, `common_utils.shard` and `training.train_state.TrainState` that it uses.
diffusers, transformers, flax, optax, torch and the datasets library are not used: the
"VAE" encoder, the "text encoder" and the "UNet" are tiny dense networks in plain
jax.numpy, the noise scheduler a scaled-linear DDPM `add_noise` over 100 steps, the
optimiser a hand-written AdamW after global-norm clipping, and the image / caption pairs
seeded numpy. All code here is written anew.

pmap features kept:
- `train_step(state, text_encoder_params, vae_params, batch, train_rng)` nested in
  `main()`, closing over the three models, the noise scheduler and its state; it splits its
  per-device key into dropout / sample / next keys, encodes the images with the frozen VAE,
  noises the latents at random timesteps, conditions on the frozen text encoder, and
  returns `(new_state, metrics, new_train_rng)`;
- `p_train_step = jax.pmap(train_step, "batch", donate_argnums=(0,))`; `lax.pmean` of the
  grads and of the metrics dict;
- per-device keys `jax.random.split(rng, jax.local_device_count())` passed in and fed back
  out every step; the train state and BOTH frozen parameter trees replicated with
  `jax_utils.replicate` (`jax.device_put_replicated`); each batch `shard`ed;
- a pytree-dataclass `TrainState` (step, params, opt_state; `apply_fn` and `tx` static);
- host reads: `jax_utils.unreplicate(train_metric)` at the end of each epoch, and
  `get_params_to_save` (`jax.device_get(tree_map(lambda x: x[0], params))`) of the three
  parameter trees for the "pipeline".

Scaled down: 4x4x2 "images", latent size 6, 5-token captions over a 12-word vocabulary,
2 examples per device, 2 epochs of 3 steps (max 5 train steps).

The original needs jax 0.4.38 (`jax.device_put_replicated` is gone from jax 0.10).
"""
import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

IMAGE_SHAPE = (4, 4, 2)
LATENT = 6
VOCAB = 12
TOKENS = 5
TEXT_DIM = 8
NUM_TRAIN_TIMESTEPS = 100


def replicate(tree, devices=None):
    devices = devices or jax.local_devices()
    return jax.device_put_replicated(tree, devices)


def unreplicate(tree):
    return jax.tree_util.tree_map(lambda x: x[0], tree)


def shard(xs):
    local_device_count = jax.local_device_count()
    return jax.tree_util.tree_map(
        lambda x: x.reshape((local_device_count, -1) + x.shape[1:]), xs)


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["step", "params", "opt_state"], meta_fields=["apply_fn", "tx"])
@dataclasses.dataclass(frozen=True)
class TrainState:
    step: Any
    params: Any
    opt_state: Any
    apply_fn: Any
    tx: Any

    @classmethod
    def create(cls, *, apply_fn, params, tx):
        return cls(step=0, params=params, opt_state=tx.init(params), apply_fn=apply_fn, tx=tx)

    def apply_gradients(self, *, grads):
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        params = jax.tree_util.tree_map(lambda p, u: p + u, self.params, updates)
        return dataclasses.replace(self, step=self.step + 1, params=params,
                                   opt_state=opt_state)


class ClippedAdamW:
    """`optax.chain(clip_by_global_norm(max_norm), adamw(constant lr, ...))`, hashable."""

    def __init__(self, learning_rate, max_grad_norm, b1=0.9, b2=0.999, eps=1e-8,
                 weight_decay=1e-2):
        self.learning_rate, self.max_grad_norm = learning_rate, max_grad_norm
        self.b1, self.b2, self.eps, self.weight_decay = b1, b2, eps, weight_decay

    def init(self, params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return {"count": jnp.zeros((), jnp.int32), "mu": zeros, "nu": zeros}

    def update(self, grads, state, params):
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree_util.tree_leaves(grads)))
        scale = jnp.where(norm < self.max_grad_norm, 1.0, self.max_grad_norm / norm)
        grads = jax.tree_util.tree_map(lambda g: g * scale, grads)
        count = state["count"] + 1
        mu = jax.tree_util.tree_map(lambda m, g: self.b1 * m + (1 - self.b1) * g, state["mu"], grads)
        nu = jax.tree_util.tree_map(lambda v, g: self.b2 * v + (1 - self.b2) * g * g, state["nu"], grads)
        c1, c2 = 1 - self.b1 ** count, 1 - self.b2 ** count
        updates = jax.tree_util.tree_map(
            lambda m, v, p: -self.learning_rate * ((m / c1) / (jnp.sqrt(v / c2) + self.eps)
                                                  + self.weight_decay * p), mu, nu, params)
        return updates, {"count": count, "mu": mu, "nu": nu}


class DDPMScheduler:
    def __init__(self, beta_start, beta_end, num_train_timesteps):
        self.num_train_timesteps = num_train_timesteps
        self.prediction_type = "epsilon"
        self._betas = np.linspace(beta_start ** 0.5, beta_end ** 0.5, num_train_timesteps,
                                  dtype=np.float32) ** 2

    def create_state(self):
        return {"alphas_cumprod": jnp.asarray(np.cumprod(1.0 - self._betas))}

    def add_noise(self, state, original_samples, noise, timesteps):
        alpha_bar = state["alphas_cumprod"][timesteps][:, None]
        return jnp.sqrt(alpha_bar) * original_samples + jnp.sqrt(1.0 - alpha_bar) * noise


def _dense_init(key, fan_in, fan_out, scale=1.0):
    return jax.random.normal(key, (fan_in, fan_out)) * scale / math.sqrt(fan_in)


def init_models(key):
    ks = jax.random.split(key, 6)
    d_img = int(np.prod(IMAGE_SHAPE))
    vae_params = {"mean": _dense_init(ks[0], d_img, LATENT), "logvar": _dense_init(ks[1], d_img, LATENT, 0.1)}
    text_params = {"embed": jax.random.normal(ks[2], (VOCAB, TEXT_DIM)) * 0.5}
    unet_params = {"in": _dense_init(ks[3], LATENT + TEXT_DIM + 4, 16),
                   "in_bias": jnp.zeros((16,)),
                   "out": _dense_init(ks[4], 16, LATENT, 0.1),
                   "out_bias": jnp.zeros((LATENT,))}
    return vae_params, text_params, unet_params


def vae_encode(params, pixel_values):
    flat = pixel_values.reshape((pixel_values.shape[0], -1))
    return flat @ params["mean"], flat @ params["logvar"]


def latent_sample(mean, logvar, key):
    return mean + jnp.exp(0.5 * logvar) * jax.random.normal(key, mean.shape)


def text_encode(input_ids, params):
    return (jnp.mean(params["embed"][input_ids], axis=1),)


def unet_apply(params, noisy_latents, timesteps, encoder_hidden_states, dropout_rng=None):
    t = timesteps.astype(jnp.float32)[:, None] / NUM_TRAIN_TIMESTEPS
    temb = jnp.concatenate([jnp.sin(t * jnp.array([1.0, 3.0])), jnp.cos(t * jnp.array([1.0, 3.0]))], -1)
    h = jnp.concatenate([noisy_latents, encoder_hidden_states, temb], -1)
    h = jax.nn.silu(h @ params["in"] + params["in_bias"])
    if dropout_rng is not None:
        keep = jax.random.bernoulli(dropout_rng, 0.9, h.shape)
        h = jnp.where(keep, h / 0.9, 0.0)
    return h @ params["out"] + params["out_bias"]


def make_dataset(seed, num_examples):
    rng = np.random.RandomState(seed)
    input_ids = rng.randint(0, VOCAB, size=(num_examples, TOKENS)).astype(np.int32)
    basis = np.random.RandomState(99).normal(size=(VOCAB,) + IMAGE_SHAPE)
    pixel_values = basis[input_ids].mean(axis=1) + 0.1 * rng.normal(size=(num_examples,) + IMAGE_SHAPE)
    return {"pixel_values": pixel_values.astype(np.float32), "input_ids": input_ids}


def train_dataloader(dataset, batch_size, epoch_seed):
    order = np.random.RandomState(epoch_seed).permutation(len(dataset["input_ids"]))
    for start in range(0, len(order) - batch_size + 1, batch_size):
        idx = order[start:start + batch_size]
        yield {k: v[idx] for k, v in dataset.items()}


def get_params_to_save(params):
    return jax.device_get(jax.tree_util.tree_map(lambda x: x[0], params))


def main(seed=0, per_device_batch=2, num_train_epochs=2, max_train_steps=5):
    total_train_batch_size = per_device_batch * jax.local_device_count()
    train_dataset = make_dataset(1, 3 * total_train_batch_size)

    vae_params, text_encoder_params, unet_params = init_models(jax.random.PRNGKey(7))
    optimizer = ClippedAdamW(learning_rate=1e-2, max_grad_norm=1.0)
    state = TrainState.create(apply_fn=unet_apply, params=unet_params, tx=optimizer)

    noise_scheduler = DDPMScheduler(beta_start=0.00085, beta_end=0.012,
                                    num_train_timesteps=NUM_TRAIN_TIMESTEPS)
    noise_scheduler_state = noise_scheduler.create_state()

    rng = jax.random.PRNGKey(seed)
    train_rngs = jax.random.split(rng, jax.local_device_count())

    def train_step(state, text_encoder_params, vae_params, batch, train_rng):
        dropout_rng, sample_rng, new_train_rng = jax.random.split(train_rng, 3)

        def compute_loss(params):
            mean, logvar = vae_encode(vae_params, batch["pixel_values"])
            latents = latent_sample(mean, logvar, sample_rng) * 0.18215
            noise_rng, timestep_rng = jax.random.split(sample_rng)
            noise = jax.random.normal(noise_rng, latents.shape)
            bsz = latents.shape[0]
            timesteps = jax.random.randint(timestep_rng, (bsz,), 0,
                                           noise_scheduler.num_train_timesteps)
            noisy_latents = noise_scheduler.add_noise(noise_scheduler_state, latents, noise,
                                                      timesteps)
            encoder_hidden_states = text_encode(batch["input_ids"], params=text_encoder_params)[0]
            model_pred = state.apply_fn(params, noisy_latents, timesteps, encoder_hidden_states,
                                        dropout_rng=dropout_rng)
            if noise_scheduler.prediction_type == "epsilon":
                target = noise
            else:
                raise ValueError(f"Unknown prediction type {noise_scheduler.prediction_type}")
            loss = (target - model_pred) ** 2
            return loss.mean()

        grad_fn = jax.value_and_grad(compute_loss)
        loss, grad = grad_fn(state.params)
        grad = jax.lax.pmean(grad, "batch")
        new_state = state.apply_gradients(grads=grad)
        metrics = {"loss": loss}
        metrics = jax.lax.pmean(metrics, axis_name="batch")
        return new_state, metrics, new_train_rng

    p_train_step = jax.pmap(train_step, "batch", donate_argnums=(0,))

    state = replicate(state)
    text_encoder_params = replicate(text_encoder_params)
    vae_params = replicate(vae_params)

    global_step = 0
    epoch_losses = []
    for epoch in range(num_train_epochs):
        train_metrics = []
        for batch in train_dataloader(train_dataset, total_train_batch_size, epoch):
            batch = shard(batch)
            state, train_metric, train_rngs = p_train_step(
                state, text_encoder_params, vae_params, batch, train_rngs)
            train_metrics.append(train_metric)
            global_step += 1
            if global_step >= max_train_steps:
                break
        train_metric = unreplicate(train_metric)
        epoch_losses.append(float(train_metric["loss"]))

    saved = {
        "text_encoder": get_params_to_save(text_encoder_params),
        "vae": get_params_to_save(vae_params),
        "unet": get_params_to_save(state.params),
    }
    return {
        "epoch_losses": np.asarray(epoch_losses),
        "steps_last_epoch": np.asarray(len(train_metrics)),
        "unet_in": np.asarray(saved["unet"]["in"]),
        "unet_out_bias": np.asarray(saved["unet"]["out_bias"]),
        "vae_mean": np.asarray(saved["vae"]["mean"]),
        "text_embed": np.asarray(saved["text_encoder"]["embed"]),
        "train_rngs": np.asarray(train_rngs),
        "step": np.asarray(state.step),
    }


def run():
    return main()
