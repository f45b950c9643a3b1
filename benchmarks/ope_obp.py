r"""Off-policy estimators side by side: ultr_jax against the Open Bandit Pipeline (``obp`` 0.5.7) on the same log.

One log of ``--sessions`` sessions is generated here with ultr_jax's simulators (:mod:`ultr_jax.studies.ope`:
``--queries`` queries of ``--list_size`` documents, a noisy logging ranker shown by Plackett-Luce at
``--temperature``, clicks from ``--user``), together with the logging policy's propensities of the logged
rankings (:func:`ultr_jax.evaluation.plackett_luce_propensities`), the target's (the ideal ranker, deterministic,
or Plackett-Luce at ``--target_temperature``) and, for the cascade doubly robust estimator, a PBM
fitted to the log and its Q-table (:func:`ultr_jax.evaluation.cascade_dr_tables`). Both sides read the same
numbers from one ``.npz`` in OBP's flat slate layout (one row per session and slot; ``action`` = the display
index, ``n_unique_action = L``; ``reward`` = the clicks):

* **OBP** runs in its own venv (``bash benchmarks/obp_venv.sh``; ``--obp_python``) as a subprocess
  (``benchmarks/_obp_side.py``): ``SlateStandardIPS``, ``SlateIndependentIPS``, ``SlateRewardInteractionIPS``,
  ``SlateCascadeDoublyRobust``: one ``estimate_policy_value`` each (input checks included, as a user calls it),
  ``--bootstrap`` replicates of OBP's bootstrap core on the per-session values of all sessions (OBP's best case:
  its ``estimate_interval`` first sums each slate by a Python loop over slates that is quadratic in the number
  of sessions), and ``estimate_interval`` itself on ``--interval_sessions`` sessions.
* **ultr_jax**: the registry's ``sips``, ``iips``, ``rips`` and ``cascade_dr`` on the same inputs, jitted
  (``lower().compile()`` timed apart, then the first call, then the median of ``--repeats`` warm calls), and
  ``--bootstrap`` replicates of each (:func:`ultr_jax.evaluation.bootstrap_interval` of the estimate,
  ``--resampling`` Poisson or multinomial, one warm call after its compile): the replicates reweight the
  estimate's per-session terms, as OBP's core resamples its per-session values.

The estimates must agree to ``--tolerance`` (absolute; the script exits 1 otherwise). Prints both sides' times
and the ratios (OBP / ultr_jax), with the machine's load.

  bash benchmarks/obp_venv.sh                          # once: /tmp/obp-venv
  python benchmarks/ope_obp.py                         # 10^6 sessions, 1,000 bootstrap replicates
  python benchmarks/ope_obp.py --sessions=20000 --bootstrap=100   # a quick check
  python benchmarks/ope_obp.py --estimators=sips,iips,rips --repeats=3   # without cascade-DR's Q tables
"""

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax import evaluation as ev
from ultr_jax import simulation as sim
from ultr_jax.studies import ope as study

HERE = os.path.dirname(os.path.abspath(__file__))
ESTIMATORS = ("sips", "iips", "rips", "cascade_dr")


def generate(args) -> dict:
  """The log and every input both sides need (``jax`` arrays, display order)."""
  config = study.default_config()
  config.num_queries, config.list_size, config.seed = args.queries, args.list_size, args.seed
  config.users = (args.user,)
  config.user_params = {args.user: dict(study.default_config().user_params.get(args.user, {}))}
  queries = study.study_queries(config)
  log = jax.jit(lambda k: study.simulate_logs(k, queries, args.user, args.temperature, args.sessions))(
    jax.random.key(args.seed)
  )
  order, query = log["order"], log["query"]
  logging_scores = jnp.take_along_axis(jnp.asarray(queries["logging_scores"])[query], order, axis=-1)
  ideal = jnp.take_along_axis(jnp.asarray(queries["attraction"])[query], order, axis=-1)
  logging = ev.plackett_luce_propensities(logging_scores, temperature=args.temperature)
  target = ev.plackett_luce_propensities(ideal, temperature=args.target_temperature)
  inputs = {"scores": ideal, "clicks": log["clicks"], "doc_ids": log["doc_ids"], "logging": logging, "target": target}
  if "cascade_dr" in args.estimators.split(","):  # a fitted PBM and its Q tables
    num_docs = args.queries * args.list_size
    fit = sim.fit_click_model(
      "pbm", {"doc_ids": log["doc_ids"], "clicks": log["clicks"]}, solver=sim.LBFGS(), num_docs=num_docs
    )
    q_hat, action_dist = ev.cascade_dr_tables(
      ideal, doc_ids=log["doc_ids"], model="pbm", params=fit.params, temperature=args.target_temperature, **_key(args)
    )
    inputs.update(params=fit.params, q_hat=q_hat, action_dist=action_dist)
  return inputs


