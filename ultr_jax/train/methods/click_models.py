r"""Click-model learners: a relevance tower trained as the attraction of a session click model.

Registered names ``click_model_<m>`` for every click model of the registry with
the ``loss`` capability (:data:`ultr_jax.losses.CLICK_MODEL_LOSSES`: ``pbm``, ``ubm``,
``dcm``, ``dbn``, ``ccm``, ``trust``, ``sdbn``, ``mixture``; ``trust``
is the trust-bias model, :math:`\sigma(o_k)[a_i + \sigma(t_k)(1 - a_i)]`, learned from
the clicks alone where the ``affine`` method needs its parameters given; its
click probability is affine in the attraction, so the fit pins down the
attractions' order and every click probability, not the per-position
parameters, and it reports no propensities). The relevance
tower (the baselines' ``ranker`` fields: ``ranker``, ``hidden_sizes``, ...)
outputs the attraction logit of each item (and one more output per further
per-item parameter of the model, :attr:`~ultr_jax.simulation.ClickModel.item_params`:
for the DBN and SDBN the satisfaction logit); the click model's bias parameters
(:func:`~ultr_jax.losses.click_model_bias_shapes` over ``num_positions``,
default ``list_size``) are a second set of parameters, initialised at
probability 1/2 (logit 0). The loss is the negative session log-likelihood
of the step's clicks (:func:`~ultr_jax.losses.click_model_loss`); items not
``shown`` (beyond a top-k cut) are left out. Ranking uses the relevance tower
only: the attraction logit; for the DBN, ``dbn_score = "product"`` ranks by
:math:`\log a + \log\sigma` instead (Chapelle & Zhang's relevance, attraction
times satisfaction). That is not the default because it is fragile: where the
clicks do not come from a click chain (PBM, UBM, trust bias), a click followed
by more clicks reads as dissatisfaction, so :math:`\sigma` falls with
relevance and the product ranks below random (the report's default grid:
nDCG@10 0.15-0.37 outside the click-chain columns, against 0.83-0.86 by
attraction).
``propensities`` reports the examination of each position before any click
(PBM: :math:`\sigma(o_k)`; UBM: :math:`\sigma(\gamma_{k, 0})`), relative to
position 1: the model's :attr:`~ultr_jax.simulation.ClickModel.propensity_table`;
the chain models have no per-position table and report none.

>>> from ultr_jax.train import get_method
>>> m = get_method("click_model_dbn", {"ranker": "linear"}, num_features=3, list_size=4)
>>> params, extra = m.init(jax.random.key(0), None)
>>> sorted(params), params["bias"]["perseverance"].shape
(['bias', 'relevance'], ())
"""

import jax
import jax.numpy as jnp

from ultr_jax import losses, models
from ultr_jax.simulation import get_click_model
from ultr_jax.train.method import Method
from ultr_jax.train.methods import register
from ultr_jax.train.methods.baselines import TOWER_DEFAULTS, batch_positions, make_relevance_tower

__all__: list[str] = []


def _shown(batch):
  """The items a user saw: ``where``, and ``shown`` when the batch has a top-k cut."""
  where = jnp.asarray(batch["where"]).astype(bool)
  if batch.get("shown") is not None:
    where = where & jnp.asarray(batch["shown"]).astype(bool)
  return where


def _factory(model: str):
  m = get_click_model(model)
  extra_outputs = tuple(m.item_params)  # per-item parameters besides the attraction: further tower outputs

  def factory(config, *, num_features: int, list_size: int) -> Method:
    get = lambda name, default: default if config is None or config.get(name) is None else config.get(name)
    num_positions = int(get("num_positions", list_size))
    ranker = make_relevance_tower(config, output_size=1 + len(extra_outputs) if extra_outputs else 1)
    shapes = losses.click_model_bias_shapes(m, num_positions)
    dropout = float(get("dropout", 0.0))
    # Ranking by attraction times satisfaction (Chapelle & Zhang's relevance) for a model with a satisfaction.
    dbn_score = get("dbn_score", "attraction")
    if dbn_score not in ("product", "attraction"):
      raise ValueError(f"click_model_{m.name}: dbn_score must be 'product' or 'attraction', got {dbn_score!r}")
    if dbn_score == "product" and "satisfaction" not in extra_outputs:
      raise ValueError(f"click_model_{m.name}: dbn_score='product' needs a model with a satisfaction")

    def init(key, batch):
      x = jnp.zeros((1, 1, num_features), jnp.float32)
      params = {
        "relevance": ranker.init(key, x)["params"],
        "bias": {k: jnp.zeros(s, jnp.float32) for k, s in shapes.items()},
      }
      return params, {}

    def outputs(params, batch, key=None):
      x = jnp.asarray(batch["features"], jnp.float32)
      if key is not None and dropout > 0:
        out = models.apply_array(ranker, {"params": params["relevance"]}, x, deterministic=False, rngs={"dropout": key})
      else:
        out = models.apply_array(ranker, {"params": params["relevance"]}, x)
      if not extra_outputs:
        return out, {}
      return out[..., 0], {k: out[..., 1 + i] for i, k in enumerate(extra_outputs)}

    def loss(params, extra, batch, key):
      where = _shown(batch)
      attraction, items = outputs(params, batch, key)
      value = losses.click_model_loss(
        attraction,
        jnp.asarray(batch["clicks"], jnp.float32),
        model=m,
        bias=params["bias"],
        where=where,
        positions=batch_positions(batch),
        item_scores=items,
      )
      return value, ({}, extra)

    def score(params, batch):
      attraction, items = outputs(params, batch)
      if dbn_score == "product":
        return jax.nn.log_sigmoid(attraction) + jax.nn.log_sigmoid(items["satisfaction"])
      return attraction

    def propensities(params, extra):
      table = params["bias"][m.propensity_table]
      logits = table[:, 0] if table.ndim == 2 else table  # before any click: the UBM's state 0
      log_p = jax.nn.log_sigmoid(logits)
      return jnp.exp(log_p - log_p[..., :1])

    def click_logits(params, extra, batch):
      attraction, items = outputs(params, batch)
      return losses.click_model_click_logits(
        attraction,
        jnp.asarray(batch["clicks"], jnp.float32),
        model=m,
        bias=params["bias"],
        where=_shown(batch),
        positions=batch_positions(batch),
        item_scores=items,
      )

    return Method(
      name=f"click_model_{model}",
      init=init,
      loss=loss,
      score=score,
      propensities=propensities if m.propensity_table else None,
      click_logits=click_logits,
      requires=("clicks",),
    )

  factory.__doc__ = f"Relevance tower as the attraction of a {model.upper()} click model (session likelihood)."
  return factory


for _model in losses.CLICK_MODEL_LOSSES:
  # A model with a per-document satisfaction (DBN, SDBN) may also rank by attraction x satisfaction.
  _score = {"dbn_score": "attraction"} if "satisfaction" in get_click_model(_model).item_params else {}
  _defaults = {**TOWER_DEFAULTS, "num_positions": None, **_score}
  register(f"click_model_{_model}", defaults=_defaults)(_factory(_model))
