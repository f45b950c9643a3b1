"""Divergence reports of :func:`~ultr_jax.train.fit`: where a run's loss went non-finite, and why.

Every step reports, when some seed's loss is not finite, which of the batch's inputs and which parameter leaves
hold a non-finite value (:func:`~ultr_jax.train.step.train_step`; nothing is computed on a finite loss), and
:func:`~ultr_jax._divergence.first_nonfinite` finds the first such step. At an
evaluation that finds a non-finite loss or parameters, :func:`divergence_cause` turns the first such step into
a sentence naming the step, the batch and the input field or parameter; on the in-memory path the batch is
re-read on the host to name the queries whose shown entries are not finite.
"""

from typing import Any, Optional, Sequence

import numpy as np

from ultr_jax.data import RankingDataset
from ultr_jax.train.input import TrainLayout

__all__ = ["check_selection_metric", "divergence_cause"]


def _queries(train: RankingDataset, layout: TrainLayout, batch: int, field: str) -> list:
  """The qids of ``batch``'s queries (any seed's) whose shown entries of ``field`` are not finite."""
  rows = np.unique(layout.queries(batch))
  lists = train.as_batch(rows[rows >= 0])
  v, where = np.asarray(lists.get(field, np.zeros(0))), np.asarray(lists["where"])
  if v.dtype.kind not in "fc" or not len(v):
    return []
  bad = ~np.isfinite(v)
  if v.shape[: where.ndim] == where.shape:
    bad = bad.reshape(where.shape + (-1,)).any(-1) & where
  return np.asarray(lists["qid"])[bad.reshape(len(v), -1).any(-1)].tolist()


def divergence_cause(
  first: Optional[dict],
  *,
  nonfinite_params: Sequence[str] = (),
  train: Optional[RankingDataset] = None,
  layout: Optional[TrainLayout] = None,
) -> str:
  """A sentence on why a run diverged: the step, the batch and the first input field or parameter that went
  non-finite, with what to do about it.

  Args:
    first: :func:`~ultr_jax._divergence.first_nonfinite`'s record (None: every step was finite, only parameters are not).
    nonfinite_params: the parameter leaves that are not finite at the evaluation.
    train: the in-memory training lists (to name the queries of a bad input; None for a stream).
    layout: their layout.

  Returns:
    The sentence.

  >>> divergence_cause({"batch": 6, "inputs": ["features"], "params_before": [], "params_after": []})
  'The first non-finite value came at step 7 (batch 6): its input features hold(s) non-finite values among the shown items; fix the data (a masked entry does not count: it is zeroed before the model sees it).'
  """
  if first is None:
    return (
      f"The loss stayed finite but parameter(s) {list(nonfinite_params)} went non-finite. Lower the learning "
      "rate or clip the gradients (grad_clip)."
    )
  where = f"step {first['batch'] + 1} (batch {first['batch']}"
  if first["inputs"]:
    field = first["inputs"][0]
    if train is not None and layout is not None:
      where += f", queries with qid {_queries(train, layout, first['batch'], field)[:10]}"
    return (
      f"The first non-finite value came at {where}): its input {', '.join(first['inputs'])} hold(s) non-finite "
      "values among the shown items; fix the data (a masked entry does not count: it is zeroed before the model "
      "sees it)."
    )
  if first["params_before"]:
    return (
      f"The first non-finite value came at {where}), with finite inputs, from parameter(s) "
      f"{first['params_before']} already non-finite. Lower the learning rate or clip the gradients (grad_clip)."
    )
  return (
    f"The first non-finite value came at {where}), with finite inputs and parameters: the update made "
    f"{first['params_after'] or 'the loss'} non-finite. Lower the learning rate or clip the gradients (grad_clip)."
  )


def check_selection_metric(
  values: Any, name: str, *, seeds: Sequence[int], diverged: np.ndarray, step: Optional[int] = None
) -> None:
  """Refuses a non-finite validation ``name`` of a seed not marked diverged: model selection on it would keep
  whatever state came first (the untrained one) as the "best".

  Args:
    values: ``[S]`` the validation metric per seed.
    name: the metric (``config.select_metric``).
    seeds: the runs' seeds, ``[S]``.
    diverged: ``bool[S]``, the seeds marked diverged (their metric may be NaN; their best stays where it was).
    step: the step evaluated, for the error.

  Raises:
    ValueError: naming the seeds, the step and the metric's values.

  >>> check_selection_metric(np.array([0.5, np.nan]), "ndcg@10", seeds=(0, 1), diverged=np.array([False, False]))
  Traceback (most recent call last):
  ValueError: validation ndcg@10 is not finite for seed(s) [1] ([0.5, nan]): model selection cannot rank it; a NaN feature or label in the validation set, or NaN scores (a NaN score on a valid item makes its list's metric NaN)
  """
  v = np.asarray(values, np.float64).reshape(-1)
  bad = ~np.isfinite(v) & ~np.asarray(diverged, bool).reshape(-1)
  if bad.any():
    at = "" if step is None else f" at step {step}"
    raise ValueError(
      f"validation {name} is not finite{at} for seed(s) {[seeds[int(i)] for i in np.flatnonzero(bad)]} ({v.tolist()}): "
      "model selection cannot rank it; a NaN feature or label in the validation set, or NaN scores (a NaN score "
      "on a valid item makes its list's metric NaN)"
    )
