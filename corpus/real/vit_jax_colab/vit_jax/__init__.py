"""A scaled-down stand-in for google-research/vision_transformer's `vit_jax` package, as its
`vit_jax.ipynb` colab imports it (see ../vit_jax_colab.ipynb): `train.make_update_fn` builds
the pmapped update step, `utils` the gradient accumulation and learning-rate schedule,
`models` a tiny classifier, `input_pipeline` batches laid out per local device."""
