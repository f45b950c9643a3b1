r"""LBD and its ablations as :class:`~ultr_jax.train.Method`\ s (Chen et al., NeurIPS'22, Sections 4 and 5).

Registered names (all share :class:`~ultr_jax.models.lbd.LBDTower` and
:mod:`ultr_jax.losses.lbd`; only the defaults of ``(lam, t)`` differ):

============  =====================  ============================================
name          default ``(lam, t)``   meaning
============  =====================  ============================================
``unlimited`` ``(0, 0)``             individual-level two-tower, no constraint
``lbd_lips``  ``(100, 0)``           Lipschitz decoupling only
``lbd_ber``   ``(0, 0.1)``           Bernoulli decoupling only
``lbd``       ``(100, 0.1)``         both (the repo's default setting)
``lbd_grid``  ``lams``, ``ts`` lists G independent towers trained in lockstep
============  =====================  ============================================

Method config fields (all optional; declared with their defaults in :data:`LBD_DEFAULTS` and
:data:`GRID_DEFAULTS`, an unknown key is an error through :func:`~ultr_jax.train.get_method`):

* ``ranker``: ``"dnn"``/``"mlp"`` (trunk ``hidden_sizes``) or ``"linear"``
  (LinearMulti: LayerNorm then one dense layer).
* ``hidden_sizes``: default ``(512, 256, 128)``; ``layer_norm`` (True).
* ``lam``, ``t``: GP weight on the authors' scale (B, T, n) = (256, 10, 10)
  and Bernoulli drop probability. With ``rescale_lambda`` (default True) the
  weight is rescaled to the batch's static shape (:func:`rescale_gp_weight`).
* ``keep`` (0.1), ``gp_mode`` (``"code"`` | ``"paper"``), ``paper_transform``.
* ``num_positions``: observation heads ``n`` (default ``list_size``).
* ``obs_transform``: ``"free"`` (repo) or ``"neg_softplus"`` (an option of ours:
  :math:`s_{obs} = -\mathrm{softplus}(\cdot) \le 0`, so "observation = 1" is
  the maximum, as the theory assumes).
* ``optimizer``, ``learning_rate``, ``grad_clip``: if ``optimizer`` is set
  the method carries its own optimizer (``lbd_grid`` always does: it clips
  each member's gradient separately, so members stay independent).

At inference only the relevance head ranks (:math:`s_{rel}`), so ``t``,
``lam`` and the observation heads cannot change a ranking (the paper's Section 5).
"""

from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from ultr_jax.losses.lbd import bernoulli_click_logits, lbd_forward, rescale_gp_weight, softmax_click_loss
from ultr_jax.models.lbd import LBDTower
from ultr_jax.train.config import merge_config
from ultr_jax.train.method import Method
from ultr_jax.train.methods import register

__all__ = [
  "make_lbd",
  "make_lbd_grid",
  "grid_member_params",
  "per_member_optimizer",
  "stack_runs",
  "VARIANT_DEFAULTS",
  "LBD_DEFAULTS",
  "GRID_DEFAULTS",
]

VARIANT_DEFAULTS = {
  "unlimited": (0.0, 0.0),
  "lbd_lips": (100.0, 0.0),
  "lbd_ber": (0.0, 0.1),
  "lbd": (100.0, 0.1),
}

#: The config fields of every LBD-family model and their defaults (``lam`` and ``t``: per variant,
#: :data:`VARIANT_DEFAULTS`; ``num_positions`` 0: the list size; ``optimizer`` "": the training config's).
LBD_DEFAULTS = {
  "ranker": "dnn",
  "hidden_sizes": (512, 256, 128),
  "layer_norm": True,
  "num_positions": 0,
  "rescale_lambda": True,
  "obs_transform": "free",
  "keep": 0.1,
  "gp_mode": "code",
  "paper_transform": "exp",
  "optimizer": "",
  "learning_rate": 0.05,
  "grad_clip": 0.0,
}
#: ``lbd_grid``'s fields: :data:`LBD_DEFAULTS` less ``(lam, t)``, plus the members' ``lams`` and ``ts``
#: (required), the member ``select`` that ranks, and its own optimizer (AdaGrad 0.05, clip 5).
GRID_DEFAULTS = {
  **LBD_DEFAULTS,
  "optimizer": "adagrad",
  "grad_clip": 5.0,
  "lams": None,
  "ts": None,
  "select": 0,
  "skip_zero_lambda_gp": True,
}