def _key(args) -> dict:
  """A Plackett-Luce target's Monte-Carlo completions in the cascade-DR tables: the same key on both sides."""
  return {"key": jax.random.key(args.seed + 1)} if args.target_temperature > 0 else {}


def write_npz(inputs: dict, path: str) -> None:
  """OBP's flat slate layout: ``[n * L]`` per slot, ``[n * L * L]`` for the Q-table and the target's choices."""
  clicks = np.asarray(inputs["clicks"], np.float64)
  n, size = clicks.shape
  logging, target = inputs["logging"], inputs["target"]
  flat = lambda x: np.asarray(x, np.float64).reshape(-1)  # noqa: E731
  per_slot = lambda x: np.repeat(np.asarray(x, np.float64), size)  # noqa: E731
  np.savez(
    path,
    len_list=size,
    n_unique_action=size,
    slate_id=np.repeat(np.arange(n), size),
    position=np.tile(np.arange(size), n),
    action=np.tile(np.arange(size), n),
    reward=flat(clicks),
    pscore=per_slot(logging.ranking),
    evaluation_policy_pscore=per_slot(target.ranking),
    pscore_item_position=flat(logging.item_position),
    evaluation_policy_pscore_item_position=flat(target.item_position),
    pscore_cascade=flat(logging.prefix),
    evaluation_policy_pscore_cascade=flat(target.prefix),
    **(
      {"q_hat": flat(inputs["q_hat"]), "evaluation_policy_action_dist": flat(inputs["action_dist"])}
      if "q_hat" in inputs
      else {}
    ),
  )


def ultr_jax_estimator(name: str, inputs: dict, args):
  """``session_weights -> Estimate`` of registry estimator ``name`` with the log bound."""
  spec = ev.get_estimator(name)
  available = {
    "logging": inputs["logging"],
    "doc_ids": inputs["doc_ids"],
    "model": "pbm",
    "params": inputs.get("params"),
  }
  kwargs = {k: available[k] for k in spec.inputs}
  if "model" in spec.inputs:
    kwargs.update(_key(args))
  return functools.partial(spec.fn, inputs["scores"], inputs["clicks"], temperature=args.target_temperature, **kwargs)


def time_ultr_jax(args, inputs: dict) -> dict:
  """Estimates, warm times (median of ``--repeats``) and compile times of each estimator, and the time of its
  ``--bootstrap`` replicates from the estimate (compiled apart, then one warm call)."""
  out = {"estimates": {}, "estimate_seconds": {}, "compile_seconds": {}, "first_call_seconds": {}}
  out.update(bootstrap_seconds={}, bootstrap={})
  jitted = {k: v for k, v in inputs.items() if k not in ("logging_scores",)}
  boot = jax.jit(
    lambda est, key: ev.bootstrap_interval(
      est, key, num_replicates=args.bootstrap, alpha=0.1, resampling=args.resampling, chunk_size=args.chunk_size
    )
  )
  for name in args.estimators.split(","):
    # The log goes in as arguments (as constants, XLA would fold the whole estimate at compile time).
    estimate = jax.jit(lambda x, name=name: ultr_jax_estimator(name, x, args)(session_weights=None))
    value = jax.jit(lambda x, name=name: ultr_jax_estimator(name, x, args)(session_weights=None).value)
    t = time.perf_counter()
    compiled = value.lower(jitted).compile()
    out["compile_seconds"][name] = time.perf_counter() - t
    t = time.perf_counter()
    v = compiled(jitted).block_until_ready()  # the first call also touches its buffers' memory first
    out["first_call_seconds"][name] = time.perf_counter() - t
    times = []
    for _ in range(args.repeats):
      t = time.perf_counter()
      compiled(jitted).block_until_ready()
      times.append(time.perf_counter() - t)
    out["estimates"][name], out["estimate_seconds"][name] = float(v), statistics.median(times)
    # The bootstrap from the estimate (its per-session terms), as OBP's core from its per-session values.
    est = jax.block_until_ready(estimate(jitted))
    boot(est, jax.random.key(1)).lower.block_until_ready()  # compile
    t = time.perf_counter()
    ci = boot(est, jax.random.key(2))
    ci.lower.block_until_ready()
    out["bootstrap_seconds"][name] = time.perf_counter() - t
    out["bootstrap"][name] = {"lower": float(ci.lower), "upper": float(ci.upper)}
    print(
      f"[ultr_jax] {name}: {float(v):.6f}; estimate {out['estimate_seconds'][name] * 1e3:.1f} ms "
      f"(compile {out['compile_seconds'][name]:.1f}s, first call {out['first_call_seconds'][name]:.1f}s), "
      f"bootstrap x{args.bootstrap} ({args.resampling}) "
      f"{out['bootstrap_seconds'][name]:.2f}s [{float(ci.lower):.5f}, {float(ci.upper):.5f}]",
      flush=True,
    )
  return out


