"""The SIF study (Gong, Ai, Tao & Zhang, "A Causal Information-Flow Framework for ULTR", Section VI).

Analogues of its Tables I-III and Figures 2-5 on a CPU-sized toy, in three runs named by this study (the
names are ``results.json``'s keys and the config's variants):

* T6: the core mechanism with an oracle bias source and population clicks, under position + trust bias
  (Section VI-D: the Tables II/III story, SIF-dec above DLA and over-regularisation past a point);
* T7: the full method with learned towers and sampled clicks on the same toy (Figures 2-5: leakage
  trajectories, propensity MAE to the PBM oracle);
* T8: propensity recovery under position bias only (Section VI-C, Table I).

Importable (the tests drive it with the ``smoke`` config); ``main.py`` only
parses flags and calls :func:`run`.
"""

import json
import os
import time
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from ultr_jax import losses
from ultr_jax import metrics as metrics_lib
from ultr_jax.data import RankingDataset
from ultr_jax.simulation import (
  ULTRA_EXAM_TABLE,
  make_position_trust_click_fn,
  position_trust,
  relevance_probability,
  sif_toy_dataset,
)
from ultr_jax._schema import validate_config
from ultr_jax.studies.configs.sif import (
  CONFIG_RULES as CONFIG_RULES,
  VARIANTS as VARIANTS,
  default_config as default_config,
)  # re-exported
from ultr_jax.studies._progress import Progress
from ultr_jax.studies.figures import save_figure
from ultr_jax.train import (
  default_train_config,
  enable_compilation_cache,
  evaluate,
  fit,
  get_method,
  markdown_table,
  summarize,
  write_results,
)
from ultr_jax.train.methods.sif import with_leakage_diagnostics

METRICS = ("ndcg@3", "ndcg@5", "ndcg@10", "err@10")


# ----------------------------------------------------------------------------
# Data.


def load_data(config):
  """``(train, valid, test)`` RankingDatasets with a standardised ``logging_score`` extra."""
  d = config.data
  if d.source == "toy":
    train, world = sif_toy_dataset(d.num_train, seed=d.seed, logging_corr=d.logging_corr)
    valid, _ = sif_toy_dataset(d.num_valid, seed=d.seed + 1, params=world)
    test, _ = sif_toy_dataset(d.num_test, seed=d.seed + 2, params=world)
    return train, valid, test
  if d.source == "svmlight":
    from ultr_jax.data import load_svmlight  # noqa: PLC0415
    from ultr_jax.simulation import (
      apply_logging_policy,
      logging_policy_scores,  # noqa: PLC0415
      train_logging_policy,
    )

    sets = [load_svmlight(p) for p in (d.train_path, d.valid_path, d.test_path)]
    w = train_logging_policy(sets[0], fraction=0.01, seed=d.seed)
    out, stats = [], None
    for ds in sets:
      ds = apply_logging_policy(ds, logging_policy_scores(w, ds), top_k=d.list_size)
      rs = np.where(ds.where, ds.features @ np.asarray(w, np.float32), 0.0)
      if stats is None:  # global training-set statistics (the bias source z, standardised once)
        stats = (rs[ds.where].mean(), rs[ds.where].std() + 1e-8)
      out.append(ds.with_extras(logging_score=np.where(ds.where, (rs - stats[0]) / stats[1], 0.0).astype(np.float32)))
    return tuple(out)
  raise ValueError(f"data.source: expected 'toy' or 'svmlight', got {d.source!r}")


