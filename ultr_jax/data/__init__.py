"""ultr_jax.data."""
