r"""SIF-ref, ultr_jax's reference design of SIF (Gong et al., Section IV), as :class:`~ultr_jax.train.Method` factories.

Registered names:

====================  ===========  ===========  =============  =======
name                  trust head   exposure u   channels       risk
====================  ===========  ===========  =============  =======
``sif_lambda0``       yes          learned      none           IPS
``sif_exp``           yes          learned      {E}            IPS
``sif_dec``           yes          learned      {D}            IPS
``sif_full``          yes          learned      {E, D}         IPS
``sif_dr``            yes          learned      {E, D}         DR
``dr``                no           frozen 0     none           DR
``sif_position``      no           learned      {E}            IPS  (Table I "SIF")
``ips_trust_oracle``  oracle click propensity :math:`\pi^*(1+d^*)` (T6 "IPS-full")
``ips_dpenalty``      oracle :math:`\pi^*` + D-penalty on the oracle trust score (T6)
====================  ===========  ===========  =============  =======

The SIF step minimises (SIF Eq. 34)

.. math::
    \mathcal L = R_{LTR}(\theta) + L_{bias}(\phi) + 1\{DR\}\,L_{imp}(\psi)
                 + \lambda_E \hat I_E + \lambda_D \hat I_D

with gradient routing: :math:`R_{LTR} \to \theta` (propensities under
stop-gradient), :math:`L_{bias} \to \phi` (ranker output frozen),
:math:`\hat I_E \to (a, u)` only, :math:`\hat I_D \to \theta` only (through
the scores; the trust head enters under stop-gradient). The multipliers
and the leakage EMAs live in the method's ``extra`` state; with
``dual=True`` they follow :func:`~ultr_jax.losses.dual_ascent_estimator`.

Config fields (declared with their defaults in :data:`SIF_DEFAULTS`, an unknown key is an error;
the ranker fields are those of :mod:`~ultr_jax.train.methods.baselines`): ``lambda_E`` (1.0), ``lambda_D``
(10.0), ``dual`` (False), ``budget_E`` / ``budget_D`` (0.01 nats),
``dual_eta`` (1.0), ``lambda_max`` (100), ``ema_decay`` (0.9),
``estimator`` (``"entropy"``), ``k_top`` (3), ``gamma_D`` (1.0),
``learn_gamma_D`` (False), ``tau`` (0.01), ``snips`` (False),
``imputer_hidden`` ((32,)), ``score_key`` (``"logging_score"``; the batch
entry with the standardised bias source z, zeros when absent),
``num_positions`` (list size; the display cut-off K_disp), and
``channels`` / ``risk`` / ``trust_head`` / ``exposure_slope`` overriding
the table above.

>>> from ultr_jax.train import get_method
>>> m = get_method("sif_full", {"ranker": "linear"}, num_features=3, list_size=4)
>>> params, extra = m.init(jax.random.key(0), None)
>>> batch = {"features": jnp.ones((2, 4, 3)), "where": jnp.ones((2, 4), bool),
...          "clicks": jnp.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0]]),
...          "logging_score": jnp.array([[1.0, 0.5, 0.0, -1.0], [0.3, 0.2, -0.1, -2.0]])}
>>> loss, (metrics, extra) = m.loss(params, extra, batch, jax.random.key(1))
>>> print(round(float(metrics["I_E"]), 6), round(float(extra["lambda_D"]), 1))
0.0 10.0
"""

import dataclasses

import jax
import jax.numpy as jnp

from ultr_jax import losses
from ultr_jax import models
from ultr_jax.train.config import merge_config
from ultr_jax.train.method import Method
from ultr_jax.train.methods import register
from ultr_jax.train.methods.baselines import TOWER_DEFAULTS, batch_positions, make_relevance_tower

__all__ = ["make_sif_method", "with_leakage_diagnostics", "VARIANTS", "SIF_DEFAULTS", "ORACLE_DEFAULTS"]

#: name -> (trust_head, exposure_slope, channels, risk)
VARIANTS = {
  "sif_lambda0": (True, True, (), "ips"),
  "sif_exp": (True, True, ("E",), "ips"),
  "sif_dec": (True, True, ("D",), "ips"),
  "sif_full": (True, True, ("E", "D"), "ips"),
  "sif_dr": (True, True, ("E", "D"), "dr"),
  "dr": (False, False, (), "dr"),
  "sif_position": (False, True, ("E",), "ips"),
}


