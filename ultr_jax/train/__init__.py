"""ultr_jax.train: training loop, sharding, checkpoints, results."""