def shuffle_display(ds: RankingDataset, seed: int) -> RankingDataset:
  """``ds`` with every list in a random display order (positions independent of the features).

  The toy displays each list sorted by the logging score :math:`R_s = x^\top
  w_{log}`, a linear function of the features the ranker sees, so position
  is confounded with relevance (corr 0.7). Random display order is the
  unconfounded control for propensity recovery (T8). Items keep their
  features, labels and extras; only the order (= the displayed position)
  changes.

  >>> ds, _ = sif_toy_dataset(4, seed=0)
  >>> sh = shuffle_display(ds, 0)
  >>> bool(np.allclose(np.sort(sh.labels, 1), np.sort(ds.labels, 1))), bool((sh.labels != ds.labels).any())
  (True, True)
  """
  perm = np.argsort(np.random.default_rng(seed).random(ds.where.shape), axis=1, kind="stable")
  take = lambda a: np.take_along_axis(a, perm.reshape(perm.shape + (1,) * (a.ndim - 2)), axis=1)
  per_item = lambda v: v.ndim >= 2 and v.shape[1] == ds.list_size
  return RankingDataset(
    features=take(ds.features),
    labels=take(ds.labels),
    where=take(ds.where),
    qid=ds.qid,
    doc_ids=None if ds.doc_ids is None else take(ds.doc_ids),
    extras={k: take(v) if per_item(v) else v for k, v in ds.extras.items()},
  )


def _oracle_scores(test: RankingDataset, gamma: float) -> np.ndarray:
  return 1.0 / (1.0 + np.exp(-gamma * test.extras["logging_score"]))


def held_out_leakage(method, params, test: RankingDataset, *, gamma=1.0, k_top=3, by_label=True):
  """Per-seed oracle-conditioned trust leakage (nats) of ``method``'s test scores."""
  batch = jax.tree.map(jnp.asarray, {k: v for k, v in test.as_batch().items() if k != "qid"})
  scores = jax.vmap(method.score, in_axes=(0, None))(params, batch)
  pos = jnp.broadcast_to(jnp.arange(test.list_size), test.where.shape)
  fn = lambda s: losses.oracle_leakage(
    s,
    jnp.asarray(_oracle_scores(test, gamma)),
    pos,
    batch["labels"],
    where=batch["where"],
    k_top=k_top,
    by_label=by_label,
  )
  return np.asarray(jax.vmap(fn)(scores), np.float64)


def relative_mae(p, eta=1.0):
  """``MAE_rel = mean_k |p_k/p_1 - pi_k/pi_1|`` of ``p [..., K]`` against the PBM table ** eta (Figure 3's
  "MAE to PBM oracle", up to the scale exposure is identified with).

  The toy's clicks at alpha = 0 are the PBM with ``ULTRA_EXAM_TABLE ** eta``
  (``position_trust``'s examination), so this table is the exposure oracle.

  >>> print(round(float(relative_mae(np.asarray(ULTRA_EXAM_TABLE) * 3.0)), 6))
  0.0
  >>> print(round(float(relative_mae(np.ones(10))), 4))  # a flat estimate
  0.5676
  """
  p = np.asarray(p, np.float64)
  table = np.asarray(ULTRA_EXAM_TABLE, np.float64) ** eta
  k = min(p.shape[-1], table.shape[0])
  return np.abs(p[..., :k] / p[..., :1] - table[:k] / table[0]).mean(-1)


def propensity_mae(method, params, extra, eta=1.0):
  """Per-seed ``MAE_rel`` of ``method.propensities`` at ``(params, extra)`` (None if undefined)."""
  if method.propensities is None:
    return None
  return relative_mae(jax.vmap(method.propensities)(params, extra), eta)


def propensity_mae_trajectory(history, eta=1.0):
  """``(steps, MAE_rel [T, S])`` of the ``train/propensities`` logged by ``with_leakage_diagnostics``.

  Each record holds the propensities averaged over its evaluation interval.
  """
  recs = [h for h in history if "train/propensities" in h]
  return [h["step"] for h in recs], np.stack(
    [relative_mae(h["train/propensities"], eta) for h in recs]
  ) if recs else np.zeros((0, 0))


def _train_config(config, overrides):
  tc = default_train_config()
  for k, v in config.train.items():
    tc[k] = v
  for k, v in overrides.items():
    tc[k] = v
  tc.progress = bool(config.get("progress", False))
  return tc


# ----------------------------------------------------------------------------
# T6: oracle mechanism, population clicks.


