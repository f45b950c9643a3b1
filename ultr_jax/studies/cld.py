r"""The CLD study (Zhao, Xu et al., "Unbiased Top-k Learning to Rank with Causal Likelihood Decomposition",
SIGIR-AP 2023, Sections 6-7): Tables 2/3 analogues and the sweeps of Figures 3-6.

Every grid point simulates one fixed top-k log (aggregated counts), trains
each method with :func:`ultr_jax.train.fit` (seeds vmapped, ``click_fn=None``)
and evaluates NDCG@1, NDCG@3 and MAP on the test split (binary labels,
every candidate document). RankAgg is the Borda count of the point's
trained IPS and Heckman-rank rankers (no retraining); the Oracle does not
depend on the log and is trained once per feature view. ``results.json`` maps
``table2``, ``table2_eta0.1`` and every point
``[hidden=H/]k=../eta=../noise=../sessions=..[/assumed_eta=..]`` to
``{method: {metric: {"mean", "std", "ci90"}}}``; the ``hidden=H/`` points
(the ``k_hidden`` sweep) hide the last ``H`` features from the learners
(selection on unobservables). ``orderings`` holds the four acceptance
comparisons as seed-level differences with 90% t-intervals and a boolean each.
"""

import os
import time

from absl import logging
import jax
import ml_collections
import numpy as np

from ultr_jax import data as data_lib
from ultr_jax import simulation
from ultr_jax._schema import validate_config
from ultr_jax.studies.configs.cld import (
  CONFIG_RULES as CONFIG_RULES,
  VARIANTS as VARIANTS,
  default_config as default_config,
)  # re-exported
from ultr_jax.studies.figures import save_figure
from ultr_jax.train import enable_compilation_cache, evaluate, fit, get_method, shared_method_configs, summarize
from ultr_jax.train import write_results
from ultr_jax.studies._progress import Progress

METRICS = ("ndcg@1", "ndcg@3", "map")
ALL_METHODS = ("naive", "ips", "heckman_rank", "rank_agg", "cld", "cld_n", "cld_pair", "cld_pair_l", "oracle")
PROPENSITY_METHODS = ("ips", "rank_agg", "cld", "cld_n", "cld_pair", "cld_pair_l")


def point_key(k, eta, noise, sessions, assumed_eta=None, hidden=None):
  """``k=5/eta=1.0/noise=0.1/sessions=100000`` (+ ``/assumed_eta=..`` when misspecified).

  ``hidden`` (the ``k_hidden`` sweep's hidden feature count) prefixes ``hidden=H/``.

  >>> point_key(5, 1, 0.1, 1e5)
  'k=5/eta=1.0/noise=0.1/sessions=100000'
  >>> point_key(2, 1, 0.1, 1e5, hidden=4)
  'hidden=4/k=2/eta=1.0/noise=0.1/sessions=100000'
  """
  key = f"k={int(k)}/eta={float(eta)}/noise={float(noise)}/sessions={int(sessions)}"
  if assumed_eta is not None and float(assumed_eta) != float(eta):
    key += f"/assumed_eta={float(assumed_eta)}"
  if hidden is not None:
    key = f"hidden={int(hidden)}/{key}"
  return key


def grid_points(config):
  """The de-duplicated grid: ``{key: {"params", "methods", "tags"}}`` (tests in test_cld_methods.py).

  ``params["hidden"]`` is ``None`` on the main grid (the learners see the
  features of ``config.data``) and ``data.num_hidden_sweep`` on the
  ``k_hidden`` sweep, whose points come last.
  """
  base = {**dict(config.table2), "hidden": None}
  points = {}

  def add(tag, methods, **over):
    p = {**base, **over}
    p.setdefault("assumed_eta", p["eta"])
    key = point_key(p["k"], p["eta"], p["noise"], p["sessions"], p["assumed_eta"], p["hidden"])
    entry = points.setdefault(key, {"params": p, "methods": [], "tags": []})
    entry["methods"] += [m for m in methods if m not in entry["methods"]]
    entry["tags"].append(tag)

  methods = [m for m in config.methods if m != "oracle"]
  add("table2", methods)
  for eta in config.table2_etas:
    add(f"table2/eta={float(eta)}", methods, eta=float(eta), assumed_eta=float(eta))
  for k in config.sweeps.k:
    add("k", methods, k=int(k))
  for eta in config.sweeps.eta:
    add("eta", methods, eta=float(eta), assumed_eta=float(eta))
  for n in config.sweeps.sessions:
    add("sessions", methods, sessions=int(n))
  for noise in config.sweeps.noise:
    add("noise", methods, noise=float(noise))
  mis_methods = [m for m in methods if m in config.misspec_methods]
  for k in config.sweeps.misspec_k:
    for a in config.sweeps.assumed_eta:
      add(
        f"misspec/k={int(k)}",
        mis_methods + (["heckman_rank"] if "rank_agg" in mis_methods else []),
        k=int(k),
        assumed_eta=float(a),
      )
  for k in config.sweeps.get("k_hidden", ()):
    add("k_hidden", methods, k=int(k), hidden=int(config.data.num_hidden_sweep))
  return points


