"""ultr_jax.metrics: ranking metrics (through rax) and click-prediction metrics.

* :mod:`~ultr_jax.metrics.ranking`: nDCG@k, DCG@k, ERR@k, MRR, MAP, precision@k, MCC and the
  training loop's :func:`ranking_metrics` (conventions in its docstring: a
  list with IDCG = 0 scores 0 and is averaged in unless
  ``drop_no_relevant=True``);
* :mod:`~ultr_jax.metrics.clicks`: click MSE, log-likelihood, perplexity per
  rank.
"""

from ultr_jax.metrics.clicks import (
  click_log_likelihood,
  click_mse,
  click_perplexity,
  click_perplexity_per_rank,
)
from ultr_jax.metrics.ranking import (
  average_precision,
  dcg,
  err,
  mcc,
  mrr,
  ndcg,
  precision,
  query_mask,
  ranking_metrics,
)

__all__ = [
  "average_precision",
  "click_log_likelihood",
  "click_mse",
  "click_perplexity",
  "click_perplexity_per_rank",
  "dcg",
  "err",
  "mcc",
  "mrr",
  "ndcg",
  "precision",
  "query_mask",
  "ranking_metrics",
]
