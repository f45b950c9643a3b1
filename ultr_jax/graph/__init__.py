"""ultr_jax.graph."""
