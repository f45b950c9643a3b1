r"""The synthetic toy of the SIF study (T6/T7): documents, graded labels and a correlated logging score.

Its clicks come from the registered ``position_trust`` click model
(:class:`~ultr_jax.simulation.click_models.PositionTrust`), which reads the toy's standardised
``logging_score``.
"""

from typing import Optional, Sequence

import numpy as np

from ultr_jax.data import RankingDataset

__all__ = ["sif_toy_dataset"]


def sif_toy_dataset(
  num_queries: int,
  *,
  seed: int = 0,
  num_features: int = 20,
  list_size: int = 10,
  logging_corr: float = 0.7,
  noise: float = 0.5,
  quantiles: Sequence[float] = (0.5, 0.75, 0.9, 0.97),
  params: Optional[dict] = None,
) -> tuple[RankingDataset, dict]:
  r"""The synthetic toy of the SIF study (T6/T7), displayed in logging order.

  .. math::
      x \sim N(0, I_F),\quad u = x^\top w^* + 0.5\,\xi,\quad
      R_s = x^\top w_{log},\quad w_{log} = \rho\,w^* + \sqrt{1-\rho^2}\,n

  with unit :math:`w^*` and unit :math:`n \perp w^*` (so
  :math:`\mathrm{corr}(R_s, x^\top w^*) = \rho` exactly). Grades
  :math:`y \in \{0..4\}` are the bins of :math:`u` at the global quantiles
  ``quantiles``; each list is sorted by :math:`R_s` (item ``i`` is displayed
  at position ``i``). The extra ``logging_score`` is :math:`R_s`
  standardised with global statistics.

  Args:
    num_queries: lists to draw.
    seed: NumPy seed for the documents (the ground-truth vectors and
      quantile thresholds come from ``params`` when given).
    num_features: :math:`F`, features per document.
    list_size: documents per list.
    logging_corr: :math:`\rho`, the correlation of the logging score with :math:`x^\top w^*`.
    noise: the scale of :math:`\xi` in :math:`u` (0.5 in the formula above).
    quantiles: the global quantiles of :math:`u` binning it into grades (the default's four give grades 0..4).
    params: ``{"w_star", "w_log", "thresholds", "rs_mean", "rs_std"}`` from a
      previous call (to draw test lists from the same world); None draws new
      ones from ``seed``.

  Returns:
    ``(dataset, params)``; the dataset's extras hold ``logging_score``.

  >>> ds, world = sif_toy_dataset(200, seed=0)
  >>> ds.features.shape, round(float(np.corrcoef(ds.features.reshape(-1, 20) @ world["w_log"],
  ...     ds.features.reshape(-1, 20) @ world["w_star"])[0, 1]), 1)
  ((200, 10, 20), 0.7)
  """
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((num_queries, list_size, num_features))
  if params is None:
    wrng = np.random.default_rng([seed, 1])
    w_star = wrng.standard_normal(num_features)
    w_star /= np.linalg.norm(w_star)
    n = wrng.standard_normal(num_features)
    n -= (n @ w_star) * w_star
    n /= np.linalg.norm(n)
    w_log = logging_corr * w_star + np.sqrt(1.0 - logging_corr**2) * n
  else:
    w_star, w_log = params["w_star"], params["w_log"]
  u = x @ w_star + noise * rng.standard_normal((num_queries, list_size))
  rs = x @ w_log
  if params is None:
    thresholds = np.quantile(u, quantiles)
    rs_mean, rs_std = float(rs.mean()), float(rs.std())
  else:
    thresholds, rs_mean, rs_std = params["thresholds"], params["rs_mean"], params["rs_std"]
  labels = np.searchsorted(thresholds, u, side="right").astype(np.float32)
  order = np.argsort(-rs, axis=-1, kind="stable")
  take = lambda a: np.take_along_axis(a, order, axis=1)
  x = np.take_along_axis(x, order[..., None], axis=1)
  labels, rs = take(labels), take(rs)
  ds = RankingDataset(
    features=x.astype(np.float32),
    labels=labels,
    where=np.ones((num_queries, list_size), bool),
    qid=np.arange(num_queries),
    extras={"logging_score": ((rs - rs_mean) / rs_std).astype(np.float32)},
  )
  world = {"w_star": w_star, "w_log": w_log, "thresholds": thresholds, "rs_mean": rs_mean, "rs_std": rs_std}
  return ds, world
