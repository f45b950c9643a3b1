r"""The ULTR methods since 2023 as :class:`~ultr_jax.train.Method` factories.

Registered names (each on its loss module of :mod:`ultr_jax.losses`):

* ``dr_ltr``: doubly robust LTR (Oosterhuis, TOIS'23; :mod:`ultr_jax.losses.doubly_robust`): the ranker trains
  on the DR estimates of a regression tower :math:`h = \sigma(\cdot)`, which trains on the direct-method loss;
* ``safe_dr`` and ``prpo``: the safe DR objective (Gupta et al., SIGIR'23) and PRPO (Gupta et al., CIKM'24;
  :mod:`ultr_jax.losses.safe_cltr`): a Plackett-Luce policy optimised by REINFORCE over ``num_samples`` sampled
  rankings on the DR estimates, against the logged ranking's DCG exposure (a deterministic logger's
  :math:`\omega_0`);
* ``two_tower_disentangled``: the two-tower model with observation dropout and a gradient-reversed adversary
  (Zhang et al., KDD'23; :mod:`ultr_jax.losses.disentangled`);
* ``upe``: unconfounded propensity estimation (Luo et al., SIGIR'24; :mod:`ultr_jax.losses.upe`);
* ``two_tower_weighted``: the two-tower model with balancing sample weights against logging-policy confounding
  (Hager, Zoeter & de Rijke, ICTIR'25): see :func:`two_tower_weighted`.

=========================  ====================  ==========================================================
field                      default               meaning
=========================  ====================  ==========================================================
``treatment``              ``"examination"``     dr_ltr/safe_dr/prpo: the expected treatments
                                                 :math:`\bar\alpha, \bar\beta`: ``"examination"``
                                                 (:math:`\theta_k`, 0: the PBM), ``"policy_examination"``
                                                 (a stochastic logger's expected examination) or
                                                 ``"trust"`` (:math:`\theta(\epsilon^+ - \epsilon^-)`,
                                                 :math:`\theta\epsilon^-`)
``dr_tau``                 ``0.0``               the floor :math:`\tau` of :math:`\bar\alpha` (0: none;
                                                 ``losses.dr_clip_threshold(N)`` gives the paper's)
``num_samples``            ``16``                safe_dr/prpo: sampled rankings per list and step
``epsilon``                ``0.2``               prpo: the ratio band
``clip_scale``             ``-0.1``              prpo: the reward factor beyond the band
``num_sessions``           ``1000.0``            safe_dr: :math:`N` of the risk bound
``delta``                  ``0.95``              safe_dr: the bound's confidence
``observation_dropout``    ``0.1``               two_tower_disentangled: dropout rate of the bias output
``adversary_weight``       ``1.0``               two_tower_disentangled: :math:`\lambda` (0: no adversary)
``reversal_scale``         ``1.0``               two_tower_disentangled: :math:`\eta` of the reversal
``num_permutations``       ``16``                upe: permutations of the backdoor adjustment
``embedding_size``         ``8``                 upe: size of :math:`\mathrm{emb}(k)` and :math:`h(x)`
``weight_clip``            ``10.0``              two_tower_weighted: cap of the balancing weights
=========================  ====================  ==========================================================

plus the relevance tower's fields (``ranker``, ``hidden_sizes``, ...; see :mod:`~ultr_jax.train.methods.baselines`) and, for the
methods with position tables, ``num_positions``.

>>> from ultr_jax.train import get_method
>>> m = get_method("dr_ltr", {"ranker": "linear"}, num_features=3, list_size=4)
>>> m.requires
('clicks', 'examination')
>>> params, extra = m.init(jax.random.key(0), None)
>>> batch = {"features": jnp.ones((2, 4, 3)), "where": jnp.ones((2, 4), bool),
...          "clicks": jnp.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0]]), "examination": jnp.ones((2, 4))}
>>> loss, (metrics, extra) = m.loss(params, extra, batch, jax.random.key(1))
>>> bool(jnp.isfinite(loss)), sorted(metrics)
(True, ['dm_loss', 'dr_loss'])
"""

import jax
import jax.numpy as jnp

from ultr_jax import losses, models
from ultr_jax.train.method import Method
from ultr_jax.train.methods import register
from ultr_jax.train.methods.baselines import TOWER_DEFAULTS, batch_positions, make_relevance_tower