#: The SIF variants' config fields and defaults (``trust_head``, ``exposure_slope``, ``channels``, ``risk``:
#: None takes the variant's, :data:`VARIANTS`; ``num_positions`` None: the list size).
SIF_DEFAULTS = {
  **TOWER_DEFAULTS,
  "trust_head": None,
  "exposure_slope": None,
  "channels": None,
  "risk": None,
  "num_positions": None,
  "k_top": 3,
  "tau": 0.01,
  "estimator": "entropy",
  "score_key": "logging_score",
  "dual": False,
  "budget_E": 0.01,
  "budget_D": 0.01,
  "lambda_E": 1.0,
  "lambda_D": 10.0,
  "lambda_E_init": 0.0,
  "lambda_D_init": 0.0,
  "dual_eta": 1.0,
  "lambda_max": 100.0,
  "ema_decay": 0.9,
  "snips": False,
  "gamma_D": 1.0,
  "learn_gamma_D": False,
  "imputer_hidden": (32,),
}
#: The oracle-propensity methods' fields and defaults: ``ips_dpenalty``'s (``ips_trust_oracle`` has no penalty,
#: so it takes the tower and ``tau`` only).
ORACLE_DEFAULTS = {**TOWER_DEFAULTS, "tau": 0.01, "k_top": 3, "lambda_D": 10.0, "estimator": "variance"}
_ORACLE_IPS_DEFAULTS = {**TOWER_DEFAULTS, "tau": 0.01}


def _or(value, default):
  return default if value is None else value


def _relevance(ranker, params, batch):
  return models.apply_array(ranker, {"params": params["relevance"]}, jnp.asarray(batch["features"], jnp.float32))


@dataclasses.dataclass(frozen=True)
class _SIFSettings:
  """The static settings of one SIF-ref variant, from its config over :data:`VARIANTS`' defaults."""

  trust_head: bool
  slope: bool
  channels: tuple
  risk: str
  num_positions: int
  k_top: int
  tau: float
  estimator: str
  score_key: str
  snips: bool


def _sif_settings(name: str, config, list_size: int) -> _SIFSettings:
  """The variant's settings, its table entry overridden by ``config`` (None keeps the table's)."""
  trust_head, slope, channels, risk = VARIANTS.get(name, VARIANTS["sif_full"])
  risk = _or(config.risk, risk)
  channels = tuple(_or(config.channels, channels))
  if risk not in ("ips", "dr"):
    raise ValueError(f"{name}: risk must be 'ips' or 'dr', got {risk!r}")
  if set(channels) - {"E", "D"}:
    raise ValueError(f"{name}: channels must be a subset of ('E', 'D'), got {channels!r}")
  num_positions = int(config.num_positions or list_size)
  return _SIFSettings(
    trust_head=bool(_or(config.trust_head, trust_head)),
    slope=bool(_or(config.exposure_slope, slope)),
    channels=channels,
    risk=risk,
    num_positions=num_positions,
    k_top=min(int(config.k_top), num_positions),
    tau=float(config.tau),
    estimator=config.estimator,
    score_key=config.score_key,
    snips=bool(config.snips),
  )


def _multipliers(config, settings: _SIFSettings) -> dict:
  """Each channel's leakage multiplier as a :func:`~ultr_jax.losses.dual_ascent_estimator` (fixed unless dual)."""
  dual = bool(config.dual)
  budgets = {"E": float(config.budget_E), "D": float(config.budget_D)}
  return {
    ch: losses.dual_ascent_estimator(
      budget=budgets[ch],
      eta=float(config.dual_eta),
      lam_max=float(config.lambda_max),
      decay=float(config.ema_decay),
      ascend=dual and ch in settings.channels,
    )
    for ch in ("E", "D")
  }


def _sif_towers(config, settings: _SIFSettings):
  """``(ranker, bias tower, imputer or None)`` of a variant."""
  bias = models.SIFBiasTower(
    num_positions=settings.num_positions,
    k_top=settings.k_top,
    gamma_d=float(config.gamma_D),
    trust_head=settings.trust_head,
    learn_gamma_d=bool(config.learn_gamma_D),
    exposure_slope=settings.slope,
  )
  imputer = None
  if settings.risk == "dr":
    imputer = models.make_ranker("mlp", hidden_sizes=tuple(config.imputer_hidden), activation="elu", layer_norm=False)
  return make_relevance_tower(config), bias, imputer


