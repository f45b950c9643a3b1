r"""Why PDGD's pair rule costs under individual-level observation: the analysis behind the README.

Under the report's ``individual`` users a document is examined with probability
``v_p ** g``, ``g = max(1 + w . x_crux, 0)``: a document with a larger ``g`` is seen less.
Two measurements, both on the report's data:

1. **The pair sets, without a learner.** Clicks are simulated on the training lists in the
   logging order; for each set of PDGD's inferred pairs "clicked ``i`` over unclicked ``j``"
   (:func:`ultr_jax.losses.pdgd_pair_weights` with ``debias=False``) it prints the mean label gap
   ``y_i - y_j`` and observation gap ``g_j - g_i``: ``considered`` (PDGD's rule), ``all``, and the
   two parts they differ by, ``above`` (an unclicked item above the last click) and ``below`` (an
   unclicked item past the one after the last click, which only ``all`` uses).
2. **What the learners absorb.** PDGD's variants and listwise naive are trained as in the report
   (linear ranker, the ``model_sample`` display, the grid's budget); for each seed it prints test
   nDCG@10 and the within-query least-squares slope of the score on ``g`` per unit of its slope on
   the label (``b_g / b_y``; negative: the score prefers documents that are seen more).
3. **What each surrogate's gradient hears at a trained model.** PDGD's considered pairs weighted as the
   probability surrogate's gradient (``sigma(d) sigma(-d)``) and as its log's (``sigma(-d)``), ``d`` the
   model's score gap: their observation gap per unit of label gap (positive: the step teaches that
   documents seen more are better).

  python experiments/report/pdgd_observation.py            # the report's default data, about 2 min
  python experiments/report/pdgd_observation.py --smoke    # seconds (the tests)
"""

import argparse
import importlib.util
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax import losses
from ultr_jax.studies import report
from ultr_jax.train import evaluate, fit, get_method

CONFIG = pathlib.Path(__file__).resolve().parent / "configs" / "default.py"
VARIANTS = {
  "pdgd considered/debias/probability": ("pdgd", {"pairs": "considered", "surrogate": "probability"}),
  "pdgd all/debias/probability": ("pdgd", {"pairs": "all", "surrogate": "probability"}),
  "pdgd considered/debias/log_probability": ("pdgd", {"pairs": "considered", "surrogate": "log_probability"}),
  "pdgd all/debias/log_probability": ("pdgd", {"pairs": "all", "surrogate": "log_probability"}),
  "naive listwise": ("naive", {}),
}


def _config(smoke: bool):
  spec = importlib.util.spec_from_file_location("report_config", CONFIG)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config("smoke" if smoke else "")
  config.train.display = "model_sample"
  return config


def observation_exponent(features: np.ndarray, click_model: dict) -> np.ndarray:
  """``g = max(1 + w . x_crux, 0)`` per document (1 everywhere for a click model without ``w``)."""
  if not click_model.get("w"):
    return np.ones(features.shape[:-1])
  crux = np.asarray(click_model["crux_indices"])
  return np.maximum(1.0 + features[..., crux] @ np.asarray(click_model["w"]), 0.0)


def pair_set_gaps(train, click_fn, g: np.ndarray, *, top_k: int, reps: int = 50) -> dict:
  """Mean label and observation gaps of PDGD's pair sets over ``reps`` click draws (logging order)."""
  batch = jax.tree.map(jnp.asarray, train.as_batch())
  positions = jnp.broadcast_to(jnp.arange(train.list_size), train.where.shape)
  k = min(top_k, train.list_size)
  y, g = train.labels[:, :k], g[:, :k]
  sums = {name: np.zeros(3) for name in ("considered", "all", "above", "below")}
  for rep in range(reps):
    clicks = click_fn(jax.random.key(rep), batch)["clicks"]
    pref = {
      p: np.asarray(
        losses.pdgd_pair_weights(
          jnp.zeros(train.where.shape),
          clicks,
          positions=positions,
          where=batch["where"],
          top_k=k,
          pairs=p,
          debias=False,
        )
      )
      > 0
      for p in ("considered", "all")
    }
    c = np.asarray(clicks)[:, :k] > 0
    last = np.where(c.any(-1), k - 1 - np.argmax(c[:, ::-1], axis=-1), -1)
    above = pref["considered"] & (np.arange(k)[None, None, :] < last[:, None, None])
    sets = {**pref, "above": above, "below": pref["all"] & ~pref["considered"]}
    dy = y[:, :, None] - y[:, None, :]  # [Q, i, j]
    dg = g[:, None, :] - g[:, :, None]
    for name, mask in sets.items():
      sums[name] += [mask.sum(), (dy * mask).sum(), (dg * mask).sum()]
  return {
    name: {"pairs_per_draw": n / reps, "label_gap": sy / n, "observation_gap": sg / n}
    for name, (n, sy, sg) in sums.items()
  }