def load_data(config):
  """Synthetic (default) or SVMlight ``train/valid/test`` files, production-ordered and binarised.

  Returns:
    ``(splits, main_hidden)``: ``splits`` carry every feature the production
    ranker saw (``data.num_features + data.num_hidden`` synthetic ones, all of a
    file's); the main grid's learners see all but the last ``main_hidden``
    (``data.num_hidden`` on synthetic data, 0 on files), see :func:`learner_view`.
  """
  if config.data.path:
    paths = [os.path.join(config.data.path, f) for f in config.data.files]
    splits = data_lib.Splits(*(data_lib.load_svmlight(p, max_label=4) for p in paths))
    splits = data_lib.Splits(*(data_lib.drop_queries_without_relevant(ds) for ds in splits))  # as the authors' code
    stats = data_lib.fit_normalizer([splits.train], "minmax")  # fit on train only (the code fits per split)
    splits = data_lib.Splits(*(data_lib.normalize_features(ds, method="minmax", stats=stats) for ds in splits))
    main_hidden = 0
  else:
    d = config.data
    splits = data_lib.make_synthetic(
      d.num_train,
      d.num_valid,
      d.num_test,
      list_size=d.list_size,
      num_features=d.num_features + d.num_hidden,
      seed=d.seed,
      noise=d.label_noise,
    )
    main_hidden = int(d.num_hidden)
  splits, _ = simulation.topk_selection_data(
    splits, num_hidden=0, threshold=config.threshold, logging_fraction=config.logging_fraction, seed=config.data.seed
  )
  return splits, main_hidden


def learner_view(splits, num_hidden):
  """``splits`` without their last ``num_hidden`` features (as ``topk_selection_data(num_hidden=..)``).

  The production order, labels and extras are unchanged: the hidden features
  drove relevance and selection but the learners do not see them.
  """
  if not 0 <= num_hidden < splits.train.num_features:
    raise ValueError(f"num_hidden must be in [0, {splits.train.num_features}), got {num_hidden}")
  if num_hidden == 0:
    return splits
  f = splits.train.num_features - num_hidden
  return data_lib.Splits(*(ds.replace(features=np.ascontiguousarray(ds.features[..., :f])) for ds in splits))


def _train_config(config, steps=None):
  c = ml_collections.ConfigDict(config.train.to_dict())
  if steps is not None:
    c.steps = steps
  c.eval_every = c.steps
  c.progress = False
  return c


#: The registered method behind a study column that has another name.
_REGISTERED = {"oracle": "full_info"}


def method_configs(config) -> dict:
  """``{column: (registered method, its config)}`` for every column of ``config.methods``.

  ``config.method`` is one section for all of them: each method takes the fields of it that it declares
  (:func:`~ultr_jax.train.shared_method_configs`; a key no method declares is an error), then its
  ``config.overrides[column]`` (checked by :func:`~ultr_jax.train.get_method`).

  >>> c = ml_collections.ConfigDict({"methods": ("ips", "heckman_rank", "oracle"), "overrides": {"oracle": {"ranker":
  ...   "mlp"}}, "method": {"ranker": "linear", "heckman_outcome": "probit"}})
  >>> for column, (name, cfg) in method_configs(c).items():
  ...   print(column, name, cfg.to_dict())
  ips ips {'ranker': 'linear'}
  heckman_rank heckman_rank {'heckman_outcome': 'probit'}
  oracle full_info {'ranker': 'mlp'}
  """
  methods: tuple[str, ...] = tuple(config.methods)
  registered = {m: _REGISTERED.get(m, m) for m in methods}
  own = shared_method_configs(sorted(set(registered.values())), config.method)
  overrides = config.get("overrides", {})
  return {
    m: (name, ml_collections.ConfigDict({**own[name].to_dict(), **dict(overrides.get(m, {}))}))
    for m, name in registered.items()
  }


