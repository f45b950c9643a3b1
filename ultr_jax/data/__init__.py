"""ultr_jax.data: loaders, caching, preprocessing, synthetic data, batching."""

from ultr_jax.data.dataset import RankingDataset
from ultr_jax.data.ultra import load_ultra, read_ultra_features

__all__ = ["load_ultra", "read_ultra_features", "RankingDataset"]