def surrogate_observation_ratios(
  scores: np.ndarray, train, click_fn, g: np.ndarray, *, top_k: int, reps: int = 20
) -> dict:
  """Observation gap per unit of label gap of PDGD's considered pairs, weighted as each surrogate's gradient.

  At a model with scores ``f`` (training lists, logging order), a pair "clicked ``i`` over ``j``" moves the
  scores with weight ``sigma(d) sigma(-d)`` under the probability surrogate and ``sigma(-d)`` under its log,
  ``d = f_i - f_j`` (PDGD's debiasing weights left out). Returns ``sum w (g_j - g_i) / sum w (y_i - y_j)``
  per surrogate: positive, the step teaches that documents seen more are better.
  """
  batch = jax.tree.map(jnp.asarray, train.as_batch())
  positions = jnp.broadcast_to(jnp.arange(train.list_size), train.where.shape)
  k = min(top_k, train.list_size)
  y, g, f = train.labels[:, :k], g[:, :k], np.asarray(scores, np.float64)[:, :k]
  sig = 1.0 / (1.0 + np.exp(-(f[:, :, None] - f[:, None, :])))
  weights = {"probability": sig * (1.0 - sig), "log_probability": 1.0 - sig}
  dy, dg = y[:, :, None] - y[:, None, :], g[:, None, :] - g[:, :, None]
  sums = {name: np.zeros(2) for name in weights}
  for rep in range(reps):
    clicks = click_fn(jax.random.key(rep), batch)["clicks"]
    pref = (
      np.asarray(
        losses.pdgd_pair_weights(
          jnp.zeros(train.where.shape), clicks, positions=positions, where=batch["where"], top_k=k, debias=False
        )
      )
      > 0
    )
    for name, w in weights.items():
      sums[name] += [(w * dg * pref).sum(), (w * dy * pref).sum()]
  return {name: float(num / den) for name, (num, den) in sums.items()}


def observation_slopes(scores: np.ndarray, labels: np.ndarray, g: np.ndarray, where: np.ndarray) -> float:
  """``b_g / b_y`` of the within-query centred least squares ``score ~ b_y * label + b_g * g``.

  NaN where ``g`` does not vary within queries (a click model without individual observation).
  """

  def centred(a):
    mean = (a * where).sum(-1, keepdims=True) / np.maximum(where.sum(-1, keepdims=True), 1)
    return (a - mean)[where]

  x = np.stack([centred(labels), centred(g)], axis=1)
  if not np.any(np.abs(x[:, 1]) > 1e-12):
    return float("nan")
  beta, *_ = np.linalg.lstsq(x, centred(scores), rcond=None)
  return float(beta[1] / beta[0])


def main(smoke: bool = False, bias_name: str = "individual", reps: int = 50, variants=tuple(VARIANTS)) -> dict:
  config = _config(smoke)
  data = report.make_bias_data(config)
  bias = config.bias_configs[bias_name]
  train, valid, test = report._bias_datasets(bias, data, config.seed)  # pylint: disable=protected-access
  click_fn, click_model = report.make_bias_click_fn(bias, train, top_k=config.logging_policy.top_k)
  out = {
    "pairs": pair_set_gaps(
      train, click_fn, observation_exponent(train.features, click_model), top_k=config.logging_policy.top_k, reps=reps
    ),
    "learners": {},
  }
  for name, stats in out["pairs"].items():
    print(
      f"pairs {name:10s} {stats['pairs_per_draw']:9.0f} per draw  label gap {stats['label_gap']:.3f}  "
      f"observation gap {stats['observation_gap']:+.3f}",
      flush=True,
    )
  g_test = observation_exponent(test.features, click_model)
  g_train = observation_exponent(train.features, click_model)
  seeds = [config.seed + i for i in range(config.num_seeds)]
  batch = jax.tree.map(jnp.asarray, test.as_batch())
  for label in variants:
    name, switches = VARIANTS[label]
    method_config = config.method_configs[name]
    method_config.ranker = "linear"
    method_config.update(switches)
    method = get_method(name, method_config, num_features=train.num_features, list_size=train.list_size)
    result = fit(method, train, valid, click_fn=click_fn, config=config.train, seeds=seeds, name=label)
    ndcg = evaluate(method, result.params, test)["ndcg@10"]
    scores = np.asarray(jax.vmap(method.score, in_axes=(0, None))(result.params, batch), np.float64)
    slopes = [observation_slopes(s, test.labels, g_test, test.where) for s in scores]
    train_scores = np.asarray(
      jax.vmap(method.score, in_axes=(0, None))(result.params, jax.tree.map(jnp.asarray, train.as_batch())), np.float64
    )
    ratios = [
      surrogate_observation_ratios(
        f, train, click_fn, g_train, top_k=config.logging_policy.top_k, reps=max(1, reps // 2)
      )
      for f in train_scores
    ]
    ratios = {name: [r[name] for r in ratios] for name in ratios[0]}
    out["learners"][label] = {"ndcg@10": ndcg.tolist(), "b_g/b_y": slopes, "gradient_g_per_y": ratios}
    print(
      f"{label:40s} nDCG@10 {np.mean(ndcg):.4f}  b_g/b_y {np.mean(slopes):+.3f} "
      f"(seeds {', '.join(f'{v:+.2f}' for v in slopes)})  considered pairs' g per y under the "
      f"probability / log gradient {np.mean(ratios['probability']):+.3f} / "
      f"{np.mean(ratios['log_probability']):+.3f}",
      flush=True,
    )
  return out


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--smoke", action="store_true")
  parser.add_argument("--bias", default="individual")
  parser.add_argument("--reps", type=int, default=50)
  parser.add_argument("--out", default="", help="write the numbers as JSON here")
  args = parser.parse_args()
  results = main(args.smoke, args.bias, args.reps)
  if args.out:
    pathlib.Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
