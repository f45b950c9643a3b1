r"""Host-side checks of a click log and a target before the jitted estimators see them, and the checked entry point.

The estimators themselves are pure jitted kernels with no checks in them: a zero logging propensity there is a
weight of 0, a probability outside [0, 1] is used as given. :func:`evaluate` (and any caller that wants the
checks) runs :func:`check_log` first, which raises a ``ValueError`` naming the field and the first bad row.
"""

from typing import Any, Optional

import jax.numpy as jnp
import numpy as np

from ultr_jax.evaluation import _common as C
from ultr_jax.evaluation._common import Estimate
from ultr_jax.evaluation.policies import Propensities, target_ranks
from ultr_jax.evaluation.registry import get_estimator

__all__ = ["check_log", "check_support", "target_scores_from_ranking", "evaluate"]


def _first_row(bad: np.ndarray) -> int:
  """Index of the first session (leading axis) with a bad entry."""
  flat = bad.reshape(bad.shape[0], -1) if bad.ndim > 1 else bad[:, None]
  return int(np.argmax(np.any(flat, axis=1)))


def _check_shape(name: str, x: Any, shape: tuple) -> np.ndarray:
  a = np.asarray(x)
  if a.shape != shape:
    raise ValueError(f"{name}: shape {a.shape} does not match the log's {shape} (lists of unequal lengths)")
  return a


def _check_probability(name: str, p: np.ndarray, mask: np.ndarray, *, positive: bool) -> None:
  p = np.asarray(p, np.float64)
  bad = mask & ~np.isfinite(p)
  if bad.any():
    raise ValueError(f"{name}: missing (non-finite) probability in row {_first_row(bad)}")
  bad = mask & ((p < 0) | (p > 1))
  if bad.any():
    raise ValueError(f"{name}: probability outside [0, 1] in row {_first_row(bad)}: {p[bad][0]}")
  if positive:
    bad = mask & (p <= 0)
    if bad.any():
      raise ValueError(f"{name}: zero propensity for a shown item in row {_first_row(bad)}")


def check_log(
  clicks: Any,
  *,
  where: Optional[Any] = None,
  scores: Optional[Any] = None,
  logging: Optional[Propensities] = None,
  propensities: Optional[Any] = None,
  doc_ids: Optional[Any] = None,
  top_k: Optional[int] = None,
) -> None:
  """Checks a click log and what comes with it; raises ``ValueError`` naming the field and the first bad row.

  Checks: every array has the log's ``[B, L]`` shape (``logging.ranking`` ``[B]``); clicks are 0/1 on valid
  items; each list's valid items come first; scores are finite on valid items; every logging propensity of a
  shown item (valid, within ``top_k``) is in (0, 1] and finite (a zero or missing propensity cannot weight a
  click); examination ``propensities`` likewise; ``doc_ids`` are non-negative integers.

  Args:
    clicks: ``[B, L]``.
    where: ``bool[B, L]`` (default all valid).
    scores: ``[B, L]`` target scores.
    logging: the logging policy's :class:`Propensities`.
    propensities: ``[B, L]`` examination propensities (:func:`~ultr_jax.evaluation.click_dcg`).
    doc_ids: ``int[B, L]``.
    top_k: the displayed prefix.

  Raises:
    ValueError: naming the field and the row.

  >>> check_log(np.ones((2, 2)), propensities=np.array([[1.0, 0.5], [1.0, 0.0]]))
  Traceback (most recent call last):
  ...
  ValueError: propensities: zero propensity for a shown item in row 1
  """
  c = np.asarray(clicks, np.float64)
  if c.ndim != 2:
    raise ValueError(f"clicks: expected [B, L] sessions, got shape {c.shape}")
  shape = c.shape
  w = np.ones(shape, bool) if where is None else _check_shape("where", where, shape).astype(bool)
  shown = w if top_k is None else w & (np.arange(shape[1]) < top_k)
  bad = np.diff(w.astype(np.int8), axis=1) > 0
  if bad.any():
    raise ValueError(f"where: valid items must come first in each list (row {_first_row(bad)})")
  bad = w & ~np.isin(c, (0.0, 1.0))
  if bad.any():
    raise ValueError(f"clicks: expected 0/1 on valid items, row {_first_row(bad)} has {c[bad][0]}")
  if scores is not None:
    s = _check_shape("scores", scores, shape).astype(np.float64)
    bad = w & ~np.isfinite(s)
    if bad.any():
      raise ValueError(f"scores: non-finite target score in row {_first_row(bad)}")
  if logging is not None:
    _check_shape("logging.ranking", logging.ranking, shape[:1])
    _check_probability("logging.ranking", np.asarray(logging.ranking), np.any(w, axis=1), positive=True)
    for name in ("prefix", "item_position"):
      value = _check_shape(f"logging.{name}", getattr(logging, name), shape)
      _check_probability(f"logging.{name}", value, shown, positive=True)
  if propensities is not None:
    _check_probability("propensities", _check_shape("propensities", propensities, shape), shown, positive=True)
  if doc_ids is not None:
    d = _check_shape("doc_ids", doc_ids, shape)
    if not np.issubdtype(d.dtype, np.integer) or (w & (d < 0)).any():
      raise ValueError("doc_ids: expected non-negative integer ids on valid items")


