"""ultr_jax.losses."""