def t6_train(train, alpha, lambdas, *, steps, learning_rate, k_top=3, estimator="variance"):
  """T6 in one compiled program: linear rankers (init 0) trained by full-batch GD, vmapped over variants.

  Variants: naive, IPS-pos (oracle pi*), IPS-full (oracle pi*(1 + d*)) and
  IPS-pos + lambda * D-penalty (variance proxy of the oracle sigma(z)
  projected on the scores, positions 1..k_top, gradient into the scores).
  Population clicks (the CTR is the click target). Returns ``(labels,
  weights [V, F + 1])``.
  """
  x = jnp.asarray(train.features)
  where = jnp.asarray(train.where)
  z = jnp.asarray(train.extras["logging_score"])
  out = position_trust(
    jax.random.key(0), relevance_probability(jnp.asarray(train.labels)), z, where=where, alpha=alpha, expected=True
  )
  c = out["clicks"]
  pos = jnp.broadcast_to(jnp.arange(train.list_size), where.shape)
  top = where & (pos < k_top)
  targets = [
    c,
    losses.ips_targets(c, out["examination"], where=where),
    losses.ips_targets(c, out["click_propensity"], where=where),
  ]
  targets += [targets[1]] * len(lambdas)
  lam = jnp.asarray([0.0, 0.0, 0.0] + [float(l) for l in lambdas], jnp.float32)
  labels = ["naive", "ips_pos", "ips_full"] + [f"ips_pos+D(lambda={l:g})" for l in lambdas]

  def objective(w, t, lam):
    s = x @ w[:-1] + w[-1]
    q = losses.project_within_cells(out["trust_score"], s, pos, where=top, num_cells=k_top)
    i_d = losses.conditional_mi_binary(q, pos, where=top, num_cells=k_top, estimator=estimator)
    return losses.listwise_risk(s, t, where=where) + lam * i_d

  def train_one(t, lam):
    def step(w, _):
      return w - learning_rate * jax.grad(objective)(w, t, lam), None

    w, _ = jax.lax.scan(step, jnp.zeros(x.shape[-1] + 1), None, length=steps)
    return w

  return labels, jax.jit(jax.vmap(train_one))(jnp.stack(targets), lam)


def run_t6(config, data, alpha):
  """T6 at one alpha: NDCG@10 and oracle-conditioned leakage on the test lists per variant."""
  train, valid, test = data
  labels, weights = t6_train(
    train, alpha, config.t6.lambdas, steps=config.t6.steps, learning_rate=config.t6.learning_rate, k_top=config.k_top
  )
  x = jnp.asarray(test.features)
  scores = jnp.einsum("qlf,vf->vql", x, weights[:, :-1]) + weights[:, -1][:, None, None]
  where = jnp.asarray(test.where)
  pos = jnp.broadcast_to(jnp.arange(test.list_size), where.shape)
  d = jnp.asarray(_oracle_scores(test, 1.0))
  rows = {}
  for v, label in enumerate(labels):
    met = metrics_lib.ranking_metrics(scores[v], jnp.asarray(test.labels), where=where, cutoffs=(10,))
    leak = lambda by_label: float(
      losses.oracle_leakage(
        scores[v], d, pos, jnp.asarray(test.labels), where=where, k_top=config.k_top, by_label=by_label
      )
    )
    rows[label] = {"ndcg@10": float(np.mean(met["ndcg@10"])), "leakage_(k,y)": leak(True), "leakage_(k)": leak(False)}
  return rows


def t6_checks(rows):
  """The T6 orderings as booleans (ordering, not digits)."""
  g = lambda k, c="ndcg@10": rows[k][c]
  lam_rows = [k for k in rows if k.startswith("ips_pos+D")]
  lams = [float(k.split("=")[1].rstrip(")")) for k in lam_rows]
  best = max(lam_rows, key=lambda k: g(k))
  largest = lam_rows[int(np.argmax(lams))]
  moderate = sorted([k for k, l in zip(lam_rows, lams) if 1 <= l <= 30], key=lambda k: lams[lam_rows.index(k)])
  return {
    "naive<ips_pos": g("naive") < g("ips_pos"),
    "ips_pos<best_moderate_penalty": any(g(k) > g("ips_pos") for k in moderate),
    "best_penalty_vs_ips_full": g(best) - g("ips_full"),
    # (k, y) cells over the moderate lambdas (<= 30; beyond, the ranker collapses), (k) cells over all.
    "leakage_(k,y)_falls_over_moderate_lambda": bool(g(moderate[-1], "leakage_(k,y)") < g(moderate[0], "leakage_(k,y)"))
    if moderate
    else None,
    "leakage_(k)_nonincreasing_in_lambda": bool(
      np.all(np.diff([g(k, "leakage_(k)") for k in sorted(lam_rows, key=lambda k: lams[lam_rows.index(k)])]) <= 1e-4)
    ),
    "too_large_lambda_below_ips_pos": g(largest) < g("ips_pos"),
    "penalty_gain": max(g(k) for k in moderate) - g("ips_pos") if moderate else float("nan"),
  }