__all__: list[str] = []

_TREATMENTS = {
  "examination": ("examination",),
  "policy_examination": ("policy_examination",),
  "trust": ("examination", "eps_plus", "eps_minus"),
}


def _where(batch):
  return jnp.asarray(batch["where"]).astype(bool)


def _features(batch):
  return jnp.asarray(batch["features"], jnp.float32)


def _treatments(batch, treatment):
  """``(alpha_bar, beta_bar)`` of the batch's oracle entries (see the module table)."""
  theta = jnp.asarray(batch[_TREATMENTS[treatment][0]], jnp.float32)
  if treatment != "trust":
    return theta, jnp.zeros_like(theta)
  e_plus, e_minus = (jnp.asarray(batch[k], jnp.float32) for k in ("eps_plus", "eps_minus"))
  return theta * (e_plus - e_minus), theta * e_minus


def _check_treatment(name, config):
  if config.treatment not in _TREATMENTS:
    raise ValueError(f"{name}: treatment must be one of {sorted(_TREATMENTS)}, got {config.treatment!r}")
  tau = float(config.dr_tau)
  if not 0.0 <= tau <= 1.0:
    raise ValueError(f"{name}: dr_tau must be in [0, 1], got {tau}")
  return None if tau == 0.0 else tau


class _DRTowers:
  """A relevance (policy) tower and a regression tower :math:`h = \\sigma(\\cdot)` of the same architecture."""

  def __init__(self, config, num_features):
    self.ranker = make_relevance_tower(config)
    self.regression = make_relevance_tower(config)
    self.num_features = int(num_features)

  def init(self, key):
    k1, k2 = jax.random.split(key)
    x = jnp.zeros((1, 1, self.num_features), jnp.float32)
    return {"relevance": self.ranker.init(k1, x)["params"], "regression": self.regression.init(k2, x)["params"]}

  def score(self, params, batch):
    return models.apply_array(self.ranker, {"params": params["relevance"]}, _features(batch))

  def regression_logits(self, params, batch):
    return models.apply_array(self.regression, {"params": params["regression"]}, _features(batch))

  def dr_targets(self, params, batch, treatment, tau):
    """The DR estimates and the direct-method loss of the regression tower."""
    where = _where(batch)
    alpha, beta = _treatments(batch, treatment)
    clicks = jnp.asarray(batch["clicks"], jnp.float32)
    reg = self.regression_logits(params, batch)
    dm = losses.direct_method_loss(reg, clicks, alpha_bar=alpha, beta_bar=beta, where=where)
    h = jax.nn.sigmoid(reg)
    targets = losses.doubly_robust_targets(clicks, alpha_bar=alpha, beta_bar=beta, imputed=h, where=where, tau=tau)
    return targets, dm


_DR = {**TOWER_DEFAULTS, "treatment": "examination", "dr_tau": 0.0}


@register("dr_ltr", defaults=_DR)
def dr_ltr(config, *, num_features: int, list_size: int) -> Method:
  """Doubly robust LTR (Oosterhuis, TOIS'23): listwise softmax on the DR estimates + the direct-method regression."""
  tau = _check_treatment("dr_ltr", config)
  towers = _DRTowers(config, num_features)
  treatment = str(config.treatment)

  def loss(params, extra, batch, key):
    where = _where(batch)
    alpha, beta = _treatments(batch, treatment)
    clicks = jnp.asarray(batch["clicks"], jnp.float32)
    reg = towers.regression_logits(params, batch)
    dm = losses.direct_method_loss(reg, clicks, alpha_bar=alpha, beta_bar=beta, where=where)
    dr = losses.doubly_robust_softmax_loss(
      towers.score(params, batch),
      clicks,
      alpha_bar=alpha,
      beta_bar=beta,
      imputed=jax.nn.sigmoid(reg),
      where=where,
      tau=tau,
    )
    return dr + dm, ({"dr_loss": dr, "dm_loss": dm}, extra)

  return Method(
    name="dr_ltr",
    init=lambda key, batch: (towers.init(key), {}),
    loss=loss,
    score=towers.score,
    requires=("clicks", *_TREATMENTS[treatment]),
  )


def _logging_exposure(batch):
  """The logged ranking's DCG exposure :math:`1/\\log_2(k + 2)` at each item's 0-based position."""
  return 1.0 / jnp.log2(batch_positions(batch).astype(jnp.float32) + 2.0)