def _sif_init(key, towers, num_features: int, num_positions: int, lam0: dict):
  """The towers' parameters and the non-trained state (multipliers, their EMAs, the exposure estimate)."""
  ranker, bias, imputer = towers
  kr, kb, ki = jax.random.split(key, 3)
  x = jnp.zeros((1, 1, num_features), jnp.float32)
  params = {
    "relevance": ranker.init(kr, x)["params"],
    "bias": bias.init(kb, jnp.zeros((1, 1), jnp.int32), jnp.zeros((1, 1)))["params"],
  }
  if imputer is not None:
    params["imputer"] = imputer.init(ki, x)["params"]
  extra = {
    "lambda_E": jnp.float32(lam0["E"]),
    "lambda_D": jnp.float32(lam0["D"]),
    "ema_E": jnp.float32(0.0),
    "ema_D": jnp.float32(0.0),
    "steps": jnp.int32(0),
    "exposure": jnp.ones((num_positions,), jnp.float32),
  }
  return params, extra


def _ranking_risk(settings: _SIFSettings, imputer, params, batch, s, rho, clicks, where, disp):
  """``(R_LTR, imputation loss)``: the IPS (optionally self-normalised) or doubly robust listwise risk."""
  sg = jax.lax.stop_gradient
  tau = settings.tau
  if settings.risk == "dr":
    m = jax.nn.sigmoid(
      models.apply_array(imputer, {"params": params["imputer"]}, jnp.asarray(batch["features"], jnp.float32))
    )
    l_imp = losses.bias_likelihood_loss(sg(rho) * m, clicks, where=disp)
    targets = losses.dr_targets(clicks, rho, m, where=where, displayed=disp, tau=tau)
    return losses.listwise_risk(s, targets, where=where), l_imp
  targets = losses.ips_targets(clicks, rho, where=disp, tau=tau)
  r_ltr = losses.listwise_risk(s, targets, where=disp)
  if settings.snips:
    clicked = disp & (clicks > 0)
    w = 1.0 / jnp.maximum(sg(rho), tau)
    n = jnp.sum(clicked)
    mean_w = jnp.sum(jnp.where(clicked, w, 0.0)) / jnp.maximum(n, 1)
    r_ltr = r_ltr / jnp.where(n > 0, mean_w, 1.0)
  return r_ltr, jnp.float32(0.0)


def _leakages(settings: _SIFSettings, e, d, s, pos, disp, top):
  """``(I_E, I_D)``: the exposure channel's leakage over the displayed cells, the trust channel's in the top k."""
  i_e = losses.conditional_mi_binary(e, pos, where=disp, num_cells=settings.num_positions, estimator=settings.estimator)
  q = losses.project_within_cells(jax.lax.stop_gradient(d), s, pos, where=top, num_cells=settings.k_top)
  i_d = losses.conditional_mi_binary(q, pos, where=top, num_cells=settings.k_top, estimator=settings.estimator)
  return i_e, i_d


def _next_extra(extra, multipliers, leakage: dict, e, pos, disp, num_positions: int) -> dict:
  """The state after a step: each multiplier's update on its leakage, and the exposure estimate's EMA."""
  new_extra = dict(extra)
  for ch, value in leakage.items():
    state = losses.DualAscentState(extra[f"lambda_{ch}"], extra[f"ema_{ch}"], extra["steps"])
    state = multipliers[ch].update(state, value)
    new_extra[f"lambda_{ch}"], new_extra[f"ema_{ch}"] = state.lam, state.ema
  marg = losses.cell_marginals(jax.lax.stop_gradient(e), pos, where=disp, num_cells=num_positions)
  seen = losses.cell_marginals(jnp.ones_like(e), pos, where=disp, num_cells=num_positions) > 0
  upd = jnp.where(extra["steps"] == 0, marg, 0.99 * extra["exposure"] + 0.01 * marg)
  new_extra["exposure"] = jnp.where(seen, upd, extra["exposure"])
  new_extra["steps"] = extra["steps"] + 1
  return new_extra


