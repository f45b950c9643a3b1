r"""SIF's position+trust simulator as a registered click model (Section VI-D of the SIF paper).

.. math::
    d^*_i = \alpha e^{-\delta p_i} \sigma(\gamma z_i),\qquad
    P(C_i = 1) = \min\bigl(1,\ v_{p_i}^{\eta}\, r_i\, (1 + d^*_i)\bigr)

with 0-based positions :math:`p_i`, ULTRA's examination table :math:`v`, and the standardised logging score
:math:`z_i` (``batch["logging_score"]``). Clicks are independent given the list. The sampler and its options
(``expected``, ``score_key``, the per-query ``alpha_key``) are :func:`~ultr_jax.simulation.position_trust`'s: the
model builds its click function with :func:`~ultr_jax.simulation.make_position_trust_click_fn`
(:meth:`PositionTrust.click_function`), so a config names it like any other model. Simulation only: it is not
fitted and has no likelihood loss.
"""

import dataclasses
from typing import Any, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp

from ultr_jax.simulation import probabilities as P
from ultr_jax.simulation.click_models.base import ClickModel, Session, prepare
from ultr_jax.simulation.click_models.pbm import table_kwargs
from ultr_jax.types import Array

__all__ = ["PositionTrust"]


@dataclasses.dataclass(frozen=True)
class PositionTrust(ClickModel):
  """SIF's position+trust clicks (see the module docstring); simulation only.

  >>> import jax.numpy as jnp
  >>> s = PositionTrust().session(jnp.array([1.0, 0.1]), logging_score=jnp.zeros(2))
  >>> print(s.click_prob.round(4))
  [0.884  0.0746]
  """

  name = "position_trust"
  config_keys = {
    "alpha": 0.6,
    "delta": 0.3,
    "gamma": 1.0,
    "eta": 1.0,
    "table": None,
    "expected": False,
    "score_key": "logging_score",
    "alpha_key": None,
  }
  batch_inputs = ("logging_score",)
  fittable = False
  loss = False

  def click_function(self, cfg: Mapping[str, Any]):
    from ultr_jax.simulation.position_trust import make_position_trust_click_fn  # pylint: disable=g-import-not-at-top

    return make_position_trust_click_fn(cfg)

  def simulation_kwargs(self, cfg: Mapping[str, Any]) -> dict:
    kwargs = {k: float(cfg.get(k, self.config_keys[k])) for k in ("alpha", "delta", "gamma")}
    return {**kwargs, **table_kwargs({k: v for k, v in cfg.items() if v is not None})}

  def session(
    self,
    attraction: Array,
    *,
    where: Optional[Array] = None,
    positions: Optional[Array] = None,
    top_k: Optional[int] = None,
    logging_score: Array,
    alpha: float = 0.6,
    delta: float = 0.3,
    gamma: float = 1.0,
    eta: float = 1.0,
    table: Sequence[float] = P.ULTRA_EXAM_TABLE,
  ) -> Session:
    r, where, positions, shown = prepare(attraction, where, positions, top_k)
    exam = P.pbm_table_examination(positions, eta=eta, table=table)
    trust_score = jax.nn.sigmoid(gamma * jnp.asarray(logging_score, jnp.float32))
    trust = alpha * jnp.exp(-delta * positions.astype(jnp.float32)) * trust_score
    zero = lambda v: jnp.where(shown, v, 0.0)
    extras = {"trust": zero(trust), "trust_score": zero(trust_score), "click_propensity": zero(exam * (1.0 + trust))}
    click_prob = jnp.minimum(1.0, exam * r * (1.0 + trust))
    return Session(exam, click_prob, shown, True, extras=extras, top_k=top_k)