def run_obp(args, path: str) -> dict:
  out_path = path + ".obp.json"
  cmd = [
    args.obp_python,
    os.path.join(HERE, "_obp_side.py"),
    "--log",
    path,
    "--out",
    out_path,
    "--bootstrap",
    str(args.bootstrap),
    "--interval_sessions",
    str(args.interval_sessions),
    "--estimators",
    args.estimators,
  ]
  subprocess.run(cmd, check=True)
  with open(out_path, encoding="utf-8") as f:
    return json.load(f)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--sessions", type=int, default=1_000_000)
  parser.add_argument("--queries", type=int, default=100)
  parser.add_argument("--list_size", type=int, default=5)
  parser.add_argument("--user", default="dbn")
  parser.add_argument("--temperature", type=float, default=1.0, help="the logging policy's Plackett-Luce temperature")
  parser.add_argument("--target_temperature", type=float, default=0.0, help="0: a deterministic target")
  parser.add_argument("--bootstrap", type=int, default=1000)
  parser.add_argument("--resampling", default="poisson", choices=("poisson", "multinomial"), help="ultr_jax's")
  parser.add_argument("--chunk_size", type=int, default=32, help="ultr_jax's bootstrap replicates vmapped at once")
  parser.add_argument("--estimators", default=",".join(ESTIMATORS), help="a subset of " + ",".join(ESTIMATORS))
  parser.add_argument("--interval_sessions", type=int, default=20000)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--tolerance", type=float, default=1e-5)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--obp_python", default="/tmp/obp-venv/bin/python")
  parser.add_argument("--skip_obp", action="store_true", help="time ultr_jax alone")
  args = parser.parse_args()
  print(
    f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()}, jax {jax.__version__}"
  )
  t = time.perf_counter()
  inputs = generate(args)
  print(
    f"log of {args.sessions} sessions x {args.list_size} ({args.user} users) generated in {time.perf_counter() - t:.0f}s"
  )
  ours = time_ultr_jax(args, inputs)
  if args.skip_obp:
    return 0
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "log.npz")
    write_npz(inputs, path)
    theirs = run_obp(args, path)
  print(f"load after: {os.getloadavg()}")
  worst = 0.0
  print(
    f"{'estimator':<12}{'ultr_jax':>12}{'obp':>12}{'|diff|':>10}{'est. x':>9}{'boot ultr_jax':>15}{'boot obp':>10}{'boot x':>8}"
  )
  names = args.estimators.split(",")
  for name in names:
    diff = abs(ours["estimates"][name] - theirs["estimates"][name])
    worst = max(worst, diff)
    print(
      f"{name:<12}{ours['estimates'][name]:>12.6f}{theirs['estimates'][name]:>12.6f}{diff:>10.1e}"
      f"{theirs['estimate_seconds'][name] / ours['estimate_seconds'][name]:>9.0f}"
      f"{ours['bootstrap_seconds'][name]:>14.2f}s{theirs['bootstrap_seconds'][name]:>9.1f}s"
      f"{theirs['bootstrap_seconds'][name] / ours['bootstrap_seconds'][name]:>8.1f}"
    )
  boot_ours, boot_theirs = sum(ours["bootstrap_seconds"].values()), sum(theirs["bootstrap_seconds"].values())
  print(
    f"bootstrap x{args.bootstrap}, all {len(names)}: ultr_jax {boot_ours:.1f}s, OBP's core {boot_theirs:.1f}s "
    f"({boot_theirs / boot_ours:.1f}x); OBP's estimate_interval on {theirs['interval_sessions']} sessions: "
    + ", ".join(f"{k} {v:.1f}s" for k, v in theirs["interval_seconds"].items())
  )
  print(f"largest |difference| {worst:.2e} (tolerance {args.tolerance:g})")
  return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
  sys.exit(main())