# ----------------------------------------------------------------------------
# T7 / T8: learned towers, sampled clicks.


def exposure_slope_size(params):
  """Per-seed mean ``|u_k|`` of the SIF bias tower's exposure slopes (None without that tower).

  T7 expects the exposure penalty to drive ``u_k`` towards 0 (SIF-exp).

  >>> exposure_slope_size({"bias": {"exposure_slope": np.array([[0.1, -0.3], [0.0, 0.2]])}}).tolist()
  [0.2, 0.1]
  """
  leaves = [
    v
    for path, v in jax.tree_util.tree_flatten_with_path(params)[0]
    if getattr(path[-1], "key", None) == "exposure_slope"
  ]
  return np.abs(np.asarray(leaves[0], np.float64)).mean(-1) if leaves else None


def run_t7(config, data, setting, alpha, *, methods=None, train_overrides=None, fits=None, progress=None, cell=None):
  """Every method of ``methods`` (default ``config.methods``) at one setting; returns (rows, histories).

  ``fits``, when given, collects each method's :class:`~ultr_jax.train.FitResult` under
  ``"<setting>/alpha=<alpha>/<method>"`` (for :func:`~ultr_jax.train.write_results`: diverged seeds).
  ``progress``, when given, logs one line per fitted method, named ``cell`` (default ``"T7 <setting>
  alpha=<alpha>"``) and the method."""
  cell = cell or f"T7 {setting} alpha={alpha:g}"
  train, valid, test = data
  a = 0.0 if setting == "position" else alpha
  # alpha travels in the data, so every setting reuses one compiled step (persistent XLA cache).
  train = train.with_extras(trust_alpha=np.full((train.num_queries,), a, np.float32))
  click_fn = make_position_trust_click_fn({"alpha_key": "trust_alpha"})
  tc = _train_config(config, dict(train_overrides or {}))
  rows, histories = {}, {}
  for name in config.methods if methods is None else methods:
    mcfg = ml_collections.ConfigDict(dict(config.ranker))
    if name in config.method_configs:
      mcfg.update(dict(config.method_configs[name]))
    m = with_leakage_diagnostics(
      get_method(name, mcfg, num_features=train.num_features, list_size=train.list_size), k_top=config.k_top
    )
    t0 = time.perf_counter()
    res = fit(m, train, valid, click_fn=click_fn, config=tc, seeds=tuple(range(config.num_seeds)))
    if fits is not None:
      fits[f"{setting}/alpha={alpha:g}/{name}"] = res
    met = evaluate(m, res.params, test, cutoffs=(3, 5, 10))
    row: dict[str, Any] = {k: summarize(met[k]) for k in METRICS}
    row["leakage_d"] = summarize(held_out_leakage(m, res.params, test, k_top=config.k_top))
    mae = propensity_mae(m, res.params, res.extra)
    if mae is not None:
      row["propensity_mae"] = summarize(mae)  # at the selected (best-validation) state
      _, traj = propensity_mae_trajectory(res.history)
      if traj.size:  # over the last evaluation interval of training
        row["propensity_mae_final"] = summarize(traj[-1])
    u = exposure_slope_size(res.params)
    if u is not None:
      row["exposure_slope_abs"] = summarize(u)
    row["seconds"] = time.perf_counter() - t0
    rows[name] = row
    if progress is not None:
      progress.done(f"{cell} {name}: ndcg@10 {row['ndcg@10']['mean']:.4f}")
    histories[name] = res.history
  return rows, histories