def _tower(config, list_size: int) -> LBDTower:
  ranker = config.get("ranker", "dnn")
  if ranker in ("linear", "linear_multi"):
    hidden = ()
  elif ranker in ("dnn", "mlp"):
    hidden = tuple(int(h) for h in config.get("hidden_sizes", (512, 256, 128)))
  else:
    raise ValueError(f"lbd: unknown ranker {ranker!r} (dnn, mlp, linear)")
  return LBDTower(
    num_positions=int(config.get("num_positions", 0) or list_size),
    hidden_sizes=hidden,
    layer_norm=bool(config.get("layer_norm", True)),
  )


def _optimizer(config):
  name = config.get("optimizer", "")
  if not name:
    return None
  builders = {"adam": optax.adam, "adagrad": optax.adagrad, "sgd": optax.sgd}
  if name not in builders:
    raise ValueError(f"lbd: unknown optimizer {name!r}; one of {sorted(builders)}")
  tx = builders[name](float(config.get("learning_rate", 0.05)))
  if config.get("grad_clip", 0.0):
    tx = optax.chain(optax.clip_by_global_norm(float(config.grad_clip)), tx)
  return tx


def per_member_optimizer(tx: optax.GradientTransformation) -> optax.GradientTransformation:
  """``tx`` applied independently to every slice of a leading member axis (vmapped init/update).

  >>> tx = per_member_optimizer(optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(1.0)))
  >>> g = {"w": jnp.array([[3.0, 4.0], [0.3, 0.4]])}
  >>> u, _ = tx.update(g, tx.init(g))
  >>> print(u["w"])   # each row clipped to norm 1 separately
  [[-0.6 -0.8]
   [-0.3 -0.4]]
  """

  def init(params):
    return jax.vmap(tx.init)(params)

  def update(updates, state, params=None):
    if params is None:
      return jax.vmap(lambda u, s: tx.update(u, s))(updates, state)
    return jax.vmap(tx.update)(updates, state, params)

  return optax.GradientTransformation(init, update)


def _single_loss(tower, config, tparams, batch, key, lam, t):
  """LBD objective of one tower; ``lam`` on the authors' scale, ``t`` the drop probability."""
  features, where = batch["features"], batch["where"]
  clicks = jnp.where(where, batch["clicks"], 0.0)
  if config.get("rescale_lambda", True):
    b, l = features.shape[-3], features.shape[-2]
    lam = rescale_gp_weight(lam, batch_size=b, list_size=l, num_positions=tower.num_positions)
  neg_softplus = config.get("obs_transform", "free") == "neg_softplus"

  def tower_fn(x):
    s_rel, s_obs = tower.apply(tparams, x)
    return s_rel, (-jax.nn.softplus(s_obs) if neg_softplus else s_obs)

  k_bern, k_drop = jax.random.split(key)
  compute_gp = not (isinstance(lam, (int, float)) and lam == 0.0)
  if compute_gp:
    s_rel, s_obs, gp = lbd_forward(
      tower_fn,
      features,
      where=where,
      key=k_drop,
      keep=float(config.get("keep", 0.1)),
      mode=config.get("gp_mode", "code"),
      paper_transform=config.get("paper_transform", "exp"),
    )
  else:
    s_rel, s_obs = tower_fn(features)
    gp = jnp.zeros((), s_rel.dtype)
  static_t0 = isinstance(t, (int, float)) and t == 0.0
  logits, gamma = bernoulli_click_logits(
    s_rel, observation_logits=s_obs, positions=batch.get("positions"), key=None if static_t0 else k_bern, t=t
  )
  sv = softmax_click_loss(logits, clicks, where=where)
  loss = sv + lam * gp
  n_real = jnp.maximum(jnp.sum(where), 1)
  metrics = {"sv": sv, "gp": gp, "gamma": jnp.sum(jnp.where(where, gamma, 0.0)) / n_real}
  return loss, metrics


def make_lbd(config: ml_collections.ConfigDict, *, num_features: int, list_size: int, name: str = "lbd") -> Method:
  r"""One LBD-family model with fixed ``(config.lam, config.t)`` (defaults per ``name``).

  .. math::  \mathcal L = \mathcal L_{sv}(s_{rel} + \gamma\, s_{obs,p}) + \lambda\, \mathcal L_{gp}

  >>> m = make_lbd(ml_collections.ConfigDict({"ranker": "linear"}), num_features=3, list_size=4)
  >>> b = {"features": jnp.ones((2, 4, 3)), "where": jnp.ones((2, 4), bool), "clicks": jnp.eye(2, 4)}
  >>> p, extra = m.init(jax.random.key(0), b)
  >>> loss, (metrics, _) = jax.jit(m.loss)(p, extra, b, jax.random.key(1))
  >>> print(m.score(p, b).shape, bool(jnp.isfinite(loss)))
  (2, 4) True
  """
  del num_features
  lam0, t0 = VARIANT_DEFAULTS.get(name, VARIANT_DEFAULTS["lbd"])
  defaults = {**LBD_DEFAULTS, "lam": lam0, "t": t0}
  config = merge_config(defaults, config, what=f"method {name!r} config", none_is_default=True)
  lam = float(config.lam)
  t = float(config.t)
  tower = _tower(config, list_size)

  def init(key, batch):
    return {"tower": tower.init(key, batch["features"][..., :1, :])}, {}

  def loss(params, extra, batch, key):
    value, metrics = _single_loss(tower, config, params["tower"], batch, key, lam, t)
    return value, (metrics, extra)

  def score(params, batch):
    return tower.apply(params["tower"], batch["features"])[0]

  return Method(name=name, init=init, loss=loss, score=score, optimizer=_optimizer(config), requires=("clicks",))