def _fit_eval(name, train, test, config, seeds, *, valid=None, fits=None, tag=""):
  method_name, method_config = method_configs(config)[name]
  method = get_method(method_name, method_config, num_features=train.num_features, list_size=train.list_size)
  result = fit(method, train, valid, config=_train_config(config), seeds=seeds, name=name)
  if fits is not None:  # for write_results: the run's diverged seeds
    fits[f"{tag}{name}"] = result
  m = evaluate(method, result.params, test, cutoffs=(1, 3), batch_size=config.eval_batch_size)
  return method, result.params, {k: np.asarray(m[k]) for k in METRICS}


def run_point(params, methods, splits, config, seeds, oracle=None, *, fits=None, tag=""):
  """Trains and evaluates ``methods`` on one simulated log. Returns ``{method: {metric: [S]}}``.

  ``fits``, when given, collects each fit's :class:`~ultr_jax.train.FitResult` under ``tag + method``."""
  train, valid, test = splits
  log = simulation.simulate_topk_log(
    jax.random.key(config.sim_seed),
    train.labels,
    where=train.where,
    k=params["k"],
    num_sessions=params["sessions"],
    eta=params["eta"],
    noise=params["noise"],
    threshold=1.0,
    assumed_eta=params["assumed_eta"],
  )
  # Unseen queries stay (zero sessions -> zero weight / no clicks), so every point has the same
  # shapes and the persistent compilation cache serves all points after the first.
  full = simulation.topk_log_dataset(train, log, drop_unseen=False)
  topk = simulation.topk_log_dataset(train, log, shown_only=True, drop_unseen=False)
  out, trained = {}, {}
  for name in methods:
    if name == "rank_agg" or name == "oracle":
      continue
    ds = topk if name in ("naive", "ips") else full
    method, p, m = _fit_eval(name, ds, test, config, seeds, fits=fits, tag=tag)
    trained[name] = p
    out[name] = m
  if "rank_agg" in methods and "ips" in trained and "heckman_rank" in trained:
    _, agg_config = method_configs(config)["rank_agg"]
    agg = get_method("rank_agg", agg_config, num_features=train.num_features, list_size=train.list_size)
    p = {"ips": trained["ips"], "heckman": trained["heckman_rank"]}
    m = evaluate(agg, p, test, cutoffs=(1, 3), batch_size=config.eval_batch_size)
    out["rank_agg"] = {k: np.asarray(m[k]) for k in METRICS}
  if oracle is not None:
    out["oracle"] = oracle
  return out


def _summ(per_method):
  return {m: {k: summarize(v) for k, v in metrics.items()} for m, metrics in per_method.items()}


ORDERINGS = (
  "ips_beats_naive",
  "heckman_falls_fastest",
  "cld_gain_larger_at_small_k",
  "underestimated_propensity_hurts_ips_more",
)


def _interval(diffs):
  """Seed-level differences (positive = the ordering holds) -> stats, 90% interval and verdict.

  >>> s = _interval([0.1, 0.2, 0.3])
  >>> s["holds"], s["verdict"], [round(v, 3) for v in s["interval"]]
  (True, 'holds', [0.031, 0.369])
  """
  s = summarize(diffs)
  lo, hi = s["mean"] - s["ci90"], s["mean"] + s["ci90"]
  verdict = "holds" if lo > 0 else ("reversed" if hi < 0 else "not separated")
  return {**s, "interval": [lo, hi], "holds": bool(lo > 0), "verdict": verdict}


def _entry(claim, grid, keys, raw, metric, diff_fn):
  """One ordering: ``diff_fn(points, metric) -> (per-seed diffs, extra info)`` on every metric.

  The top level carries ``metric``'s interval and boolean; ``by_metric`` all
  three. Missing points or methods give ``holds: None`` (``verdict: "missing"``).
  """
  out = {"claim": claim, "grid": grid, "points": list(keys), "metric": metric}
  pts = [raw.get(k) for k in keys]
  missing = [k for k, p in zip(keys, pts) if p is None]
  by_metric = {}
  if not missing:
    for m in METRICS:
      r = diff_fn(pts, m)
      if r is None:
        break
      by_metric[m] = {**_interval(r[0]), **r[1]}
  if missing or metric not in by_metric:
    why = missing or ([f"methods at {', '.join(keys)}"] if keys else ["no grid points configured"])
    return {**out, "holds": None, "verdict": "missing", "missing": why}
  return {**out, **by_metric[metric], "by_metric": by_metric}