def run_t8(config, data, *, progress=None):
  """T8: propensity recovery on position-only clicks, for each display order of ``config.t8.displays``.

  ``"logging"`` is the toy as logged (lists sorted by the logging score,
  which the features determine: position confounded with relevance);
  ``"random"`` shuffles every training list (the unconfounded control).
  Returns ``{f"display={d}": {"rows", "mae_curve"}}`` where ``mae_curve``
  maps each method to ``{"steps", "mean", "std"}`` of MAE_rel over seeds
  (each value averaged over its evaluation interval) and the rows add
  ``steps_to_mae<0.05`` (first logged step whose seed-mean MAE_rel is below
  0.05; None if never). ``progress``, when given, logs a line per fitted method.
  """
  t8 = config.t8
  train, valid, test = data
  out = {}
  for display in t8.displays:
    if display not in ("logging", "random"):
      raise ValueError(f"t8.displays: expected 'logging' or 'random', got {display!r}")
    tr = shuffle_display(train, config.data.seed) if display == "random" else train
    rows, hist = run_t7(
      config,
      (tr, valid, test),
      "position",
      0.0,
      methods=t8.methods,
      train_overrides={"steps": t8.steps, "eval_every": t8.eval_every},
      progress=progress,
      cell=f"T8 display={display}",
    )
    curves = {}
    for name, h in hist.items():
      steps, traj = propensity_mae_trajectory(h)
      if traj.size:
        mean = traj.mean(-1)
        curves[name] = {"steps": steps, "mean": mean.tolist(), "std": traj.std(-1).tolist()}
        below = [st for st, v in zip(steps, mean) if v < 0.05]
        rows[name]["steps_to_mae<0.05"] = below[0] if below else None
    out[f"display={display}"] = {"rows": rows, "mae_curve": curves}
  return out


def _curve(history, key):
  steps = [h["step"] for h in history if f"train/{key}" in h]
  vals = [np.mean(h[f"train/{key}"]) for h in history if f"train/{key}" in h]
  return steps, vals


def write_figures(workdir, t7, histories, key_setting):
  """PNG analogues of Figures 2-5 from the T7 run at ``key_setting``."""
  import matplotlib  # noqa: PLC0415

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  rows, hist = t7[key_setting], histories[key_setting]
  paths = []

  def save(fig, name):
    path = os.path.join(workdir, name)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    paths.append(path)

  fig, ax = plt.subplots(figsize=(6, 4))
  ax2 = ax.twinx()
  for name, style in (("sif_full", "-"), ("dla", "--")):
    if name in hist:
      ax.plot(*_curve(hist[name], "oracle_I_D"), style, label=f"leakage ({name})")
      ax2.plot(*_curve(hist[name], "ess_model"), style, color="gray", label=f"ESS ({name})")
  ax.set_xlabel("step")
  ax.set_ylabel("oracle I_D (nats)")
  ax2.set_ylabel("ESS per batch")
  ax.legend(loc="upper left")
  ax2.legend(loc="upper right")
  ax.set_title(f"Fig. 2 analogue ({key_setting})")
  save(fig, "fig2_leakage_ess.png")

  names = [n for n in ("dla", "sif_full", "sif_dr", "sif_exp", "sif_dec") if n in rows and "propensity_mae" in rows[n]]
  fig, ax = plt.subplots(figsize=(6, 4))
  ax.bar(
    names, [rows[n]["propensity_mae"]["mean"] for n in names], yerr=[rows[n]["propensity_mae"]["std"] for n in names]
  )
  ax.set_ylabel("exposure-propensity MAE_rel")
  ax.set_title("Fig. 3 analogue")
  save(fig, "fig3_propensity_mae.png")

  names = [n for n in ("dla", "sif_exp", "sif_dec", "sif_full", "sif_dr") if n in rows]
  fig, ax = plt.subplots(figsize=(6, 4))
  ax.bar(names, [rows[n]["ndcg@10"]["mean"] for n in names], yerr=[rows[n]["ndcg@10"]["std"] for n in names])
  lo = min(rows[n]["ndcg@10"]["mean"] for n in names)
  ax.set_ylim(lo - 0.05, None)
  ax.set_ylabel("NDCG@10")
  ax.set_title("Fig. 4 analogue")
  save(fig, "fig4_ndcg_ablation.png")

  fig, ax = plt.subplots(figsize=(6, 4))
  for name in ("sif_full", "sif_dr", "dla", "sif_dec"):
    if name in hist:
      ax.plot(*_curve(hist[name], "oracle_I_D"), label=name)
  ax.set_xlabel("step")
  ax.set_ylabel("oracle I_D (nats)")
  ax.legend()
  ax.set_title("Fig. 5 analogue")
  save(fig, "fig5_leakage_steps.png")
  return paths


