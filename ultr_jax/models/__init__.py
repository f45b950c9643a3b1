"""ultr_jax.models."""