def check_support(
  scores: Any,
  logging: Propensities,
  *,
  where: Optional[Any] = None,
  temperature: float = 0.0,
  top_k: Optional[int] = None,
) -> None:
  r"""Raises ``ValueError`` when the target can put an item at a position where the logging policy never does.

  Importance weighting needs :math:`\pi_b(y_k = d) > 0` wherever :math:`\pi_e(y_k = d) > 0` (for the ranking
  and prefix weights this is necessary, not sufficient); a target outside the logging policy's support is not
  identified from the log, and its IPS estimate would silently leave those clicks out. Reads
  ``logging.matrix`` (``plackett_luce_propensities(..., matrix=True)``); a deterministic target puts each item
  at its rank, a Plackett-Luce one every valid item at every displayed position.

  Args:
    scores: ``[B, L]`` target scores.
    logging: the logging policy's :class:`Propensities` with ``matrix``.
    where: ``bool[B, L]``.
    temperature: the target's temperature (0: deterministic).
    top_k: the displayed prefix.

  Raises:
    ValueError: naming ``scores``, the row, the item and the position.

  >>> import jax.numpy as jnp
  >>> from ultr_jax.evaluation import plackett_luce_propensities
  >>> greedy = plackett_luce_propensities(jnp.array([[1.0, 0.0]]), temperature=0.0, matrix=True)
  >>> check_support(np.array([[0.0, 1.0]]), greedy)
  Traceback (most recent call last):
  ...
  ValueError: scores: row 0 puts item 0 at position 1, where the logging policy never shows it (logging.matrix is 0); off-policy estimates of this target are not identified
  """
  if logging.matrix is None:
    raise ValueError("check_support: logging.matrix is required (plackett_luce_propensities(..., matrix=True))")
  s = np.asarray(scores, np.float64)
  size = s.shape[-1]
  w = np.ones(s.shape, bool) if where is None else np.asarray(where, bool)
  k = size if top_k is None else min(top_k, size)
  n_valid = w.sum(axis=-1, keepdims=True)
  if temperature == 0:
    ranks = np.asarray(target_ranks(jnp.asarray(s), where=jnp.asarray(w)))
    support = (ranks[..., :, None] == np.arange(size)) & w[..., :, None]
  else:
    support = w[..., :, None] & (np.arange(size) < n_valid[..., None])
  support &= np.arange(size) < k
  bad = support & (np.asarray(logging.matrix) <= 0)
  if bad.any():
    row, item, pos = (int(x) for x in np.argwhere(bad)[0])
    raise ValueError(
      f"scores: row {row} puts item {item} at position {pos}, where the logging policy never shows it "
      "(logging.matrix is 0); off-policy estimates of this target are not identified"
    )


def target_scores_from_ranking(doc_ids: Any, target_doc_ids: Any, *, where: Optional[Any] = None) -> np.ndarray:
  """Scores over the logged items that make the deterministic target rank them as ``target_doc_ids`` does.

  Each row of ``target_doc_ids`` lists document ids best first (padded with -1); a logged item missing from it
  ranks after the listed ones, in display order. A target that ranks a document the session never showed cannot
  be evaluated from that session's clicks: that is an error.

  Args:
    doc_ids: ``int[B, L]`` the logged documents (display order).
    target_doc_ids: ``int[B, M]`` the target's ranking per session (-1: padding).
    where: ``bool[B, L]``.

  Returns:
    ``float32[B, L]`` scores (higher is better; ``-(target rank)``).

  Raises:
    ValueError: naming ``target_doc_ids`` and the row of a document the log did not show.

  >>> print(target_scores_from_ranking(np.array([[5, 7, 9]]), np.array([[9, 5, -1]])))
  [[-1. -4. -0.]]
  >>> target_scores_from_ranking(np.array([[5, 7]]), np.array([[8, 5]]))
  Traceback (most recent call last):
  ...
  ValueError: target_doc_ids: row 0 ranks document 8, which the log did not show for that session
  """
  d = np.asarray(doc_ids)
  t = np.asarray(target_doc_ids)
  if d.ndim != 2 or t.ndim != 2 or t.shape[0] != d.shape[0]:
    raise ValueError(f"target_doc_ids: shape {t.shape} does not match doc_ids {d.shape} (one ranking per session)")
  w = np.ones(d.shape, bool) if where is None else _check_shape("where", where, d.shape).astype(bool)
  size = d.shape[1]
  scores = np.empty(d.shape, np.float32)
  for i in range(d.shape[0]):
    shown = {int(x): j for j, x in enumerate(d[i]) if w[i, j]}
    rank = np.full(size, t.shape[1] + np.arange(size), np.float64)
    seen: dict = {}
    for r, doc in enumerate(int(x) for x in t[i]):
      if doc < 0:
        continue
      if doc in seen:
        raise ValueError(
          f"target_doc_ids: row {i} ranks document {doc} twice (at ranks {seen[doc]} and {r}); a ranking lists each "
          "document once"
        )
      seen[doc] = r
      if doc not in shown:
        raise ValueError(f"target_doc_ids: row {i} ranks document {doc}, which the log did not show for that session")
      rank[shown[doc]] = r
    scores[i] = -rank
  return scores


