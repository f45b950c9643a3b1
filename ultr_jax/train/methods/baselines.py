r"""The baseline ULTR methods as :class:`~ultr_jax.train.Method` factories.

Registered names: ``naive``, ``ips``, ``snips``, ``affine``, ``ips_policy_aware``, ``dla``, ``regression_em``,
``two_tower``, ``paird``, ``vectorization``, ``pdgd`` and ``full_info``. Every
factory has the signature ``factory(config, *, num_features, list_size) -> Method``; each method
declares the config fields it reads with their defaults at its registration (:data:`TOWER_DEFAULTS` and
the method's own; :func:`~ultr_jax.train.method_defaults` lists them), so an empty config works and an
unknown key is an error:

===================  ==========================  ==========================================
field                default                     meaning
===================  ==========================  ==========================================
``ranker``           ``"mlp"``                   ``"linear"`` or ``"mlp"`` relevance tower
``hidden_sizes``     ``(512, 256, 128)``         MLP hidden sizes (ELU, LayerNorm)
``activation``       ``"elu"``                   MLP activation
``layer_norm``       ``True``                    LayerNorm in the MLP
``dropout``          ``0.0``                     MLP dropout (rng derived from the loss key)
``norm_position``    ``"after"``                 ``"after"`` each hidden dense layer, or
                                                 ``"before"`` every dense layer, the input
                                                 included (ULTRA/LBD code; also on a linear
                                                 ranker's input)
``ln_epsilon``       ``1e-6``                    LayerNorm epsilon (Keras, as in LBD: 1e-3)
``loss_type``        ``"listwise"``              naive/ips/snips: ``"listwise"`` (softmax)
                                                 or ``"pointwise"`` (sigmoid); naive/ips
                                                 also ``"pairwise"`` (logistic over
                                                 clicked/unclicked pairs, the CLD
                                                 paper's baselines; a top-k log's
                                                 per-query ``sessions`` weight them)
                                                 or ``"lambdarank"`` (the same pairs
                                                 weighted by LambdaRank's
                                                 ``losses.lambdarank_weights``)
``propensities``     ``None``                    ips/snips: fixed propensities, one per
                                                 position (e.g. harvested from a log by
                                                 ``graph.harvest_propensities``), in place
                                                 of the batch's oracle ``examination``
                                                 (positions past its end use its last)
``eps_plus``,        ``None``                    affine: fixed trust parameters, one per
``eps_minus``                                    position, in place of the batch's oracle
                                                 ``eps_plus`` / ``eps_minus`` (with
                                                 ``propensities`` for the examination)
``propensity_clip``  ``0.0``                     propensities clipped below at this value,
                                                 i.e. weights at ``1/propensity_clip``
                                                 (0 = no clip); ips, snips, ips_policy_aware,
                                                 dla, paird (not naive: no propensities);
                                                 affine: ``1/alpha`` clipped at
                                                 ``1/propensity_clip``
``num_positions``    ``list_size``               size of learned position tables (dla,
                                                 regression_em, two_tower, paird,
                                                 vectorization)
``em_step_size``     ``0.05``                    regression_em / paird running-average step
``em_init``          ``0.9``                     regression_em initial propensities
``pair_p``           ``1.0``                     paird regularisation exponent
``two_tower_mode``   ``"additive"``              ``"additive"`` or ``"product"``
``dimension``        ``3``                       vectorization: length of the relevance
                                                 and observation vectors
``pretrain_steps``   ``500``                     vectorization: steps with the observation
                                                 vectors and density model frozen
``density_sizes``    ``(256, 64)``               vectorization: the density MLP
``density_l2``       ``1e-3``                    vectorization: L2 on the density kernels
``top_k``            ``None``                    pdgd: the display cut-off (None: the whole
                                                 list); the item after the last click is
                                                 inferred as considered only within it
``pairs``            ``"considered"``            pdgd: ``"all"`` infers every displayed pair
``debias``           ``True``                    pdgd: False weights every pair 1
``surrogate``        ``"probability"``           pdgd: or ``"log_probability"`` (logistic)
===================  ==========================  ==========================================

* ``ips`` / ``snips`` weight clicks by the batch's ``examination``: the
  **oracle** propensities from the click simulator (an upper bound on what
  a propensity estimate can give IPS), or by the fixed ``propensities``
  table of the config.
* ``ips_policy_aware`` is IPS with the batch's ``policy_examination``: each
  item's expected examination over a stochastic logging policy's displays
  (:func:`~ultr_jax.simulation.policy_examination`; Oosterhuis & de Rijke,
  SIGIR'20), unbiased under top-k cuts where ``ips`` weighs only the items
  that one display showed.
* ``affine`` corrects trust bias (Vardasbi et al. CIKM'20,
  :func:`~ultr_jax.losses.affine_targets`): it trains on
  :math:`(c - \theta\epsilon^-) / (\theta(\epsilon^+ - \epsilon^-))` with the
  trust simulator's oracle ``examination``, ``eps_plus`` and ``eps_minus``
  (or the config's tables); ``loss_type`` listwise or pointwise.
* ``dla``, ``regression_em``, ``two_tower`` and ``paird`` learn position
  propensities; :attr:`Method.propensities` reports them as a
  ``[num_positions]`` array normalised so that position 1 is 1.
* ``pdgd`` is PDGD's update (:func:`~ultr_jax.losses.pdgd_loss`) on mini-batches:
  with ``config.train.display = "model_sample"`` the loop shows each list as a
  Plackett-Luce sample of the current scores, the setting PDGD's debiasing
  weights assume, so it is batched PDGD (ULTRA's ``PDGD`` learning algorithm;
  the online study's one-impression SGD is :func:`~ultr_jax.train.online_learning`).
  On the ``"logged"`` display its weights are those of a ranking it did not
  show: a diagnostic, not PDGD.
* ``score`` always ranks with the relevance tower only (no clicks, no
  positions); ``full_info`` trains on the graded ``labels`` (the ceiling).
* An item's position is ``batch["positions"]`` when present, else its index.

>>> from ultr_jax.train import get_method
>>> m = get_method("dla", {"ranker": "linear"}, num_features=3, list_size=4)
>>> params, extra = m.init(jax.random.key(0), None)
>>> batch = {"features": jnp.ones((2, 4, 3)), "where": jnp.ones((2, 4), bool),
...          "clicks": jnp.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0]])}
>>> loss, (metrics, extra) = m.loss(params, extra, batch, jax.random.key(1))
>>> round(float(loss), 4)  # both DLA parts start at log 4
2.7726
>>> m.propensities(params, extra).tolist()
[1.0, 1.0, 1.0, 1.0]
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax import losses
from ultr_jax import models
from ultr_jax._numerics import log1mexp
from ultr_jax.losses import pdgd as pdgd_lib
from ultr_jax.train.config import pick
from ultr_jax.train.method import Method
from ultr_jax.train.methods import register

__all__ = ["make_relevance_tower", "batch_positions", "click_loss", "TOWER_DEFAULTS"]

#: The relevance tower's config fields (every method with a :func:`make_relevance_tower`) and defaults.
TOWER_DEFAULTS = {
  "ranker": "mlp",
  "hidden_sizes": (512, 256, 128),
  "activation": "elu",
  "layer_norm": True,
  "dropout": 0.0,
  "norm_position": "after",
  "ln_epsilon": 1e-6,
}
# The methods with position tables take their size, ``num_positions`` (None: list_size).
_LEARNED = {**TOWER_DEFAULTS, "num_positions": None}
# The click losses' fields: naive has no propensities (so no clip), the weighted ones clip them, IPS, SNIPS
# and affine may take a fixed table.
_CLICK = {**TOWER_DEFAULTS, "loss_type": "listwise"}
_WEIGHTED = {**_CLICK, "propensity_clip": 0.0}
_TABLE = {**_WEIGHTED, "propensities": None}


def make_relevance_tower(config, *, output_size: int = 1):
  """The relevance tower named by ``config.ranker`` (see the module table), ``output_size`` outputs per item.

  Reads the :data:`TOWER_DEFAULTS` fields of ``config`` (missing ones take their defaults).

  >>> make_relevance_tower({"ranker": "mlp", "hidden_sizes": (8, 4)}).hidden_sizes
  (8, 4)
  """
  c = pick(TOWER_DEFAULTS, config)
  return models.make_ranker(
    c.ranker,
    hidden_sizes=tuple(c.hidden_sizes),
    activation=c.activation,
    layer_norm=bool(c.layer_norm),
    dropout=float(c.dropout),
    norm_position=c.norm_position,
    ln_epsilon=float(c.ln_epsilon),
    output_size=output_size,
  )


def batch_positions(batch) -> jax.Array:
  """``batch["positions"]``, or the item index when absent, ``int32[..., L]``.

  >>> batch_positions({"where": jnp.ones((2, 3), bool)}).tolist()
  [[0, 1, 2], [0, 1, 2]]
  """
  where = batch["where"]
  if "positions" in batch and batch["positions"] is not None:
    return jnp.asarray(batch["positions"], jnp.int32)
  return jnp.broadcast_to(jnp.arange(where.shape[-1], dtype=jnp.int32), where.shape)


def _max_weight(config):
  clip = float(config.propensity_clip)
  if clip < 0 or clip > 1:
    raise ValueError(f"propensity_clip must be in [0, 1], got {clip}")
  return None if clip == 0 else 1.0 / clip


class _Towers:
  """Relevance tower (+ optional position tower) helpers shared by the factories."""

  def __init__(self, config, num_features, list_size, with_bias: bool):
    self.ranker = make_relevance_tower(config)
    self.num_features = int(num_features)
    self.num_positions = int(config.get("num_positions") or list_size)
    self.bias = models.PositionBias(num_positions=self.num_positions) if with_bias else None
    self.dropout = float(pick(TOWER_DEFAULTS, config).dropout)

  def init(self, key):
    rel_key, bias_key = jax.random.split(key)
    x = jnp.zeros((1, 1, self.num_features), jnp.float32)
    params = {"relevance": self.ranker.init(rel_key, x)["params"]}
    if self.bias is not None:
      params["bias"] = self.bias.init(bias_key, jnp.zeros((1, 1), jnp.int32))["params"]
    return params

  def relevance(self, params, batch, key=None):
    """Training-mode relevance logits (dropout on when configured)."""
    x = jnp.asarray(batch["features"], jnp.float32)
    if key is not None and self.dropout > 0:
      return models.apply_array(
        self.ranker, {"params": params["relevance"]}, x, deterministic=False, rngs={"dropout": key}
      )
    return models.apply_array(self.ranker, {"params": params["relevance"]}, x)

  def score(self, params, batch):
    return models.apply_array(self.ranker, {"params": params["relevance"]}, jnp.asarray(batch["features"], jnp.float32))

  def observation(self, params, positions):
    assert self.bias is not None, "observation: the towers were built without a position tower"
    return models.apply_array(self.bias, {"params": params["bias"]}, positions)

  def bias_table(self, params):
    return params["bias"]["logits"]


def _where(batch):
  return jnp.asarray(batch["where"]).astype(bool)


def _make(name, towers, loss, propensities=None, click_logits=None, requires=("clicks",)):
  return Method(
    name=name,
    init=lambda key, batch: (towers.init(key), {}),
    loss=loss,
    score=towers.score,
    propensities=propensities,
    click_logits=click_logits,
    requires=requires,
  )


# ----------------------------------------------------------------------------
# Naive, IPS, SNIPS, full information.


def _position_table(name, config, field="propensities"):
  """The fixed per-position table ``config.<field>``, or None (use the batch's oracle).

  ``propensities`` must be finite and > 0; the affine correction's ``eps_plus`` / ``eps_minus`` in [0, 1].
  """
  table = config.get(field)
  if table is None:
    return None
  table = np.asarray(table, np.float64)
  if table.ndim != 1 or table.size == 0:
    raise ValueError(f"{name}: {field} must be a non-empty list, one value per position, got shape {table.shape}")
  if field == "propensities":
    bad = ~(np.isfinite(table) & (table > 0))
    why = "must be finite and > 0 (an unidentified position's NaN from harvest_propensities cannot weight clicks)"
  else:
    bad = ~(np.isfinite(table) & (table >= 0) & (table <= 1))
    why = "must be a probability in [0, 1]"
  if bad.any():
    i = int(np.flatnonzero(bad)[0])
    raise ValueError(f"{name}: {field}[{i}] = {table[i]} {why}")
  return jnp.asarray(table, jnp.float32)


# The config tables a click method may take in place of the batch's oracle entries: config field -> batch key.
_TABLES = {
  "ips": {"propensities": "examination"},
  "snips": {"propensities": "examination"},
  "affine": {"propensities": "examination", "eps_plus": "eps_plus", "eps_minus": "eps_minus"},
}


def _click_method(name, config, num_features, list_size, weighting, propensity_key="examination"):
  towers = _Towers(config, num_features, list_size, with_bias=False)
  loss_type = config.loss_type
  max_weight = _max_weight(config) if "propensity_clip" in config else None  # naive declares no clip
  fn = click_loss(weighting, loss_type, max_weight=max_weight, name=name, propensity_key=propensity_key)
  # Fixed tables stand in for the click model's oracle entries; the policy-aware propensities have none.
  fields = _TABLES.get(weighting, {}) if propensity_key == "examination" else {}
  tables = {key: _position_table(name, config, field) for field, key in fields.items()}
  tables = {key: table for key, table in tables.items() if table is not None}
  # The batch entries the loss reads: the clicks, and the oracle entries no fixed table stands in for.
  oracle = {"naive": (), "affine": (propensity_key, "eps_plus", "eps_minus")}.get(weighting, (propensity_key,))
  requires = ("clicks", *(k for k in oracle if k not in tables))

  def loss(params, extra, batch, key):
    scores = towers.relevance(params, batch, key)
    if tables:  # estimated parameters in place of the simulator's oracle, looked up by position
      positions = batch_positions(batch)
      batch = {**batch, **{k: jnp.take(t, jnp.clip(positions, 0, t.shape[0] - 1)) for k, t in tables.items()}}
    return fn(scores, batch), ({}, extra)

  return _make(name, towers, loss, requires=requires)


_CLICK_LOSSES = {
  ("naive", "listwise"): losses.naive_softmax_loss,
  ("naive", "pointwise"): losses.naive_sigmoid_loss,
  ("naive", "pairwise"): losses.naive_pairwise_loss,
  ("ips", "listwise"): losses.ips_softmax_loss,
  ("ips", "pointwise"): losses.ips_sigmoid_loss,
  ("ips", "pairwise"): losses.ips_pairwise_loss,
  ("naive", "lambdarank"): functools.partial(losses.naive_pairwise_loss, lambdaweight_fn=losses.lambdarank_weights),
  ("ips", "lambdarank"): functools.partial(losses.ips_pairwise_loss, lambdaweight_fn=losses.lambdarank_weights),
  ("snips", "listwise"): losses.snips_softmax_loss,
  ("snips", "pointwise"): losses.snips_sigmoid_loss,
  ("affine", "listwise"): losses.affine_softmax_loss,
  ("affine", "pointwise"): losses.affine_sigmoid_loss,
}


def click_loss(weighting: str, loss_type: str, *, max_weight=None, name=None, propensity_key="examination"):
  """``fn(scores, batch) -> loss`` of a naive/ips/snips/affine click loss of ``loss_type``.

  Reads ``batch["clicks"]`` and ``batch["where"]`` (and the propensities
  ``batch[propensity_key]``, ``"examination"`` by default, unless naive;
  affine also ``"eps_plus"`` and ``"eps_minus"``). The pairwise losses weight each list's pairs by its
  ``batch["sessions"]`` when the batch carries them (an aggregated top-k log:
  a mean over the sessions' pair records, as the per-session log gives).

  >>> fn = click_loss("ips", "pairwise")
  >>> batch = {"clicks": jnp.array([[0.0, 1.0]]), "where": jnp.ones((1, 2), bool),
  ...          "examination": jnp.array([[1.0, 0.5]])}
  >>> round(float(fn(jnp.zeros((1, 2)), batch)), 4)  # 2 log 2
  1.3863
  """
  fn = _CLICK_LOSSES.get((weighting, loss_type))
  if fn is None:
    types = sorted(t for w, t in _CLICK_LOSSES if w == weighting)
    raise ValueError(f"{name or weighting}: loss_type must be one of {types}, got {loss_type!r}")
  pairwise = loss_type in ("pairwise", "lambdarank")

  def loss(scores, batch):
    where = _where(batch)
    clicks = jnp.asarray(batch["clicks"], jnp.float32)
    kw = {}
    if pairwise and "sessions" in batch:
      kw["weights"] = jnp.broadcast_to(jnp.asarray(batch["sessions"], jnp.float32)[..., None], where.shape)
    if weighting != "naive":
      kw.update(propensities=jnp.asarray(batch[propensity_key], jnp.float32), max_weight=max_weight)
    if weighting == "affine":
      kw.update(
        eps_plus=jnp.asarray(batch["eps_plus"], jnp.float32), eps_minus=jnp.asarray(batch["eps_minus"], jnp.float32)
      )
    return fn(scores, clicks, where=where, **kw)

  return loss


@register("naive", defaults=_CLICK)
def naive(config, *, num_features: int, list_size: int) -> Method:
  """Clicks as labels (listwise softmax, pointwise sigmoid or pairwise logistic)."""
  return _click_method("naive", config, num_features, list_size, "naive")


@register("ips", defaults=_TABLE)
def ips(config, *, num_features: int, list_size: int) -> Method:
  """IPS with the simulator's oracle ``examination`` as propensities."""
  return _click_method("ips", config, num_features, list_size, "ips")


@register("snips", defaults=_TABLE)
def snips(config, *, num_features: int, list_size: int) -> Method:
  """SNIPS (batch self-normalised) with the oracle ``examination``."""
  return _click_method("snips", config, num_features, list_size, "snips")


@register("ips_policy_aware", defaults=_WEIGHTED)
def ips_policy_aware(config, *, num_features: int, list_size: int) -> Method:
  """Policy-aware IPS (Oosterhuis & de Rijke SIGIR'20): the batch's ``policy_examination`` as propensities."""
  return _click_method("ips_policy_aware", config, num_features, list_size, "ips", propensity_key="policy_examination")


_AFFINE = {**_TABLE, "eps_plus": None, "eps_minus": None}


@register("affine", defaults=_AFFINE)
def affine(config, *, num_features: int, list_size: int) -> Method:
  """Affine trust-bias correction (Vardasbi et al. CIKM'20) with the oracle examination and eps_plus/eps_minus."""
  return _click_method("affine", config, num_features, list_size, "affine")


@register("full_info", defaults=TOWER_DEFAULTS)
def full_info(config, *, num_features: int, list_size: int) -> Method:
  """Listwise softmax on the true graded labels (no clicks): the ceiling."""
  towers = _Towers(config, num_features, list_size, with_bias=False)

  def loss(params, extra, batch, key):
    scores = towers.relevance(params, batch, key)
    labels = jnp.asarray(batch["labels"], jnp.float32)
    return losses.naive_softmax_loss(scores, labels, where=_where(batch)), ({}, extra)

  return _make("full_info", towers, loss, requires=("labels",))


# ----------------------------------------------------------------------------
# PDGD on mini-batches.


_PDGD = {**TOWER_DEFAULTS, "top_k": None, "pairs": "considered", "debias": True, "surrogate": "probability"}


@register("pdgd", defaults=_PDGD)
def pdgd(config, *, num_features: int, list_size: int) -> Method:
  """PDGD's pairwise update (Oosterhuis & de Rijke 2018) on the displayed lists of a batch.

  Meant for ``config.train.display = "model_sample"`` (see the module docstring).
  """
  towers = _Towers(config, num_features, list_size, with_bias=False)
  top_k = config.top_k
  if top_k is not None and int(top_k) < 1:
    raise ValueError(f"pdgd: top_k must be >= 1 or None, got {top_k}")
  top_k = None if top_k is None else int(top_k)
  switches = {
    "pairs": str(config.pairs),
    "debias": bool(config.debias),
    "surrogate": str(config.surrogate),
  }
  pdgd_lib.check_switches(switches["pairs"], switches["surrogate"])

  def loss(params, extra, batch, key):
    scores = towers.relevance(params, batch, key)
    value = losses.pdgd_loss(
      scores,
      jnp.asarray(batch["clicks"], jnp.float32),
      positions=batch_positions(batch),
      where=_where(batch),
      top_k=top_k,
      **switches,
    )
    return value, ({}, extra)

  return _make("pdgd", towers, loss)


# ----------------------------------------------------------------------------
# DLA.


def _relative(p):
  return p / p[..., :1]


_DLA = {**_LEARNED, "propensity_clip": 0.0}


@register("dla", defaults=_DLA)
def dla(config, *, num_features: int, list_size: int) -> Method:
  """Dual Learning Algorithm (Ai et al. 2018) with a free logit per position."""
  towers = _Towers(config, num_features, list_size, with_bias=True)
  max_weight = _max_weight(config)

  def loss(params, extra, batch, key):
    where = _where(batch)
    scores = towers.relevance(params, batch, key)
    obs = towers.observation(params, batch_positions(batch))
    value, parts = losses.dla_loss(
      scores,
      jnp.asarray(batch["clicks"], jnp.float32),
      observation_logits=obs,
      where=where,
      max_weight=max_weight,
      return_aux=True,
    )
    return value, (parts, extra)

  def propensities(params, extra):
    return losses.dla_propensities(towers.bias_table(params))

  return _make("dla", towers, loss, propensities)


# ----------------------------------------------------------------------------
# Regression-EM.


_REGRESSION_EM = {**_LEARNED, "em_step_size": 0.05, "em_init": 0.9}


@register("regression_em", defaults=_REGRESSION_EM)
def regression_em(config, *, num_features: int, list_size: int) -> Method:
  """Regression-EM (Wang et al. 2018): closed-form propensity M-step in ``extra``."""
  towers = _Towers(config, num_features, list_size, with_bias=False)
  step_size = float(config.em_step_size)
  init_value = float(config.em_init)
  if not 0.0 < init_value < 1.0:
    raise ValueError(f"regression_em: em_init must be in (0, 1), got {init_value}")
  estimator = losses.regression_em_estimator(towers.num_positions, step_size=step_size, init_value=init_value)

  def init(key, batch):
    return towers.init(key), estimator.init()._asdict()

  def loss(params, extra, batch, key):
    where = _where(batch)
    positions = jnp.clip(batch_positions(batch), 0, towers.num_positions - 1)
    state = losses.RegressionEMState(**extra)
    scores = towers.relevance(params, batch, key)
    clicks = jnp.asarray(batch["clicks"], jnp.float32)
    value = losses.regression_em_loss(scores, clicks, propensities=jnp.take(state.propensities, positions), where=where)
    state = estimator.update(state, scores, clicks, positions=positions, where=where)
    return value, ({}, state._asdict())

  def propensities(params, extra):
    return _relative(extra["propensities"])

  def click_logits(params, extra, batch):
    """PBM: P(C) = theta_k sigma(s), as a logit (log P - log(1 - P), in log space)."""
    positions = jnp.clip(batch_positions(batch), 0, towers.num_positions - 1)
    log_theta = jnp.log(jnp.clip(jnp.take(extra["propensities"], positions), 1e-6, 1.0))
    log_p = log_theta + jax.nn.log_sigmoid(towers.score(params, batch))
    return log_p - log1mexp(jnp.minimum(log_p, -1e-7))

  return Method(
    name="regression_em",
    init=init,
    loss=loss,
    score=towers.score,
    propensities=propensities,
    click_logits=click_logits,
    requires=("clicks",),
  )


# ----------------------------------------------------------------------------
# Two-tower.


_TWO_TOWER = {**_LEARNED, "two_tower_mode": "additive"}


@register("two_tower", defaults=_TWO_TOWER)
def two_tower(config, *, num_features: int, list_size: int) -> Method:
  """Relevance tower + position tower trained on clicks (additive or PBM product)."""
  towers = _Towers(config, num_features, list_size, with_bias=True)
  mode = config.two_tower_mode
  if mode not in ("additive", "product"):
    raise ValueError(f"two_tower: two_tower_mode must be 'additive' or 'product', got {mode!r}")

  def loss(params, extra, batch, key):
    where = _where(batch)
    scores = towers.relevance(params, batch, key)
    obs = towers.observation(params, batch_positions(batch))
    clicks = jnp.asarray(batch["clicks"], jnp.float32)
    value = losses.two_tower_loss(scores, clicks, observation_logits=obs, where=where, mode=mode)
    return value, ({}, extra)

  def propensities(params, extra):
    logits = towers.bias_table(params)
    if mode == "product":
      log_p = jax.nn.log_sigmoid(logits)
    else:  # additive logits: the odds factor exp(o_k) (= propensity ratio for small CTRs)
      log_p = logits
    return jnp.exp(log_p - log_p[..., :1])

  def click_logits(params, extra, batch):
    obs = towers.observation(params, batch_positions(batch))
    log_p, log_n = losses.two_tower_log_probs(towers.score(params, batch), obs, mode=mode)
    return log_p - log_n

  return _make("two_tower", towers, loss, propensities, click_logits)


# ----------------------------------------------------------------------------
# Pairwise debiasing.


_PAIRD = {**_LEARNED, "em_step_size": 0.05, "pair_p": 1.0, "propensity_clip": 0.0}


@register("paird", defaults=_PAIRD)
def paird(config, *, num_features: int, list_size: int) -> Method:
  """Pairwise debiasing / Unbiased LambdaMART's estimator (Hu et al. 2019)."""
  towers = _Towers(config, num_features, list_size, with_bias=False)
  step_size = float(config.em_step_size)
  p = float(config.pair_p)
  max_weight = _max_weight(config)
  estimator = losses.pairwise_debiasing_estimator(towers.num_positions, step_size=step_size, p=p)

  def init(key, batch):
    return towers.init(key), estimator.init()._asdict()

  def loss(params, extra, batch, key):
    where = _where(batch)
    positions = jnp.clip(batch_positions(batch), 0, towers.num_positions - 1)
    state = losses.PairwiseDebiasingState(**extra)
    scores = towers.relevance(params, batch, key)
    clicks = jnp.asarray(batch["clicks"], jnp.float32)
    value = losses.pairwise_debiasing_loss(
      scores,
      clicks,
      t_plus=jnp.take(state.t_plus, positions),
      t_minus=jnp.take(state.t_minus, positions),
      where=where,
      max_weight=max_weight,
    )
    state = estimator.update(state, scores, clicks, positions=positions, where=where)
    return value, ({}, state._asdict())

  def propensities(params, extra):
    return _relative(extra["t_plus"])

  return Method(name="paird", init=init, loss=loss, score=towers.score, propensities=propensities, requires=("clicks",))


# ----------------------------------------------------------------------------
# Vectorization.


_VECTORIZATION = {**_LEARNED, "dimension": 3, "pretrain_steps": 500, "density_sizes": (256, 64), "density_l2": 1e-3}


@register("vectorization", defaults=_VECTORIZATION)
def vectorization(config, *, num_features: int, list_size: int) -> Method:
  """Vectorization-based ULTR (Chen et al. KDD'22; ULTRA's ``vectorization.py``).

  Relevance vectors ``r(x)`` (the configured ranker with ``dimension``
  outputs) and a free observation vector ``o(k)`` per position (initialised
  to ones) give click logits ``<r, o>`` under a listwise softmax; an
  observation density MLP (``density_sizes``, ELU, no LayerNorm) on
  the stop-gradient features fits a Gaussian to the ``o(k)`` its items were
  shown with, and ranks by ``<r, base vector>``
  (:mod:`ultr_jax.losses.vectorization`). For the first ``pretrain_steps``
  steps ``o`` and the density model are frozen (the ranker learns first),
  then everything trains; ``density_l2`` puts an L2 penalty on the density
  kernels. A step counter lives in ``extra``.
  """
  d = int(config.dimension)
  if d < 1:
    raise ValueError(f"vectorization: dimension must be >= 1, got {d}")
  pretrain = int(config.pretrain_steps)
  density_l2 = float(config.density_l2)
  num_positions = int(config.num_positions or list_size)
  ranker = make_relevance_tower(config, output_size=d)
  density = models.MLPRanker(
    hidden_sizes=tuple(config.density_sizes), activation="elu", layer_norm=False, output_size=2 * d
  )
  dropout = float(config.dropout)

  def init(key, batch):
    k_rel, k_den = jax.random.split(key)
    x = jnp.zeros((1, 1, num_features), jnp.float32)
    params = {
      "relevance": ranker.init(k_rel, x)["params"],
      "observation": jnp.ones((num_positions, d), jnp.float32),
      "density": density.init(k_den, x)["params"],
    }
    return params, {"step": jnp.zeros((), jnp.int32)}

  def _density(params, x):
    out = models.apply_array(density, {"params": params["density"]}, jax.lax.stop_gradient(x))
    return out[..., :d], out[..., d:]

  def loss(params, extra, batch, key):
    where = _where(batch)
    x = jnp.asarray(batch["features"], jnp.float32)
    if dropout > 0:
      r = models.apply_array(ranker, {"params": params["relevance"]}, x, deterministic=False, rngs={"dropout": key})
    else:
      r = models.apply_array(ranker, {"params": params["relevance"]}, x)
    positions = jnp.clip(batch_positions(batch), 0, num_positions - 1)
    o = jnp.take(params["observation"], positions, axis=0)
    mean, log_var = _density(params, x)
    frozen = extra["step"] < pretrain
    hold = lambda v: jnp.where(frozen, jax.lax.stop_gradient(v), v)
    o, mean, log_var = hold(o), hold(mean), hold(log_var)
    clicks = jnp.asarray(batch["clicks"], jnp.float32)
    click_loss = losses.naive_softmax_loss(jnp.sum(r * o, axis=-1), clicks, where=where)
    density_loss = losses.observation_density_loss(mean, o, log_var=log_var, where=where)
    kernels = [
      leaf
      for path, leaf in jax.tree_util.tree_leaves_with_path(params["density"])
      if getattr(path[-1], "key", None) == "kernel"
    ]
    l2 = density_l2 * 0.5 * sum(jnp.sum(k**2) for k in kernels)
    total = click_loss + density_loss + jnp.where(frozen, 0.0, l2)
    metrics = {"click_loss": click_loss, "density_loss": density_loss}
    return total, (metrics, {"step": extra["step"] + 1})

  def score(params, batch):
    x = jnp.asarray(batch["features"], jnp.float32)
    r = models.apply_array(ranker, {"params": params["relevance"]}, x)
    mean, log_var = _density(params, x)
    where = batch.get("where")
    return losses.vectorization_scores(r, mean, log_var, where=None if where is None else _where(batch))

  return Method(name="vectorization", init=init, loss=loss, score=score, requires=("clicks",))
