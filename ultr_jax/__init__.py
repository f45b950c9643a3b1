"""ultr_jax: unbiased learning to rank in JAX."""

__version__ = "0.1.0"