def _drop_margin(pts, metric):
  """Heckman-rank's drop between two points minus the largest other drop, per seed."""
  lo, hi = pts
  drops = {m: np.asarray(lo[m][metric]) - np.asarray(hi[m][metric]) for m in lo if m in hi and m != "oracle"}
  if "heckman_rank" not in drops or len(drops) < 2:
    return None
  h = drops.pop("heckman_rank")
  margin = h - np.max(np.stack(list(drops.values())), axis=0)
  return margin, {
    "heckman_drop": summarize(h),
    "drops": {m: summarize(d) for m, d in drops.items()},
    "versus": {m: _interval(h - d) for m, d in drops.items()},
  }


def _gain_difference(pts, metric):
  """CLD's gain over IPS at the small k minus at the large k, per seed (CLD-pair for information)."""
  small, large = pts
  if any(m not in p for p in pts for m in ("cld", "ips")):
    return None
  gain = lambda p, c: np.asarray(p[c][metric]) - np.asarray(p["ips"][metric])
  info = {"gain_small_k": summarize(gain(small, "cld")), "gain_large_k": summarize(gain(large, "cld"))}
  if all("cld_pair" in p for p in pts):
    info["cld_pair"] = _interval(gain(small, "cld_pair") - gain(large, "cld_pair"))
  return gain(small, "cld") - gain(large, "cld"), info


def _misspec_margin(pts, metric, combos):
  """IPS's drop minus CLD's when the assumed eta is raised, per seed, minimum over ``combos``."""
  diffs, info = [], {}
  for (label, _), ref, mis in zip(combos, pts[0::2], pts[1::2]):
    if any(m not in p for p in (ref, mis) for m in ("ips", "cld")):
      return None
    d_ips = np.asarray(ref["ips"][metric]) - np.asarray(mis["ips"][metric])
    d_cld = np.asarray(ref["cld"][metric]) - np.asarray(mis["cld"][metric])
    diffs.append(d_ips - d_cld)
    info[label] = {**_interval(d_ips - d_cld), "ips_drop": summarize(d_ips), "cld_drop": summarize(d_cld)}
  return np.min(np.stack(diffs), axis=0), {"by_point": info}


def orderings(raw, config):
  """The issue's four acceptance orderings, as seed-level differences with 90% t-intervals.

  Each entry: ``claim``, ``grid`` (``visible`` or ``hidden=H``), the
  ``points`` it reads, ``metric`` (``config.orderings.metric``) with its
  ``mean``/``std``/``ci90``, ``interval`` ``[lo, hi]``, ``holds`` (``lo > 0``)
  and ``verdict``, plus ``by_metric`` for NDCG@1, NDCG@3 and MAP:

  1. ``ips_beats_naive``: IPS - Naive at the Table 2 point (visible grid).
  2. ``heckman_falls_fastest``: Heckman-rank's drop from ``orderings.etas[0]``
     to ``[1]`` minus the largest drop of any other method (per seed), so it
     holds only if Heckman-rank falls faster than every one; ``versus`` has
     the pairwise comparisons (visible grid).
  3. ``cld_gain_larger_at_small_k``: (CLD - IPS) at ``orderings.ks[0]``
     minus at ``ks[1]`` on the ``k_hidden`` sweep (selection on unobservables);
     ``visible`` holds the same on the visible k sweep, for information.
  4. ``underestimated_propensity_hurts_ips_more``: IPS's drop minus CLD's
     from the true eta to every assumed eta above it, at every
     ``sweeps.misspec_k``; the minimum over those per seed (visible grid).
  """
  base = dict(config.table2)
  oc = config.get("orderings", {})
  metric = oc.get("metric", "ndcg@1")
  eta_lo, eta_hi = (float(e) for e in oc.get("etas", (0.0, 2.0)))
  k_small, k_large = (int(k) for k in oc.get("ks", (2, 10)))
  n_hidden = int(config.data.get("num_hidden_sweep", 0))

  def key(hidden=None, **over):
    p = {**base, **over}
    return point_key(p["k"], p["eta"], p["noise"], p["sessions"], p.get("assumed_eta"), hidden)

  out = {}
  ips_naive = lambda pts, m: (
    None
    if any(x not in pts[0] for x in ("ips", "naive"))
    else (np.asarray(pts[0]["ips"][m]) - np.asarray(pts[0]["naive"][m]), {})
  )
  out["ips_beats_naive"] = _entry(
    f"IPS > Naive at k={base['k']}, eta={base['eta']}", "visible", [key()], raw, metric, ips_naive
  )
  out["heckman_falls_fastest"] = _entry(
    f"Heckman-rank falls fastest as eta rises {eta_lo} -> {eta_hi} (k={base['k']})",
    "visible",
    [key(eta=eta_lo, assumed_eta=eta_lo), key(eta=eta_hi, assumed_eta=eta_hi)],
    raw,
    metric,
    _drop_margin,
  )
  claim = f"CLD's gain over IPS is larger at k={k_small} than at k={k_large}"
  o3 = _entry(
    claim + f" ({n_hidden} features hidden)",
    f"hidden={n_hidden}",
    [key(n_hidden, k=k_small), key(n_hidden, k=k_large)],
    raw,
    metric,
    _gain_difference,
  )
  o3["visible"] = _entry(
    claim + " (all features visible; information)",
    "visible",
    [key(k=k_small), key(k=k_large)],
    raw,
    metric,
    _gain_difference,
  )
  out["cld_gain_larger_at_small_k"] = o3
  combos = [
    (f"k={int(k)},assumed_eta={float(a)}", (int(k), float(a)))
    for k in config.sweeps.misspec_k
    for a in config.sweeps.assumed_eta
    if float(a) > float(base["eta"])
  ]
  keys = [kk for _, (k, a) in combos for kk in (key(k=k), key(k=k, assumed_eta=a))]
  out["underestimated_propensity_hurts_ips_more"] = _entry(
    f"an assumed eta > {base['eta']} hurts IPS more than CLD ({', '.join(c for c, _ in combos)})",
    "visible",
    keys,
    raw,
    metric,
    lambda pts, m: _misspec_margin(pts, m, combos) if combos else None,
  )
  return out


