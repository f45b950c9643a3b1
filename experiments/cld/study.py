r"""CLD study (spec-cld 2.10, 8, 10): Tables 2/3 analogues and the sweeps of Figures 3-6.

Every grid point simulates one fixed top-k log (aggregated counts), trains
each method with :func:`ultr_jax.train.fit` (seeds vmapped, ``click_fn=None``)
and evaluates NDCG@1, NDCG@3 and MAP on the test split (binary labels,
every candidate document). RankAgg is the Borda count of the point's
trained IPS and Heckman-rank rankers (no retraining); the Oracle does not
depend on the log and is trained once. ``results.json`` maps ``table2``,
``table2_eta0.1`` and every point ``k=../eta=../noise=../sessions=..[/assumed_eta=..]``
to ``{method: {metric: {"mean", "std", "ci90"}}}``; ``orderings`` holds the
acceptance comparisons as seed-level differences with 90% t-intervals.
"""

import os
import sys
import time

import jax
import ml_collections
import numpy as np

from ultr_jax import data as data_lib
from ultr_jax import simulation
from ultr_jax.train import evaluate, fit, get_method, summarize, write_results

METRICS = ("ndcg@1", "ndcg@3", "map")
ALL_METHODS = ("naive", "ips", "heckman_rank", "rank_agg", "cld", "cld_n", "cld_pair", "cld_pair_l", "oracle")
PROPENSITY_METHODS = ("ips", "rank_agg", "cld", "cld_n", "cld_pair", "cld_pair_l")


def point_key(k, eta, noise, sessions, assumed_eta=None):
  """``k=5/eta=1.0/noise=0.1/sessions=100000`` (+ ``/assumed_eta=..`` when misspecified).

  >>> point_key(5, 1, 0.1, 1e5)
  'k=5/eta=1.0/noise=0.1/sessions=100000'
  """
  key = f"k={int(k)}/eta={float(eta)}/noise={float(noise)}/sessions={int(sessions)}"
  if assumed_eta is not None and float(assumed_eta) != float(eta):
    key += f"/assumed_eta={float(assumed_eta)}"
  return key


def grid_points(config):
  """The de-duplicated grid: ``{key: {"params", "methods", "tags"}}`` (tests in test_cld_methods.py)."""
  base = dict(config.table2)
  points = {}

  def add(tag, methods, **over):
    p = {**base, **over}
    p.setdefault("assumed_eta", p["eta"])
    key = point_key(p["k"], p["eta"], p["noise"], p["sessions"], p["assumed_eta"])
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
      add(f"misspec/k={int(k)}", mis_methods + (["heckman_rank"] if "rank_agg" in mis_methods else []),
          k=int(k), assumed_eta=float(a))
  return points


def load_data(config):
  """Synthetic (default) or SVMlight ``train/valid/test`` files, production-ordered and binarised."""
  if config.data.path:
    paths = [os.path.join(config.data.path, f) for f in config.data.files]
    splits = data_lib.Splits(*(data_lib.load_svmlight(p, max_label=4) for p in paths))
    splits = data_lib.Splits(*(data_lib.drop_queries_without_relevant(ds) for ds in splits))  # spec 2.2
    stats = data_lib.fit_normalizer([splits.train], "minmax")  # A18: fit on train
    splits = data_lib.Splits(*(data_lib.normalize_features(ds, method="minmax", stats=stats) for ds in splits))
    num_hidden = 0
  else:
    d = config.data
    splits = data_lib.make_synthetic(d.num_train, d.num_valid, d.num_test, list_size=d.list_size,
                                     num_features=d.num_features + d.num_hidden, seed=d.seed,
                                     noise=d.label_noise)
    num_hidden = d.num_hidden
  return simulation.topk_selection_data(splits, num_hidden=num_hidden, threshold=config.threshold,
                                        logging_fraction=config.logging_fraction, seed=config.data.seed)


def _train_config(config, steps=None):
  c = ml_collections.ConfigDict(config.train.to_dict())
  if steps is not None:
    c.steps = steps
  c.eval_every = c.steps
  c.progress = False
  return c