def _policy_method(name, config, num_features, make_loss):
  tau = _check_treatment(name, config)
  towers = _DRTowers(config, num_features)
  treatment = str(config.treatment)
  num_samples = int(config.num_samples)
  if num_samples < 2:
    raise ValueError(f"{name}: num_samples must be >= 2 (the control variate needs two), got {num_samples}")

  def loss(params, extra, batch, key):
    where = _where(batch)
    scores = towers.score(params, batch)
    targets, dm = towers.dr_targets(params, batch, treatment, tau)
    noise = jax.random.gumbel(key, scores.shape[:-1] + (num_samples, scores.shape[-1]), jnp.float32)
    policy = make_loss(scores, targets, logging_exposure=_logging_exposure(batch), gumbel_noise=noise, where=where)
    return policy + dm, ({"policy_loss": policy, "dm_loss": dm}, extra)

  return Method(
    name=name,
    init=lambda key, batch: (towers.init(key), {}),
    loss=loss,
    score=towers.score,
    requires=("clicks", *_TREATMENTS[treatment]),
  )


_PRPO = {**_DR, "num_samples": 16, "epsilon": 0.2, "clip_scale": -0.1}


@register("prpo", defaults=_PRPO)
def prpo(config, *, num_features: int, list_size: int) -> Method:
  """PRPO (Gupta et al., CIKM'24) on the DR estimates against the logged ranking's exposure."""
  eps, scale = float(config.epsilon), float(config.clip_scale)
  if not eps > 0:
    raise ValueError(f"prpo: epsilon must be > 0, got {eps}")
  return _policy_method(
    "prpo", config, num_features, lambda s, t, **kw: losses.prpo_loss(s, t, epsilon=eps, clip_scale=scale, **kw)
  )


_SAFE_DR = {**_DR, "num_samples": 16, "num_sessions": 1000.0, "delta": 0.95}


@register("safe_dr", defaults=_SAFE_DR)
def safe_dr(config, *, num_features: int, list_size: int) -> Method:
  """Safe DR (Gupta et al., SIGIR'23): the exposure-divergence risk bound on the DR estimates."""
  n, delta = float(config.num_sessions), float(config.delta)
  if not n > 0 or not 0 < delta < 1:
    raise ValueError(f"safe_dr: num_sessions must be > 0 and delta in (0, 1), got {n}, {delta}")
  return _policy_method(
    "safe_dr", config, num_features, lambda s, t, **kw: losses.safe_dr_loss(s, t, num_sessions=n, delta=delta, **kw)
  )


# ----------------------------------------------------------------------------
# Two-tower variants.


class _TwoTowers:
  def __init__(self, config, num_features, list_size):
    self.ranker = make_relevance_tower(config)
    self.num_features = int(num_features)
    self.num_positions = int(config.get("num_positions") or list_size)
    self.dropout = float(config.dropout)

  def init(self, key):
    x = jnp.zeros((1, 1, self.num_features), jnp.float32)
    return {"relevance": self.ranker.init(key, x)["params"], "bias": jnp.zeros((self.num_positions,), jnp.float32)}

  def relevance(self, params, batch, key):
    if self.dropout > 0:
      return models.apply_array(
        self.ranker, {"params": params["relevance"]}, _features(batch), deterministic=False, rngs={"dropout": key}
      )
    return self.score(params, batch)

  def score(self, params, batch):
    return models.apply_array(self.ranker, {"params": params["relevance"]}, _features(batch))

  def observation(self, params, batch):
    return jnp.take(params["bias"], jnp.clip(batch_positions(batch), 0, self.num_positions - 1))

  def propensities(self, params, extra):
    return jnp.exp(params["bias"] - params["bias"][..., :1])

  def click_logits(self, params, extra, batch):
    """The additive click logit: relevance plus the position's observation logit."""
    del extra
    return self.score(params, batch) + self.observation(params, batch)


_DISENTANGLED = {
  **TOWER_DEFAULTS,
  "num_positions": None,
  "observation_dropout": 0.1,
  "adversary_weight": 1.0,
  "reversal_scale": 1.0,
}


