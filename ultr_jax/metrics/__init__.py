"""ultr_jax.metrics."""