def _fit_eval(name, train, test, config, seeds, *, valid=None, method_name=None):
  method_config = ml_collections.ConfigDict({**config.method.to_dict(), **config.get("overrides", {}).get(name, {})})
  method = get_method(method_name or name, method_config, num_features=train.num_features,
                      list_size=train.list_size)
  result = fit(method, train, valid, config=_train_config(config), seeds=seeds, name=name)
  m = evaluate(method, result.params, test, cutoffs=(1, 3), batch_size=config.eval_batch_size)
  return method, result.params, {k: np.asarray(m[k]) for k in METRICS}


def run_point(params, methods, splits, config, seeds, oracle=None):
  """Trains and evaluates ``methods`` on one simulated log. Returns ``{method: {metric: [S]}}``."""
  train, valid, test = splits
  log = simulation.simulate_topk_log(
      jax.random.key(config.sim_seed), train.labels, where=train.where, k=params["k"],
      num_sessions=params["sessions"], eta=params["eta"], noise=params["noise"], threshold=1.0,
      assumed_eta=params["assumed_eta"])
  # Unseen queries stay (zero sessions -> zero weight / no clicks), so every point has the same
  # shapes and the persistent compilation cache serves all points after the first.
  full = simulation.topk_log_dataset(train, log, drop_unseen=False)
  topk = simulation.topk_log_dataset(train, log, shown_only=True, drop_unseen=False)
  out, trained = {}, {}
  for name in methods:
    if name == "rank_agg" or name == "oracle":
      continue
    ds = topk if name in ("naive", "ips") else full
    method, p, m = _fit_eval(name, ds, test, config, seeds)
    trained[name] = p
    out[name] = m
  if "rank_agg" in methods and "ips" in trained and "heckman_rank" in trained:
    agg = get_method("rank_agg", config.method, num_features=train.num_features, list_size=train.list_size)
    p = {"ips": trained["ips"], "heckman": trained["heckman_rank"]}
    m = evaluate(agg, p, test, cutoffs=(1, 3), batch_size=config.eval_batch_size)
    out["rank_agg"] = {k: np.asarray(m[k]) for k in METRICS}
  if oracle is not None:
    out["oracle"] = oracle
  return out


def _summ(per_method):
  return {m: {k: summarize(v) for k, v in metrics.items()} for m, metrics in per_method.items()}


def _diff(a, b, metric="ndcg@1"):
  return summarize(np.asarray(a[metric]) - np.asarray(b[metric]))


def orderings(raw, config):
  """The acceptance comparisons (seed-level differences, 90% t-intervals) with a verdict each."""
  out = {}
  base = dict(config.table2)

  def get(**over):
    p = {**base, **over}
    return raw.get(point_key(p["k"], p["eta"], p["noise"], p["sessions"], p.get("assumed_eta")))

  def verdict(s):
    lo, hi = s["mean"] - s["ci90"], s["mean"] + s["ci90"]
    return "holds" if lo > 0 else ("reversed" if hi < 0 else "not separated")

  for metric in METRICS:
    t2 = get()
    if t2 and "ips" in t2 and "naive" in t2:
      s = _diff(t2["ips"], t2["naive"], metric)
      out[f"ips_minus_naive/k=5,eta=1/{metric}"] = {**s, "verdict": verdict(s)}
    e0, e2 = get(eta=0.0, assumed_eta=0.0), get(eta=2.0, assumed_eta=2.0)
    if e0 and e2 and "heckman_rank" in e0:
      drops = {m: np.asarray(e0[m][metric]) - np.asarray(e2[m][metric]) for m in e0 if m in e2 and m != "oracle"}
      for m, d in drops.items():
        if m == "heckman_rank":
          continue
        s = summarize(drops["heckman_rank"] - d)
        out[f"heckman_drop_minus_{m}_drop/eta0->2/{metric}"] = {**s, "verdict": verdict(s)}
    k2, k10 = get(k=2), get(k=10)
    if k2 and k10 and "cld" in k2 and "ips" in k2:
      for c in ("cld", "cld_pair"):
        if c in k2:
          g2 = np.asarray(k2[c][metric]) - np.asarray(k2["ips"][metric])
          g10 = np.asarray(k10[c][metric]) - np.asarray(k10["ips"][metric])
          s = summarize(g2 - g10)
          out[f"{c}_gain_over_ips_k2_minus_k10/{metric}"] = {
              **s, "verdict": verdict(s), "gain_k2": summarize(g2), "gain_k10": summarize(g10)}
    for k in config.sweeps.misspec_k:
      ref = get(k=int(k))
      hi = get(k=int(k), assumed_eta=float(max(config.sweeps.assumed_eta)))
      if ref and hi and "ips" in hi and "cld" in hi:
        drop_ips = np.asarray(ref["ips"][metric]) - np.asarray(hi["ips"][metric])
        drop_cld = np.asarray(ref["cld"][metric]) - np.asarray(hi["cld"][metric])
        s = summarize(drop_ips - drop_cld)
        out[f"ips_drop_minus_cld_drop/k={int(k)},assumed_eta={max(config.sweeps.assumed_eta)}/{metric}"] = {
            **s, "verdict": verdict(s), "ips_drop": summarize(drop_ips), "cld_drop": summarize(drop_cld)}
  return out


