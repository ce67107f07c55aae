"""The generated helpers' text: transforms/templates/ rendered for the target JAX."""