def make_lbd_grid(config: ml_collections.ConfigDict, *, num_features: int, list_size: int) -> Method:
  r"""``G = len(config.lams)`` LBD towers with their own ``(lam_g, t_g)``, trained in one vmapped step.

  The loss is :math:`\sum_g \mathcal L(\theta_g; \lambda_g, t_g)`, so each
  member's gradient is its own; the optimizer (``config.optimizer``, default
  AdaGrad 0.05 with clip 5) runs per member (:func:`per_member_optimizer`).
  ``score`` ranks with member ``config.select`` (default 0); evaluate member
  ``g`` with ``make_lbd``'s ``score`` on :func:`grid_member_params`.

  >>> cfg = ml_collections.ConfigDict({"ranker": "linear", "lams": [0.0, 100.0], "ts": [0.0, 0.2]})
  >>> m = make_lbd_grid(cfg, num_features=3, list_size=4)
  >>> b = {"features": jnp.ones((2, 4, 3)), "where": jnp.ones((2, 4), bool), "clicks": jnp.eye(2, 4)}
  >>> p, extra = m.init(jax.random.key(0), b)
  >>> print(jax.tree.leaves(p)[0].shape[0], grid_member_params(p, 1)["tower"] is not None)
  2 True
  """
  del num_features
  config = merge_config(GRID_DEFAULTS, config, what="method 'lbd_grid' config", none_is_default=True)
  if config.lams is None or config.ts is None:
    raise ValueError("lbd_grid: config.lams and config.ts (one value per member) are required")
  lams = jnp.asarray([float(v) for v in config.lams], jnp.float32)
  ts = jnp.asarray([float(v) for v in config.ts], jnp.float32)
  if lams.shape != ts.shape or lams.ndim != 1 or lams.size == 0:
    raise ValueError(f"lbd_grid: lams and ts must be equal-length non-empty lists, got {config.lams}, {config.ts}")
  g = int(lams.size)
  tower = _tower(config, list_size)
  tx_cfg = ml_collections.ConfigDict(
    {
      "optimizer": config.get("optimizer", "adagrad") or "adagrad",
      "learning_rate": config.get("learning_rate", 0.05),
      "grad_clip": config.get("grad_clip", 5.0),
    }
  )
  base_tx = _optimizer(tx_cfg)
  assert base_tx is not None  # tx_cfg names an optimizer
  tx = per_member_optimizer(base_tx)
  select = int(config.get("select", 0))

  def init(key, batch):
    keys = jax.random.split(key, g)
    return {"towers": jax.vmap(lambda k: tower.init(k, batch["features"][..., :1, :]))(keys)}, {}

  # With ``skip_zero_lambda_gp`` (default), members with lambda = 0 skip the penalty's double
  # back-propagation (their penalty term is 0 either way; gradients are identical): the two groups
  # are vmapped separately inside one program. That saves step time on long runs but roughly
  # doubles the step's compile time, so compile-dominated runs (smoke configs) turn it off.
  lam_host = np.asarray([float(v) for v in config.lams], np.float32)
  if config.get("skip_zero_lambda_gp", True):
    groups = [(np.nonzero(lam_host == 0.0)[0], False), (np.nonzero(lam_host != 0.0)[0], True)]
    groups = [(idx, gp) for idx, gp in groups if idx.size]
  else:
    groups = [(np.arange(g), True)]

  def loss(params, extra, batch, key):
    keys = jax.random.split(key, g)
    total, parts = jnp.zeros((), jnp.float32), []
    for idx, with_gp in groups:
      sub = params["towers"] if idx.size == g else jax.tree.map(lambda x, i=idx: x[i], params["towers"])
      if with_gp:
        fn = lambda p, k, lam, t: _single_loss(tower, config, p, batch, k, lam, t)
      else:
        fn = lambda p, k, lam, t: _single_loss(tower, config, p, batch, k, 0.0, t)
      values, metrics = jax.vmap(fn)(sub, keys[idx], lams[idx], ts[idx])
      total = total + jnp.sum(values)
      parts.append(metrics)
    metrics = {k: jnp.mean(jnp.concatenate([m[k] for m in parts])) for k in parts[0]}
    return total, (metrics, extra)

  def score(params, batch):
    return tower.apply(jax.tree.map(lambda p: p[select], params["towers"]), batch["features"])[0]

  return Method(name="lbd_grid", init=init, loss=loss, score=score, optimizer=tx, requires=("clicks",))