def evaluate(name: str, scores: Any, clicks: Any, *, where: Optional[Any] = None, **inputs) -> Estimate:
  """Checks the log (:func:`check_log`), then runs the registered estimator ``name``.

  Args:
    name: an estimator of :data:`~ultr_jax.evaluation.ESTIMATORS`.
    scores: ``[B, L]`` target scores of the logged items.
    clicks: ``[B, L]``.
    where: ``bool[B, L]``.
    **inputs: the estimator's declared inputs (:attr:`EstimatorSpec.inputs`) and options (``weights``,
      ``top_k``, ``temperature``, ``clip``, ...).

  Returns:
    :class:`~ultr_jax.evaluation.Estimate`.

  Raises:
    ValueError: for an unknown estimator, a missing declared input, a bad log (naming field and row), or a
      target outside the logging policy's support (:func:`check_support`, when ``logging.matrix`` is given).

  >>> import jax.numpy as jnp
  >>> from ultr_jax.evaluation import plackett_luce_propensities
  >>> b = plackett_luce_propensities(jnp.zeros((1, 2)), temperature=1.0)
  >>> print(evaluate("iips", np.array([[1.0, 0.0]]), np.array([[1.0, 0.0]]), logging=b).value)
  2.0
  """
  spec = get_estimator(name)
  missing = [k for k in spec.inputs if k not in inputs and k != "key"]
  if missing:
    raise ValueError(f"{name}: missing input(s) {missing}; it declares {spec.inputs}")
  check_log(
    clicks,
    where=where,
    scores=scores,
    logging=inputs.get("logging"),
    propensities=inputs.get("propensities"),
    doc_ids=inputs.get("doc_ids"),
    top_k=inputs.get("top_k"),
  )
  temperature, top_k = inputs.get("temperature", 0.0), inputs.get("top_k")
  C.check_options(temperature=temperature, top_k=top_k, what=name)
  logging = inputs.get("logging")
  if logging is not None and logging.matrix is not None:
    check_support(scores, logging, where=where, temperature=temperature, top_k=top_k)
  elif logging is not None and "model" not in spec.inputs:  # a model-based estimator has the model's values there
    _check_deterministic_support(scores, logging, where=where, temperature=temperature, top_k=top_k)
  return spec.fn(scores, clicks, where=where, **inputs)


def _check_deterministic_support(scores, logging: Propensities, *, where, temperature, top_k) -> None:
  """With a deterministic logger (every logged ranking has probability 1), support is decidable without
  ``logging.matrix``: it shows item ``i`` only at its logged position, so a target that puts a shown item
  elsewhere (or a Plackett-Luce target, which puts every item everywhere) is refused, naming the session."""
  s = np.asarray(scores, np.float64)
  w = np.ones(s.shape, bool) if where is None else np.asarray(where, bool)
  valid = w.any(axis=-1)
  if not np.all(np.asarray(logging.ranking)[valid] == 1.0):
    return  # a stochastic logger: support needs logging.matrix (check_support)
  size = s.shape[-1]
  k = size if top_k is None else min(int(top_k), size)
  shown = w & (np.arange(size) < k)
  if temperature != 0:
    moves = shown & (w.sum(axis=-1, keepdims=True) > 1)
  else:
    moves = shown & (np.asarray(target_ranks(jnp.asarray(s), where=jnp.asarray(w))) != np.arange(size))
  if moves.any():
    row, pos = (int(x) for x in np.argwhere(moves)[0])
    raise ValueError(
      f"scores: row {row}: the logging policy is deterministic (every logged ranking has probability 1) and shows "
      f"its item at position {pos} only there, but the target moves it: off-policy estimates of this target are "
      "not identified from this log (they would count those clicks as 0)"
    )
