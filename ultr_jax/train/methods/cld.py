r"""CLD methods (Zhao et al., SIGIR-AP'23) as :class:`~ultr_jax.train.Method` factories.

Registered names: ``cld`` (linear pointwise CLD, Eq. 9), ``cld_n`` (neural
ranker), ``cld_pair`` (CLD\ :sup:`pair`, Eq. 12, neural ranker), ``cld_pair_l``
(linear ranker), ``heckman_rank`` (Ovaisi et al. 2020) and ``rank_agg``
(Borda of an IPS ranker and Heckman\ :sup:`rank`).

The batch carries a fixed top-k log (``click_fn=None``; see
:func:`ultr_jax.simulation.simulate_topk_log`): ``shown`` (bool),
``clicks`` (0/1 or CTR), ``examination`` (the propensities handed to the
learner, read only where shown) and optionally per-query ``sessions``
(record weights; the aggregated log then equals the per-session log).

Config fields (declared with their defaults at each method's registration; each method declares only the
fields it reads, and any other key is an error):

=========================  ==================  ======================================  ==============================
field                      default             meaning                                 read by
=========================  ==================  ======================================  ==============================
``ranker``                 ``"linear"``        relevance ranker (cld; ``"mlp"`` else)  cld, cld_pair, rank_agg
``hidden_sizes``           ``(256, 128, 64)``  MLP hidden layer sizes                  cld, cld_n, cld_pair, rank_agg
``activation``             ``"elu"``           MLP activation                          (same)
``layer_norm``             ``False``           MLP LayerNorm                           (same)
``dropout``                ``0.5``             MLP dropout (training only)             (same)
``gamma``                  ``0.1``             Tobit error correlation                 cld, cld_n
``link``                   ``"probit"``        ``"logit"``: the released code         (same)
``sq_weight``              ``1.0``             squared-term coefficient                (same)
``target``                 ``"sessions"``      ``"mean"``: one record, y = CTR/rho     (same)
``bpr_weight``             ``"ips_diff"``      CLD-pair BPR weight                     cld_pair, cld_pair_l
``unobs_weight``           ``"balanced"``      weight of unshown pairs                 (same)
``sel_weight``             ``1.0``             selection weight C                      (same)
``include_selected_ties``  ``False``           shown pairs y_i <= y_j join D_u         (same)
``heckman_outcome``        ``"ls"``            stage 2: ``"ls"`` or ``"probit"``       heckman_rank, rank_agg
``loss_type``              ``"listwise"``      RankAgg's IPS loss (as ``ips``'s)       rank_agg
=========================  ==================  ======================================  ==============================

cld_n, cld_pair_l and heckman_rank fix their ranker (MLP, linear, linear) and take no ``ranker``; the linear
rankers read no tower field. A study's one section for the whole family (:data:`FAMILY_DEFAULTS`) reaches each
method as its own fields through :func:`~ultr_jax.train.shared_method_configs`.

``score`` ranks with the relevance tower only; the selection model is
discarded at test time (the CLD paper, Section 4.3).

>>> from ultr_jax.train import get_method
>>> m = get_method("cld", {}, num_features=3, list_size=4)
>>> params, extra = m.init(jax.random.key(0), None)
>>> batch = {"features": jnp.ones((1, 4, 3)), "where": jnp.ones((1, 4), bool),
...          "shown": jnp.array([[True, True, False, False]]), "clicks": jnp.array([[1., 0, 0, 0]]),
...          "examination": jnp.array([[1., .5, 0, 0]])}
>>> loss, (aux, extra) = m.loss(params, extra, batch, jax.random.key(1))
>>> print(bool(jnp.isfinite(loss)), m.score(params, batch).shape)
True (1, 4)
"""

import jax
import jax.numpy as jnp

from ultr_jax import losses
from ultr_jax import models
from ultr_jax.train.config import pick
from ultr_jax.train.method import Method
from ultr_jax.train.methods import register
from ultr_jax.train.methods.baselines import click_loss

__all__ = ["cld_towers", "CLD_TOWER_DEFAULTS", "FAMILY_DEFAULTS"]

#: The towers' config fields (:func:`cld_towers`) and defaults: they shape an MLP ranker only (a linear ranker and
#: the linear selection model read none), so only the methods with an MLP ranker declare them.
CLD_TOWER_DEFAULTS = {"hidden_sizes": (256, 128, 64), "activation": "elu", "layer_norm": False, "dropout": 0.5}
_POINTWISE = {"gamma": 0.1, "link": "probit", "sq_weight": 1.0, "target": "sessions"}
_PAIRWISE = {"bpr_weight": "ips_diff", "unobs_weight": "balanced", "sel_weight": 1.0, "include_selected_ties": False}
_HECKMAN = {"heckman_outcome": "ls"}
#: Every field of the family (the CLD study's one ``config.method`` section configures all its methods): each
#: method declares only the fields it reads (the table above), and takes its own of a shared section through
#: :func:`~ultr_jax.train.shared_method_configs`; a key no method declares is an error.
FAMILY_DEFAULTS = {
  **CLD_TOWER_DEFAULTS,
  **_POINTWISE,
  **_PAIRWISE,
  **_HECKMAN,
  "ranker": "mlp",
  "loss_type": "listwise",
}
#: The batch entries every CLD-family loss reads (a top-k log).
_REQUIRES = ("shown", "clicks", "examination")