def _plots(results, points, workdir, config):
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:  # pragma: no cover
    return []
  base = dict(config.table2)
  files = []
  sweeps = [("k", "k", {}), ("eta", "eta", {}), ("sessions", "sessions", {}), ("noise", "noise", {})]
  sweeps += [(f"misspec/k={int(k)}", "assumed_eta", {"k": int(k)}) for k in config.sweeps.misspec_k]
  for tag, axis, fixed in sweeps:
    keys = [(key, e["params"]) for key, e in points.items() if tag in e["tags"] or
            (tag.startswith("misspec") and e["params"]["k"] == fixed.get("k") and
             all(e["params"][a] == base[a] for a in ("eta", "noise", "sessions")))]
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
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    name = f"fig_{tag.replace('/', '_').replace('=', '')}.png"
    tmp = os.path.join(workdir, f".tmp-{name}")
    fig.savefig(tmp, dpi=90, format="png")
    os.replace(tmp, os.path.join(workdir, name))
    plt.close(fig)
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
  os.makedirs(workdir, exist_ok=True)
  t0 = time.perf_counter()
  if config.get("compilation_cache", True):
    # fit() builds fresh closures per call; identical HLO across grid points is compiled once.
    jax.config.update("jax_compilation_cache_dir", os.path.join(os.path.abspath(workdir), "jax_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  seeds = tuple(range(int(config.num_seeds)))
  splits, _ = load_data(config)
  points = grid_points(config)
  print(f"[cld] {len(points)} grid points, {splits.train.num_queries} train queries, "
        f"{splits.train.num_features} features", file=sys.stderr, flush=True)
  oracle = None
  if "oracle" in config.methods:
    _, _, oracle = _fit_eval("oracle", splits.train, splits.test, config, seeds, method_name="full_info")
  raw, results, timing = {}, {}, {}
  for key, entry in points.items():
    t = time.perf_counter()
    raw[key] = run_point(entry["params"], entry["methods"], splits, config, seeds, oracle)
    results[key] = _summ(raw[key])
    timing[key] = time.perf_counter() - t
    print(f"[cld] {key}: {timing[key]:.1f}s " + " ".join(
        f"{m}={results[key][m]['ndcg@1']['mean']:.3f}" for m in results[key]), file=sys.stderr, flush=True)
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
  table += "\n## Orderings (seed-level differences, 90% t-intervals)\n\n| comparison | mean | ci90 | verdict |\n|---|---|---|---|\n"
  table += "\n".join(f"| {k} | {v['mean']:+.4f} | {v['ci90']:.4f} | {v['verdict']} |"
                     for k, v in out["orderings"].items())
  table += "\n\n## All points\n\n" + _table(results, list(points))
  out["figures"] = _plots(results, points, workdir, config)
  write_results(workdir, out, table=table)
  print(f"[cld] done in {time.perf_counter() - t0:.1f}s -> {workdir}", file=sys.stderr, flush=True)
  return out