def _sif_loss(settings: _SIFSettings, towers, multipliers, params, extra, batch):
  """One step's objective (SIF Eq. 34: the risk, the bias tower's click likelihood and the weighted leakages)."""
  ranker, bias, imputer = towers
  sg = jax.lax.stop_gradient
  where = jnp.asarray(batch["where"], bool)
  pos = batch_positions(batch)
  disp = where & (pos < settings.num_positions)
  top = disp & (pos < settings.k_top)
  clicks = jnp.where(where, jnp.asarray(batch["clicks"], jnp.float32), 0.0)
  key = settings.score_key
  z = jnp.asarray(batch[key], jnp.float32) if key in batch else jnp.zeros(where.shape)
  s = _relevance(ranker, params, batch)
  out = models.apply_array(bias, {"params": params["bias"]}, pos, z)
  e, d, rho = out["exposure"], out["trust"], out["click_propensity"]
  rhat = models.apply_array(bias, {"params": params["bias"]}, s, method=models.SIFBiasTower.calibrate)
  l_bias = losses.bias_likelihood_loss(rho * rhat, clicks, where=disp)
  r_ltr, l_imp = _ranking_risk(settings, imputer, params, batch, s, rho, clicks, where, disp)
  i_e, i_d = _leakages(settings, e, d, s, pos, disp, top)
  total = r_ltr + l_bias + l_imp
  if "E" in settings.channels:
    total = total + sg(extra["lambda_E"]) * i_e
  if "D" in settings.channels:
    total = total + sg(extra["lambda_D"]) * i_d
  new_extra = _next_extra(extra, multipliers, {"E": i_e, "D": i_d}, e, pos, disp, settings.num_positions)
  w = jnp.where(disp, 1.0 / jnp.maximum(sg(rho), settings.tau), 0.0)
  metrics = {
    "risk": r_ltr,
    "bias_loss": l_bias,
    "imputation_loss": l_imp,
    "I_E": i_e,
    "I_D": i_d,
    "lambda_E": extra["lambda_E"],
    "lambda_D": extra["lambda_D"],
    "ema_I_E": new_extra["ema_E"],
    "ema_I_D": new_extra["ema_D"],
    "ess": losses.effective_sample_size(w, where=disp),
  }
  return total, (metrics, new_extra)


def make_sif_method(name, config, *, num_features: int, list_size: int) -> Method:
  """Builds a SIF-ref variant (``VARIANTS[name]`` defaults, overridable by config).

  Args:
    name: a key of :data:`VARIANTS` (another name builds ``sif_full``'s variant under that name).
    config: the method's config over :data:`SIF_DEFAULTS` (None values keep the defaults).
    num_features: the number of features of the ranker's input.
    list_size: the list size (the display cut-off when ``num_positions`` is None).

  Returns:
    The :class:`~ultr_jax.train.Method`.
  """
  config = merge_config(SIF_DEFAULTS, config, what=f"method {name!r} config", none_is_default=True)
  settings = _sif_settings(name, config, list_size)
  if config.dual:
    lam0 = {"E": float(config.lambda_E_init), "D": float(config.lambda_D_init)}
  else:
    lam0 = {"E": float(config.lambda_E), "D": float(config.lambda_D)}
  towers = _sif_towers(config, settings)
  multipliers = _multipliers(config, settings)
  ranker = towers[0]

  def init(key, batch):
    del batch
    return _sif_init(key, towers, num_features, settings.num_positions, lam0)

  def loss(params, extra, batch, key):
    del key
    return _sif_loss(settings, towers, multipliers, params, extra, batch)

  def propensities(params, extra):
    del params
    return extra["exposure"] / extra["exposure"][..., :1]

  return Method(
    name=name,
    init=init,
    loss=loss,
    score=lambda params, batch: _relevance(ranker, params, batch),
    propensities=propensities,
    requires=("clicks",),
  )


def _register_variant(name):
  @register(name, defaults=SIF_DEFAULTS)
  def factory(config, *, num_features: int, list_size: int) -> Method:
    return make_sif_method(name, config, num_features=num_features, list_size=list_size)

  factory.__name__ = name
  factory.__doc__ = f"SIF-ref variant {name!r}: (trust_head, exposure_slope, channels, risk) = {VARIANTS[name]}."
  return factory


for _name in VARIANTS:
  _register_variant(_name)


# ----------------------------------------------------------------------------
# Oracle-propensity variants of the T6 toy.


