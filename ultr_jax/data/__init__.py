"""ultr_jax.data: loaders, caching, preprocessing, synthetic data, batching."""

from ultr_jax.data.dataset import RankingDataset

__all__ = ["RankingDataset"]
