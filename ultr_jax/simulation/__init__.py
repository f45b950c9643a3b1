"""ultr_jax.simulation."""