def _oracle_method(name, config, num_features, list_size, penalty):
  defaults = ORACLE_DEFAULTS if penalty else _ORACLE_IPS_DEFAULTS
  config = merge_config(defaults, config, what=f"method {name!r} config", none_is_default=True)
  ranker = make_relevance_tower(config)
  tau = float(config.tau)
  if penalty:
    k_top, lam_d, estimator = int(config.k_top), float(config.lambda_D), config.estimator
  prop_key = "examination" if penalty else "click_propensity"

  def init(key, batch):
    return {"relevance": ranker.init(key, jnp.zeros((1, 1, num_features)))["params"]}, {}

  def loss(params, extra, batch, key):
    del key
    where = jnp.asarray(batch["where"], bool)
    if prop_key not in batch:
      raise ValueError(f"{name}: batch needs {prop_key!r} (use the position_trust click_fn)")
    s = _relevance(ranker, params, batch)
    targets = losses.ips_targets(jnp.asarray(batch["clicks"], jnp.float32), batch[prop_key], where=where, tau=tau)
    r_ltr = losses.listwise_risk(s, targets, where=where)
    metrics = {"risk": r_ltr}
    total = r_ltr
    if penalty:
      pos = batch_positions(batch)
      top = where & (pos < k_top)
      q = losses.project_within_cells(batch["trust_score"], s, pos, where=top, num_cells=k_top)
      i_d = losses.conditional_mi_binary(q, pos, where=top, num_cells=k_top, estimator=estimator)
      total = total + lam_d * i_d
      metrics["I_D"] = i_d
    return total, (metrics, extra)

  requires = ("examination", "clicks", "trust_score") if penalty else ("click_propensity", "clicks")
  return Method(name=name, init=init, loss=loss, score=lambda p, b: _relevance(ranker, p, b), requires=requires)


@register("ips_trust_oracle", defaults=_ORACLE_IPS_DEFAULTS)
def ips_trust_oracle(config, *, num_features: int, list_size: int) -> Method:
  r"""IPS with the oracle click propensity :math:`\pi^*(1 + d^*)` (T6's "IPS-full")."""
  return _oracle_method("ips_trust_oracle", config, num_features, list_size, penalty=False)


@register("ips_dpenalty", defaults=ORACLE_DEFAULTS)
def ips_dpenalty(config, *, num_features: int, list_size: int) -> Method:
  r"""IPS with oracle :math:`\pi^*` + ``lambda_D`` times the D-penalty on the oracle :math:`\sigma(\gamma z)` (T6)."""
  return _oracle_method("ips_dpenalty", config, num_features, list_size, penalty=True)


# ----------------------------------------------------------------------------
# Diagnostics for any method.


def with_leakage_diagnostics(
  method: Method, *, k_top: int = 3, num_labels: int = 5, oracle_key: str = "trust_score"
) -> Method:
  r"""``method`` with two extra logged metrics, for comparing any method's leakage.

  * ``oracle_I_D``: :func:`~ultr_jax.losses.oracle_leakage` of the method's
    scores against the batch's oracle trust probability (``oracle_key``),
    cells (position, label) over the top ``k_top`` positions (SIF Section IV-B's top-k diagnostic);
  * ``ess_model``: the ESS of ``1 / propensities`` when the method reports
    propensities;
  * ``propensities``: the method's current relative position propensities
    (``[num_positions]``, position 1 = 1), so that the history traces
    propensity recovery over training.

  The loss value and gradients are unchanged.
  """

  def loss(params, extra, batch, key):
    value, (metrics, new_extra) = method.loss(params, extra, batch, key)
    metrics = dict(metrics)
    if oracle_key in batch and "labels" in batch:
      s = jax.lax.stop_gradient(method.score(params, batch))
      metrics["oracle_I_D"] = losses.oracle_leakage(
        s,
        batch[oracle_key],
        batch_positions(batch),
        batch["labels"],
        where=jnp.asarray(batch["where"], bool),
        k_top=k_top,
        num_labels=num_labels,
      )
    if method.propensities is not None:
      p = jax.lax.stop_gradient(method.propensities(params, extra))
      pos = jnp.clip(batch_positions(batch), 0, p.shape[-1] - 1)
      w = 1.0 / jnp.maximum(jnp.take(p, pos), 1e-2)
      metrics["ess_model"] = losses.effective_sample_size(w, where=jnp.asarray(batch["where"], bool))
      metrics["propensities"] = p
    return value, (metrics, new_extra)

  return Method(
    name=method.name,
    init=method.init,
    loss=loss,
    score=method.score,
    propensities=method.propensities,
    optimizer=method.optimizer,
    requires=method.requires,
    config=method.config,
  )