def _ordering_rows(ords):
  """``(name, entry)`` pairs for the table and the log: the four, then ordering 3 on the visible grid."""
  rows = [(name, ords[name]) for name in ORDERINGS if name in ords]
  o3 = ords.get("cld_gain_larger_at_small_k", {})
  if "visible" in o3:
    rows.append(("cld_gain_larger_at_small_k (visible, information)", o3["visible"]))
  return rows


def _ordering_line(name, e):
  if e["holds"] is None:
    return f"{name} [{e['grid']}]: missing {e['missing']}"
  return (
    f"{name} [{e['grid']}] {e['metric']}: {e['mean']:+.4f} ± {e['ci90']:.4f} "
    f"[{e['interval'][0]:+.4f}, {e['interval'][1]:+.4f}] holds={e['holds']}"
  )


def _plots(results, points, workdir, config):
  try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:  # pragma: no cover
    return []
  base = dict(config.table2)
  files = []
  sweeps = [
    ("k", "k", {}),
    ("k_hidden", "k", {}),
    ("eta", "eta", {}),
    ("sessions", "sessions", {}),
    ("noise", "noise", {}),
  ]
  sweeps += [(f"misspec/k={int(k)}", "assumed_eta", {"k": int(k)}) for k in config.sweeps.misspec_k]
  for tag, axis, fixed in sweeps:
    keys = [
      (key, e["params"])
      for key, e in points.items()
      if tag in e["tags"]
      or (
        tag.startswith("misspec")
        and e["params"]["k"] == fixed.get("k")
        and e["params"]["hidden"] is None
        and all(e["params"][a] == base[a] for a in ("eta", "noise", "sessions"))
      )
    ]
    keys = sorted({k: p for k, p in keys}.items(), key=lambda kv: kv[1][axis])
    if len(keys) < 2:
      continue
    fig, axes = plt.subplots(1, len(METRICS), figsize=(5 * len(METRICS), 3.5))
    methods = sorted({m for key, _ in keys for m in results[key]})
    for ax, metric in zip(axes, METRICS):
      for m in methods:
        xs = [p[axis] for key, p in keys if m in results[key]]
        if len(xs) < 2:
          continue
        mean = np.array([results[key][m][metric]["mean"] for key, p in keys if m in results[key]])
        ci = np.array([results[key][m][metric]["ci90"] for key, p in keys if m in results[key]])
        ax.plot(xs, mean, marker="o", label=m)
        ax.fill_between(xs, mean - ci, mean + ci, alpha=0.2)
      ax.set_xlabel(axis)
      ax.set_ylabel(metric)
      if axis == "sessions":
        ax.set_xscale("log")
      else:  # ticks at the grid's values (k = 2, 3, 5, 10, 20), not between them
        ax.set_xticks(sorted({p[axis] for _, p in keys}))
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    name = f"fig_{tag.replace('/', '_').replace('=', '')}.png"
    save_figure(fig, os.path.join(workdir, name), dpi=90)
    files.append(name)
  return files