@register("two_tower_disentangled", defaults=_DISENTANGLED)
def two_tower_disentangled(config, *, num_features: int, list_size: int) -> Method:
  """Additive two-tower with observation dropout and a gradient-reversed adversary (Zhang et al., KDD'23).

  The adversary is an affine head :math:`a = w\\,\\mathrm{GRL}_\\eta(o) + b` predicting the relevance logit
  from the bias logit; ``observation_dropout = adversary_weight = 0`` is the plain additive ``two_tower``.
  """
  towers = _TwoTowers(config, num_features, list_size)
  rate, lam, eta = float(config.observation_dropout), float(config.adversary_weight), float(config.reversal_scale)
  if not 0.0 <= rate < 1.0:
    raise ValueError(f"two_tower_disentangled: observation_dropout must be in [0, 1), got {rate}")
  if lam < 0 or eta < 0:
    raise ValueError(f"two_tower_disentangled: adversary_weight and reversal_scale must be >= 0, got {lam}, {eta}")

  def init(key, batch):
    return {**towers.init(key), "adversary": {"w": jnp.ones(()), "b": jnp.zeros(())}}, {}

  def loss(params, extra, batch, key):
    k_rel, k_obs = jax.random.split(key)
    where = _where(batch)
    scores = towers.relevance(params, batch, k_rel)
    obs = losses.observation_dropout(towers.observation(params, batch), k_obs, rate)
    adv = params["adversary"]["w"] * losses.gradient_reversal(obs, eta) + params["adversary"]["b"]
    value = losses.disentangled_two_tower_loss(
      scores,
      jnp.asarray(batch["clicks"], jnp.float32),
      observation_logits=obs,
      adversary_logits=adv,
      where=where,
      adversary_weight=lam,
    )
    return value, ({}, extra)

  return Method(
    name="two_tower_disentangled",
    init=init,
    loss=loss,
    score=towers.score,
    propensities=towers.propensities,
    click_logits=towers.click_logits,
    requires=("clicks",),
  )


_WEIGHTED = {**TOWER_DEFAULTS, "num_positions": None, "weight_clip": 10.0}


@register("two_tower_weighted", defaults=_WEIGHTED)
def two_tower_weighted(config, *, num_features: int, list_size: int) -> Method:
  r"""Additive two-tower with balancing weights against logging-policy confounding (after Hager et al., ICTIR'25).

  A placement model :math:`q(k \mid x) = \mathrm{softmax}_k(W x + b)` (linear, trained by cross-entropy on the
  logged positions, its own loss) estimates how the logger placed documents; each click record is weighted by
  :math:`w_i = \min(1 / (K q(k_i \mid x_i)), c)` (stop-gradient, normalised to mean 1 over the batch's valid
  items), which makes the weighted joint distribution of features and position closer to independent, the
  condition under which a misspecified relevance tower's errors no longer correlate with placement. This is
  the library's reading of the paper's sample weighting (its exact weights are not restated here).
  """
  towers = _TwoTowers(config, num_features, list_size)
  clip = float(config.weight_clip)
  if not clip >= 1.0:
    raise ValueError(f"two_tower_weighted: weight_clip must be >= 1, got {clip}")
  k = towers.num_positions

  def init(key, batch):
    return {**towers.init(key), "placement": {"w": jnp.zeros((num_features, k)), "b": jnp.zeros((k,))}}, {}

  def loss(params, extra, batch, key):
    where = _where(batch)
    x = _features(batch)
    positions = jnp.clip(batch_positions(batch), 0, k - 1)
    logits = x @ params["placement"]["w"] + params["placement"]["b"]
    log_q = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), positions[..., None], axis=-1)[..., 0]
    placement = -jnp.sum(jnp.where(where, log_q, 0.0)) / jnp.maximum(jnp.sum(where), 1)
    w = jnp.minimum(jnp.exp(-jax.lax.stop_gradient(log_q)) / k, clip)
    w = w / jnp.maximum(jnp.sum(jnp.where(where, w, 0.0)) / jnp.maximum(jnp.sum(where), 1), 1e-6)
    scores = towers.relevance(params, batch, key)
    clicks = jnp.asarray(batch["clicks"], jnp.float32)
    click = losses.two_tower_loss(
      scores, clicks, observation_logits=towers.observation(params, batch), where=where, weights=w
    )
    return click + placement, ({"click_loss": click, "placement_loss": placement}, extra)

  return Method(
    name="two_tower_weighted",
    init=init,
    loss=loss,
    score=towers.score,
    propensities=towers.propensities,
    click_logits=towers.click_logits,
    requires=("clicks",),
  )