def grid_member_params(params: Any, member: int, *, seed_axis: bool = False) -> dict:
  """The params of grid member ``member`` in the layout of :func:`make_lbd` (``{"tower": ...}``).

  With ``seed_axis=True`` the leaves carry a leading seed axis ``[S, G, ...]``.

  >>> p = {"towers": {"w": jnp.arange(6.0).reshape(3, 2)}}
  >>> print(grid_member_params(p, 2)["tower"]["w"])
  [4. 5.]
  """
  take = (lambda x: x[:, member]) if seed_axis else (lambda x: x[member])
  return {"tower": jax.tree.map(take, params["towers"])}


def stack_runs(
  method: Method, num_runs: int, *, optimizer: optax.GradientTransformation, runs_key: str = "runs"
) -> Method:
  r"""``num_runs`` independent copies of ``method`` trained in one vmapped step, each on its own clicks.

  The copies start from the same initialisation and share the batch and the
  loss key (exactly as ``num_runs`` separate :func:`~ultr_jax.train.fit`
  calls with the same seed would); run ``r`` reads its click-model outputs
  from ``batch[runs_key]``, a dict of ``[num_runs, ...]`` arrays (see
  :func:`ultr_jax.studies.lbd.stack_click_fn`), so one compiled step
  serves, e.g., every coupling level ``eta`` of a sweep. The loss is
  :math:`\sum_r \mathcal L(\theta_r; \text{clicks}_r)`, so each run's gradient
  is its own, and ``optimizer`` is applied per run
  (:func:`per_member_optimizer`). Params carry a leading run axis;
  ``score`` ranks with run 0 (evaluate run ``r`` with ``method.score`` on
  ``params[r]``).

  >>> base = make_lbd(ml_collections.ConfigDict({"ranker": "linear"}), num_features=3, list_size=4)
  >>> m = stack_runs(base, 2, optimizer=optax.sgd(0.1))
  >>> b = {"features": jnp.ones((2, 4, 3)), "where": jnp.ones((2, 4), bool)}
  >>> p, extra = m.init(jax.random.key(0), b)
  >>> c0, c1 = jnp.eye(2, 4), jnp.eye(2, 4)[:, ::-1]
  >>> b["runs"] = {"clicks": jnp.stack([c0, c1])}
  >>> loss, _ = jax.jit(m.loss)(p, extra, b, jax.random.key(1))
  >>> p0 = jax.tree.map(lambda x: x[0], p)
  >>> l0, l1 = (jax.jit(base.loss)(p0, {}, {**b, "clicks": c}, jax.random.key(1))[0] for c in (c0, c1))
  >>> print(jax.tree.leaves(p)[0].shape[0], bool(jnp.allclose(loss, l0 + l1)))
  2 True
  """
  r = int(num_runs)
  if r < 1:
    raise ValueError(f"stack_runs: num_runs must be >= 1, got {num_runs}")

  def init(key, batch):
    params, extra = method.init(key, batch)
    tile = lambda x: jnp.broadcast_to(x, (r,) + jnp.shape(x))
    return jax.tree.map(tile, params), jax.tree.map(tile, extra)

  def loss(params, extra, batch, key):
    shared = {k: v for k, v in batch.items() if k != runs_key}

    def one(p, x, run):
      return method.loss(p, x, {**shared, **run}, key)

    values, (metrics, new_extra) = jax.vmap(one)(params, extra, batch[runs_key])
    return jnp.sum(values), (jax.tree.map(jnp.mean, metrics), new_extra)

  def score(params, batch):
    return method.score(jax.tree.map(lambda x: x[0], params), batch)

  return Method(
    name=f"{method.name}[x{r}]",
    init=init,
    loss=loss,
    score=score,
    optimizer=per_member_optimizer(optimizer),
    requires=(runs_key,),
    config={"stacked": method.name, "num_runs": r, **(method.config or {})},
  )


def _variant(name):
  def factory(config, *, num_features, list_size):
    return make_lbd(config, num_features=num_features, list_size=list_size, name=name)

  factory.__name__ = f"make_{name}"
  return factory


for _name, (_lam, _t) in VARIANT_DEFAULTS.items():
  register(_name, defaults={**LBD_DEFAULTS, "lam": _lam, "t": _t})(_variant(_name))
register("lbd_grid", defaults=GRID_DEFAULTS)(make_lbd_grid)