def _table(results, keys):
  lines = []
  for key in keys:
    if key not in results:
      continue
    lines += [f"### {key}", "", "| method | " + " | ".join(METRICS) + " |", "|---" * (len(METRICS) + 1) + "|"]
    for m in ALL_METHODS:
      if m in results[key]:
        cells = [f"{results[key][m][k]['mean']:.4f} ± {results[key][m][k]['ci90']:.4f}" for k in METRICS]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines.append("")
  return "\n".join(lines)


def run(config, workdir):
  """Runs the whole grid; writes ``results.json``, ``table.md`` and figures under ``workdir``."""
  validate_config(config, CONFIG_RULES)  # every value in range before any work
  os.makedirs(workdir, exist_ok=True)
  t0 = time.perf_counter()
  # fit() builds fresh closures per call; identical programs across grid points compile once.
  enable_compilation_cache(config.get("compilation_cache_dir", "jax_cache"), workdir)
  seeds = tuple(range(int(config.num_seeds)))
  method_configs(config)  # a key of config.method that no method declares stops here, before any training
  all_features, main_hidden = load_data(config)
  points = grid_points(config)
  views = {}  # hidden feature count -> (learner splits, oracle metrics), built on first use

  def view(hidden):
    n = main_hidden if hidden is None else hidden
    if n not in views:
      s = learner_view(all_features, n)
      oracle = None
      if "oracle" in config.methods:
        _, _, oracle = _fit_eval("oracle", s.train, s.test, config, seeds)
      views[n] = (s, oracle)
    return views[n]

  n_hidden_points = sum(e["params"]["hidden"] is not None for e in points.values())
  logging.info(
    f"[cld] {len(points)} grid points ({n_hidden_points} with {config.data.get('num_hidden_sweep', 0)} "
    f"features hidden), {all_features.train.num_queries} train queries, "
    f"{all_features.train.num_features - main_hidden} of {all_features.train.num_features} features "
    f"visible on the main grid"
  )
  raw, results, timing, fits = {}, {}, {}, {}
  progress = Progress("cld", total=len(points))
  for key, entry in points.items():
    t = time.perf_counter()
    splits, oracle = view(entry["params"]["hidden"])
    raw[key] = run_point(entry["params"], entry["methods"], splits, config, seeds, oracle, fits=fits, tag=f"{key}/")
    results[key] = _summ(raw[key])
    timing[key] = time.perf_counter() - t
    progress.done(
      f"{key} ({timing[key]:.1f}s) " + " ".join(f"{m}={results[key][m]['ndcg@1']['mean']:.3f}" for m in results[key])
    )
  base = dict(config.table2)
  t2 = point_key(base["k"], base["eta"], base["noise"], base["sessions"])
  out = {"table2": results[t2]}
  for eta in config.table2_etas:
    out[f"table2_eta{float(eta)}"] = results[point_key(base["k"], eta, base["noise"], base["sessions"])]
  out.update(results)
  out["orderings"] = orderings(raw, config)
  out["config"] = config.to_dict()
  out["seconds"] = {"total": time.perf_counter() - t0, **timing}
  keys = [t2] + [point_key(base["k"], e, base["noise"], base["sessions"]) for e in config.table2_etas]
  table = "## Table 2/3 analogues\n\n" + _table(results, list(dict.fromkeys(keys)))
  table += (
    "\n## Orderings (seed-level differences, 90% t-intervals)\n\n"
    "| ordering | grid | claim | metric | mean | ci90 | holds | verdict |\n|---|---|---|---|---|---|---|---|\n"
  )
  for name, e in _ordering_rows(out["orderings"]):
    stats = "| | |" if e["holds"] is None else f"| {e['mean']:+.4f} | {e['ci90']:.4f} |"
    table += f"| {name} | {e['grid']} | {e['claim']} | {e['metric']} {stats} {e['holds']} | {e['verdict']} |\n"
    logging.info(f"[cld] ordering {_ordering_line(name, e)}")
  table += "\n## All points\n\n" + _table(results, list(points))
  out["figures"] = _plots(results, points, workdir, config)
  write_results(workdir, out, table=table, fits=fits)
  logging.info(f"[cld] done in {time.perf_counter() - t0:.1f}s -> {workdir}")
  return out