class _Tower:
  """A flax ranker + its training-mode apply (dropout from the loss key)."""

  def __init__(self, kind, config, num_features):
    c = pick(CLD_TOWER_DEFAULTS, config)
    self.dropout = float(c.dropout) if kind == "mlp" else 0.0
    self.module = models.make_ranker(
      kind,
      hidden_sizes=tuple(c.hidden_sizes),
      activation=c.activation,
      layer_norm=bool(c.layer_norm),
      dropout=self.dropout,
    )
    self.num_features = int(num_features)

  def init(self, key):
    return self.module.init(key, jnp.zeros((1, 1, self.num_features), jnp.float32))["params"]

  def apply(self, params, x, key=None):
    if key is not None and self.dropout > 0:
      return models.apply_array(self.module, {"params": params}, x, deterministic=False, rngs={"dropout": key})
    return models.apply_array(self.module, {"params": params}, x)


def cld_towers(config, *, num_features: int, ranker: str):
  """The ``(relevance, selection)`` towers: ``ranker`` (linear/mlp) and a linear selection model.

  >>> rel, sel = cld_towers({}, num_features=3, ranker="mlp")
  >>> rel.module.hidden_sizes, type(sel.module).__name__
  ((256, 128, 64), 'LinearRanker')
  """
  return _Tower(ranker, config, num_features), _Tower("linear", config, num_features)


def _features(batch):
  return jnp.asarray(batch["features"], jnp.float32)


def _log(batch):
  where = jnp.asarray(batch["where"]).astype(bool)
  shown = jnp.asarray(batch["shown"]).astype(bool) & where
  clicks = jnp.asarray(batch["clicks"], jnp.float32)
  rho = jnp.asarray(batch["examination"], jnp.float32)
  weights = None
  if "sessions" in batch:
    weights = jnp.broadcast_to(jnp.asarray(batch["sessions"], jnp.float32)[..., None], where.shape)
  return where, shown, clicks, rho, weights


def _two_tower_method(name, config, num_features, ranker, loss_fn):
  rel, sel = cld_towers(config, num_features=num_features, ranker=ranker)

  def init(key, batch):
    k1, k2 = jax.random.split(key)
    return {"relevance": rel.init(k1), "selection": sel.init(k2)}, {}

  def loss(params, extra, batch, key):
    x = _features(batch)
    f_beta = rel.apply(params["relevance"], x, key)
    f_omega = sel.apply(params["selection"], x)
    value, aux = loss_fn(params, f_beta, f_omega, batch)
    return value, (aux, extra)

  def score(params, batch):
    return rel.apply(params["relevance"], _features(batch))

  return Method(name=name, init=init, loss=loss, score=score, requires=_REQUIRES)


def _pointwise(name, config, num_features, ranker):
  gamma = float(config.gamma)
  link = config.link
  sq_weight = float(config.sq_weight)
  target = config.target

  def loss_fn(params, f_beta, f_omega, batch):
    where, shown, clicks, rho, weights = _log(batch)
    value = losses.cld_loss(
      f_beta,
      clicks,
      selection_scores=f_omega,
      propensities=rho,
      shown=shown,
      where=where,
      weights=weights,
      gamma=gamma,
      link=link,
      sq_weight=sq_weight,
      target=target,
    )
    return value, {}

  return _two_tower_method(name, config, num_features, ranker, loss_fn)


def _pairwise(name, config, num_features, ranker):
  bpr_weight = config.bpr_weight
  unobs_weight = config.unobs_weight
  sel_weight = float(config.sel_weight)
  ties = bool(config.include_selected_ties)

  def loss_fn(params, f_beta, f_omega, batch):
    where, shown, clicks, rho, weights = _log(batch)
    y = jnp.where(shown, clicks / jnp.where(shown, rho, 1.0), 0.0)
    value = losses.cld_pair_loss(
      f_beta,
      y,
      selection_scores=f_omega,
      shown=shown,
      where=where,
      weights=weights,
      bpr_weight=bpr_weight,
      sel_weight=sel_weight,
      unobs_weight=unobs_weight,
      include_selected_ties=ties,
    )
    return value, {}

  return _two_tower_method(name, config, num_features, ranker, loss_fn)


