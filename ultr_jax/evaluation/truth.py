r"""The exact expected reward of a target ranker under a simulated click model: the estimators' ground truth.

For a deterministic target the truth is the click model's exact marginals (:meth:`ClickModel.session`'s
``marginals()``) of the target's ranking, no sampling; for a Plackett-Luce target the expectation over its
rankings, by enumerating all :math:`L!` rankings when that is at most ``max_enumeration`` and by Monte Carlo with
its standard error otherwise.
"""

import itertools
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax.evaluation import _common as C
from ultr_jax.evaluation.policies import masked_last, target_ranks
from ultr_jax.simulation.click_models import get_click_model
from ultr_jax.types import Array, PRNGKey

__all__ = ["Truth", "true_value"]


class Truth(NamedTuple):
  """A target ranker's true expected reward.

  Attributes:
    value: ``[]`` the mean over the sessions of ``per_session``.
    per_session: ``[B]`` each session's expected reward (0 for an all-masked one).
    stderr: ``[]`` Monte-Carlo standard error of ``value`` (0 when exact).
  """

  value: Array
  per_session: Array
  stderr: Array


def _reward_of(model, attraction, where, ranks, w, top_k, model_kwargs):
  """``[B]`` expected reward of the rankings ``ranks [B, L]``: :math:`\\sum_j w_{\\mathrm{rank}_j} P(C_j = 1)`."""
  session = model.session(attraction, where=where, positions=ranks, top_k=top_k, **model_kwargs)
  _, click_prob = session.marginals()
  return jnp.sum(jnp.where(where, click_prob * jnp.take_along_axis(w, ranks, axis=-1), 0.0), axis=-1)


def _log_probs_all(z, where, perms):
  """Log-probabilities ``[B, P]`` of every full ranking ``perms [P, L]`` (item at each rank); masked items go
  last in index order (:func:`~ultr_jax.evaluation.policies.masked_last`), as the layout has them."""
  zs = masked_last(z, where)[..., perms]  # [B, P, L] in ranking order
  suffix = jax.lax.cumlogsumexp(zs, axis=zs.ndim - 1, reverse=True)
  return jnp.sum(zs - suffix, axis=-1)


def true_value(
  model: Any,
  attraction: Array,
  scores: Array,
  *,
  where: Optional[Array] = None,
  temperature: float = 0.0,
  weights: Optional[Array] = None,
  top_k: Optional[int] = None,
  key: Optional[PRNGKey] = None,
  num_samples: int = 10_000,
  max_enumeration: int = 5040,
  **model_kwargs,
) -> Truth:
  r"""The exact expected reward per session of a target ranker under a simulated click model.

  .. math::
      V(\pi_e) = \frac1n \sum_i \mathbb{E}_{y \sim \pi_e(\cdot \mid i)} \sum_{l < K} w_l\, P(C_l = 1 \mid y)

  with :math:`P(C_l = 1 \mid y)` the model's exact marginal (:meth:`~ultr_jax.simulation.ClickModel.session`),
  the policy value the off-policy estimators target (McInerney et al., KDD'20, Section 2; Kiyohara et al.,
  WSDM'22, Eq. 1). Deterministic target: exact. Plackett-Luce: exact over all :math:`L!` rankings when at most
  ``max_enumeration``, else the mean over ``num_samples`` sampled rankings with its standard error.
  Valid items must come first in each list (the log's layout).

  Args:
    model: a registered click model with a simulator (name or instance).
    attraction: ``[B, L]`` each logged item's attraction (click probability given examination).
    scores: ``[B, L]`` the target's scores of the items.
    where: ``bool[B, L]``.
    temperature: the target's Plackett-Luce temperature (0: deterministic).
    weights: ``[L]`` per-position reward weights (default ones).
    top_k: display cut-off :math:`K` (passed to the model and zeroing the weights from ``K`` on).
    key: PRNG key (a sampled Plackett-Luce target).
    num_samples: sampled rankings.
    max_enumeration: enumerate when :math:`L!` is at most this.
    **model_kwargs: the model's simulation arguments (e.g. ``eta``; :meth:`~ultr_jax.simulation.ClickModel.session`).

  Returns:
    :class:`Truth`.

  >>> t = true_value("cascade", jnp.array([[0.5, 0.8]]), jnp.array([[0.0, 1.0]]))
  >>> print(t.value.round(4), t.stderr)  # 0.8 + 0.2 * 0.5
  0.9 0.0
  """
  C.check_options(temperature=temperature, top_k=top_k, what="true_value")
  m = get_click_model(model)
  a = jnp.asarray(attraction, jnp.float32)
  s = jnp.asarray(scores, jnp.float32)
  shapes = {"attraction": a.shape, "scores": s.shape, **({} if where is None else {"where": np.shape(where)})}
  if len(set(shapes.values())) != 1:
    raise ValueError(f"true_value: attraction, scores and where must be one [B, L] shape (the log's), got {shapes}")
  where = C.mask_of(s, where)
  size = s.shape[-1]
  w = C.position_weights(s.shape, weights, top_k)
  valid = jnp.any(where, axis=-1)
  n = jnp.maximum(jnp.sum(valid), 1)

  def finish(per, stderr):
    per = jnp.where(valid, per, 0.0)
    return Truth(jnp.sum(per) / n, per, stderr)

  if temperature == 0:
    ranks = target_ranks(s, where=where)
    return finish(_reward_of(m, a, where, ranks, w, top_k, model_kwargs), jnp.zeros(()))
  z = jnp.where(where, s / temperature, 0.0)
  if np.prod(np.arange(1, size + 1)) <= max_enumeration:
    perms = np.array(list(itertools.permutations(range(size))), np.int32)
    ranks_all = np.argsort(perms, axis=-1).astype(np.int32)  # [P, L] rank of each item
    lp = _log_probs_all(z, where, perms)

    def one(rk):
      return _reward_of(m, a, where, jnp.broadcast_to(rk, s.shape), w, top_k, model_kwargs)

    values = jax.lax.map(one, jnp.asarray(ranks_all))  # [P, B]
    return finish(jnp.sum(jnp.exp(lp).T * values, axis=0), jnp.zeros(()))
  if key is None:
    raise ValueError("true_value: a Plackett-Luce target over more than max_enumeration rankings needs key=")
  g = jax.random.gumbel(key, (num_samples,) + s.shape)
  ranks = target_ranks(z + g, where=jnp.broadcast_to(where, g.shape))
  values = jax.lax.map(lambda rk: _reward_of(m, a, where, rk, w, top_k, model_kwargs), ranks)  # [S, B]
  per = jnp.mean(values, axis=0)
  var = jnp.var(values, axis=0, ddof=1) / num_samples
  stderr = jnp.sqrt(jnp.sum(jnp.where(valid, var, 0.0))) / n
  return finish(per, stderr)