def second_half_change(history, key):
  """Per-seed change of ``train/<key>`` from the logged step nearest half the run to the last one.

  "Flat" in T7 (DLA's leakage, Fig. 5) read as: the change over the second half
  of training, with its seed-level 90% interval, next to the level.

  >>> h = [{"step": s, "train/x": [s / 10, s / 10 + 1]} for s in (10, 20, 30, 40)]
  >>> r = second_half_change(h, "x")
  >>> r["steps"], r["values"], r["change"]["mean"]
  ([20, 40], [2.5, 4.5], 2.0)
  """
  rows = [h for h in history if f"train/{key}" in h]
  if len(rows) < 2:
    return None
  last = rows[-1]
  mid = min(rows[:-1], key=lambda h: abs(h["step"] - last["step"] / 2))
  a, b = np.asarray(mid[f"train/{key}"], float), np.asarray(last[f"train/{key}"], float)
  return {
    "steps": [int(mid["step"]), int(last["step"])],
    "values": [float(a.mean()), float(b.mean())],
    "change": summarize(b - a),
  }


def t7_checks(t7, histories, alpha_key, position_key):
  """T7/T8 claims as numbers."""
  out = {}
  rows = t7.get(alpha_key, {})
  if "sif_dec" in rows and "dla" in rows:
    out["sif_dec_minus_dla_ndcg@10"] = rows["sif_dec"]["ndcg@10"]["mean"] - rows["dla"]["ndcg@10"]["mean"]
  if "sif_exp" in rows and "dla" in rows:
    out["sif_exp_mae"] = rows["sif_exp"]["propensity_mae"]["mean"]
    out["dla_mae"] = rows["dla"]["propensity_mae"]["mean"]
  for name in ("sif_exp", "sif_dec", "sif_full"):
    if name in rows and "exposure_slope_abs" in rows[name]:
      out[f"{name}_exposure_slope_abs"] = rows[name]["exposure_slope_abs"]["mean"]
  hist = histories.get(alpha_key, {})
  for name in ("sif_dec", "sif_full", "dla"):
    if name in hist:
      _, v = _curve(hist[name], "oracle_I_D")
      if len(v) >= 2:
        out[f"{name}_oracle_I_D_first_last"] = (float(v[0]), float(v[-1]))
        out[f"{name}_oracle_I_D_second_half"] = second_half_change(hist[name], "oracle_I_D")
  prow = t7.get(position_key, {})
  for name in ("dla", "sif_exp", "sif_position"):
    if name in prow and "propensity_mae" in prow[name]:
      out[f"position_only_{name}_mae"] = prow[name]["propensity_mae"]["mean"]
  return out


# ----------------------------------------------------------------------------
# Everything.