# ----------------------------------------------------------------------------
# UPE.


_UPE = {**TOWER_DEFAULTS, "num_positions": None, "num_permutations": 16, "embedding_size": 8}


@register("upe", defaults=_UPE)
def upe(config, *, num_features: int, list_size: int) -> Method:
  r"""UPE (Luo et al., SIGIR'24): a logging-policy-aware propensity model with the backdoor adjustment.

  The propensity model is :math:`o(k, x) = v^\top \mathrm{elu}(\mathrm{emb}(k) + h(x))` with a linear
  :math:`h(x) = H x` that learns to reproduce the logger (its score :math:`u^\top h(x)` trained by a listwise
  softmax loss towards the logged order, labels :math:`2^{-k}`; the propensity model reads :math:`h` under
  stop-gradient, so :math:`h` is fitted to the logger alone, the paper's pre-training, jointly here);
  ``num_permutations`` random permutations of each list's valid documents give the backdoor-adjusted weights.
  """
  ranker = make_relevance_tower(config)
  num_positions = int(config.num_positions or list_size)
  num_perm, d = int(config.num_permutations), int(config.embedding_size)
  if num_perm < 1 or d < 1:
    raise ValueError(f"upe: num_permutations and embedding_size must be >= 1, got {num_perm}, {d}")
  dropout = float(config.dropout)

  def init(key, batch):
    k_rel, k_emb, k_h, k_v = jax.random.split(key, 4)
    x = jnp.zeros((1, 1, num_features), jnp.float32)
    prop = {
      "emb": 0.1 * jax.random.normal(k_emb, (num_positions, d)),
      "h": 0.1 * jax.random.normal(k_h, (num_features, d)),
      "u": jnp.ones((d,)) / d,
      "v": 0.1 * jax.random.normal(k_v, (d,)),
    }
    return {"relevance": ranker.init(k_rel, x)["params"], "propensity": prop}, {}

  def score(params, batch):
    return models.apply_array(ranker, {"params": params["relevance"]}, _features(batch))

  def _logits(prop, positions, h):
    return jax.nn.elu(jnp.take(prop["emb"], positions, axis=0) + jax.lax.stop_gradient(h)) @ prop["v"]

  def loss(params, extra, batch, key):
    k_rel, k_perm = jax.random.split(key)
    where = _where(batch)
    x = _features(batch)
    if dropout > 0:
      scores = models.apply_array(
        ranker, {"params": params["relevance"]}, x, deterministic=False, rngs={"dropout": k_rel}
      )
    else:
      scores = score(params, batch)
    prop = params["propensity"]
    positions = jnp.clip(batch_positions(batch), 0, num_positions - 1)
    h = x @ prop["h"]  # [..., L, d]
    logger = losses.naive_softmax_loss(h @ prop["u"], jnp.exp2(-positions.astype(jnp.float32)), where=where)
    obs = _logits(prop, positions, h)
    # Random permutations of each list's valid documents: slot k keeps its position, takes document sigma_p(k).
    # The j-th valid slot (in order) takes the j-th valid document of a random order.
    u = jax.random.uniform(k_perm, where.shape[:-1] + (num_perm, where.shape[-1]))
    docs = jnp.argsort(jnp.where(where[..., None, :], u, 2.0), axis=-1)
    slot_rank = jnp.argsort(jnp.argsort(~where, axis=-1, stable=True), axis=-1)
    perm = jnp.take_along_axis(docs, jnp.broadcast_to(slot_rank[..., None, :], docs.shape), axis=-1)
    h_perm = jnp.take_along_axis(h[..., None, :, :], perm[..., None], axis=-2)  # [..., P, L, d]
    permuted = _logits(prop, positions[..., None, :], h_perm)
    value, parts = losses.upe_loss(
      scores,
      jnp.asarray(batch["clicks"], jnp.float32),
      observation_logits=obs,
      permuted_observation_logits=permuted,
      where=where,
      return_aux=True,
    )
    return value + logger, ({**parts, "logger_loss": logger}, extra)

  return Method(name="upe", init=init, loss=loss, score=score, requires=("clicks",))