_CLD = {**CLD_TOWER_DEFAULTS, **_POINTWISE, "ranker": "linear"}
_CLD_N = {**CLD_TOWER_DEFAULTS, **_POINTWISE}
_CLD_PAIR = {**CLD_TOWER_DEFAULTS, **_PAIRWISE, "ranker": "mlp"}


@register("cld", defaults=_CLD)
def cld(config, *, num_features: int, list_size: int) -> Method:
  """Pointwise CLD (Eq. 9) with a linear ranker and a linear selection model."""
  return _pointwise("cld", config, num_features, config.ranker)


@register("cld_n", defaults=_CLD_N)
def cld_n(config, *, num_features: int, list_size: int) -> Method:
  """CLD-N: pointwise CLD with the neural ranker (Table 3)."""
  return _pointwise("cld_n", config, num_features, "mlp")


@register("cld_pair", defaults=_CLD_PAIR)
def cld_pair(config, *, num_features: int, list_size: int) -> Method:
  """CLD-pair (Eq. 12): neural ranker, linear selection model."""
  return _pairwise("cld_pair", config, num_features, config.ranker)


@register("cld_pair_l", defaults=_PAIRWISE)
def cld_pair_l(config, *, num_features: int, list_size: int) -> Method:
  """CLD-pair-L: CLD-pair with a linear ranker (Table 3)."""
  return _pairwise("cld_pair_l", config, num_features, "linear")


def _heckman_parts(config, num_features):
  rel, sel = cld_towers(config, num_features=num_features, ranker="linear")
  outcome = config.heckman_outcome

  def init(key):
    k1, k2 = jax.random.split(key)
    return {"relevance": rel.init(k1), "selection": sel.init(k2), "mills": jnp.zeros((), jnp.float32)}

  def loss(params, batch):
    where, shown, clicks, _, weights = _log(batch)
    x = _features(batch)
    total, parts = losses.heckman_loss(
      rel.apply(params["relevance"], x),
      clicks,
      selection_scores=sel.apply(params["selection"], x),
      mills_coef=params["mills"],
      shown=shown,
      where=where,
      weights=weights,
      outcome=outcome,
      return_aux=True,
    )
    return total, parts

  def score(params, batch):
    return rel.apply(params["relevance"], _features(batch))

  return init, loss, score


@register("heckman_rank", defaults=_HECKMAN)
def heckman_rank(config, *, num_features: int, list_size: int) -> Method:
  """Heckman-rank: probit selection stage + outcome on [x, inverse Mills ratio]; no propensities."""
  init, loss, score = _heckman_parts(config, num_features)
  return Method(
    name="heckman_rank",
    init=lambda key, batch: (init(key), {}),
    loss=lambda p, e, b, k: (lambda v: (v[0], (v[1], e)))(loss(p, b)),
    score=score,
    requires=_REQUIRES,
  )


_RANK_AGG = {**CLD_TOWER_DEFAULTS, **_HECKMAN, "ranker": "mlp", "loss_type": "listwise"}


@register("rank_agg", defaults=_RANK_AGG)
def rank_agg(config, *, num_features: int, list_size: int) -> Method:
  r"""RankAgg: Borda count of an IPS ranker on the top-k records and Heckman-rank.

  The IPS part's loss is the ``ips`` method's ``loss_type`` (listwise by
  default, ``"pairwise"`` for the paper's BPR).

  Both parts train jointly on disjoint parameters (``params["ips"]``,
  ``params["heckman"]``); ``params["ips"]`` has the layout of the baseline
  ``ips`` method (``{"relevance": ...}``), so already trained IPS and
  Heckman-rank parameters can be combined without retraining.
  """
  ips = _Tower(config.ranker, config, num_features)
  ips_loss_fn = click_loss("ips", config.loss_type, name="rank_agg")
  h_init, h_loss, h_score = _heckman_parts(config, num_features)

  def init(key, batch):
    k1, k2 = jax.random.split(key)
    return {"ips": {"relevance": ips.init(k1)}, "heckman": h_init(k2)}, {}

  def loss(params, extra, batch, key):
    _, shown, _, rho, _ = _log(batch)
    scores = ips.apply(params["ips"]["relevance"], _features(batch), key)
    ips_loss = ips_loss_fn(scores, {**batch, "where": shown, "examination": jnp.where(shown, rho, 1.0)})
    h, aux = h_loss(params["heckman"], batch)
    return ips_loss + h, ({"ips_loss": ips_loss, **aux}, extra)

  def score(params, batch):
    where = jnp.asarray(batch["where"]).astype(bool)
    a = ips.apply(params["ips"]["relevance"], _features(batch))
    return losses.borda_scores(a, h_score(params["heckman"], batch), where=where)

  return Method(name="rank_agg", init=init, loss=loss, score=score, requires=_REQUIRES)