def run(config, workdir):
  """Runs T6 and T7 as configured, prints tables, writes results.json, tables and figures."""
  validate_config(config, CONFIG_RULES)  # every value in range before any work
  os.makedirs(workdir, exist_ok=True)
  t_start = time.perf_counter()
  enable_compilation_cache(config.get("compilation_cache_dir", ""), workdir)
  data = load_data(config)
  report = []
  settings = [("position", 0.0)] if config.position_setting else []
  settings += [("trust", float(a)) for a in config.alphas]
  run_t6_cells = config.t6.enabled and config.data.source == "toy"
  progress = Progress(  # one cell per T6 alpha, per fitted T8 method and display, per fitted T7 method and setting
    "sif",
    total=(len(config.t6.alphas) if run_t6_cells else 0)
    + (len(config.t8.displays) * len(config.t8.methods) if config.t8.enabled else 0)
    + len(settings) * len(config.methods),
    start=t_start,
  )
  t6 = {}
  if run_t6_cells:
    for alpha in config.t6.alphas:
      rows = run_t6(config, data, alpha)
      progress.done(f"T6 alpha={alpha:g}: {len(rows)} variants")
      t6[f"alpha={alpha:g}"] = {"rows": rows, "checks": t6_checks(rows)}
      table = markdown_table(rows, ["ndcg@10", "leakage_(k,y)", "leakage_(k)"], row_header="variant", precision=4)
      report.append(
        f"### T6 (oracle mechanism, population clicks), alpha = {alpha:g}\n\n{table}\n\n"
        f"checks: {json.dumps(t6_checks(rows), default=float)}\n"
      )
      logging.info(report[-1])
  t8 = {}
  if config.t8.enabled:
    t8 = run_t8(config, data, progress=progress)
    for dkey, block in t8.items():
      cols = ["ndcg@10", "propensity_mae", "propensity_mae_final", "steps_to_mae<0.05"]
      cell = lambda r, c: ("never" if r[c] is None else r[c]) if c in r else "-"
      table = markdown_table({n: {c: cell(r, c) for c in cols} for n, r in block["rows"].items()}, cols, precision=4)
      report.append(f"### T8 (position-only PBM, {config.t8.steps} steps) [{dkey}]\n\n{table}\n")
      logging.info(report[-1])
  results, histories, fits = {}, {}, {}
  for setting, alpha in settings:
    key = f"setting={setting}/alpha={alpha:g}"
    rows, hist = run_t7(config, data, setting, alpha, fits=fits, progress=progress)
    results[key], histories[key] = rows, hist
    cols = list(METRICS) + ["leakage_d", "propensity_mae", "propensity_mae_final"]
    table = markdown_table({n: {c: r.get(c, "-") for c in cols} for n, r in rows.items()}, cols, precision=4)
    title = "Table I analogue (position-only)" if setting == "position" else f"Table II/III analogue, alpha = {alpha:g}"
    report.append(f"### {title} [{key}]\n\n{table}\n")
    logging.info(report[-1])
  if results:
    t3 = {
      a: {n: results[f"setting=trust/alpha={a:g}"][n]["ndcg@10"] for n in results[f"setting=trust/alpha={a:g}"]}
      for a in config.alphas
    }
    table3 = markdown_table(
      {n: {f"alpha={a:g}": t3[a][n] for a in config.alphas} for n in config.methods},
      [f"alpha={a:g}" for a in config.alphas],
      precision=4,
    )
    report.append(f"### Table III analogue (NDCG@10 by trust strength)\n\n{table3}\n")
    logging.info(report[-1])
  fig_key = f"setting=trust/alpha={config.figure_alpha:g}"
  figures = write_figures(workdir, results, histories, fig_key) if fig_key in results else []
  checks = t7_checks(results, histories, fig_key, "setting=position/alpha=0")
  for dkey, block in t8.items():
    for name, row in block["rows"].items():
      if "propensity_mae_final" in row:
        checks[f"t8/{dkey}/{name}"] = {
          "mae_final": row["propensity_mae_final"]["mean"],
          "steps_to_mae<0.05": row["steps_to_mae<0.05"],
        }
  report.append(f"### T7/T8 checks\n\n{json.dumps(checks, default=float, indent=1)}\n")
  logging.info(report[-1])
  elapsed = time.perf_counter() - t_start
  report.append(f"total wall time: {elapsed:.1f} s\n")
  logging.info(report[-1])
  payload = {
    **results,
    "t6": t6,
    "t8": t8,
    "checks": checks,
    "seconds": elapsed,
    "histories": {k: {n: h for n, h in v.items()} for k, v in histories.items()},
  }
  write_results(workdir, payload, table="\n".join(report), fits=fits)
  return payload, figures
