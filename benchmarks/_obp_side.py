r"""The Open Bandit Pipeline's side of ``benchmarks/ope_obp.py``; runs in OBP's own venv (``benchmarks/obp_venv.sh``).

Reads the shared log (an ``.npz`` in OBP's flat slate layout: one row per (session, slot), sessions in order,
slots 0..L-1 within each) and runs OBP's four slate estimators on it with OBP's own input conventions
(``obp/ope/estimators_slate.py``):

* ``SlateStandardIPS``: ``pscore`` / ``evaluation_policy_pscore``, the probability of the whole ranking (the same
  value on every slot of a session);
* ``SlateIndependentIPS``: ``pscore_item_position`` / ``evaluation_policy_pscore_item_position``, the marginal
  probability that the logged item is at that slot;
* ``SlateRewardInteractionIPS``: ``pscore_cascade`` / ``evaluation_policy_pscore_cascade``, the probability of the
  logged prefix down to that slot;
* ``SlateCascadeDoublyRobust``: the cascade scores, plus ``q_hat`` (the fitted Q-function of every candidate at
  every slot given the logged prefix above it, ``[n * L * K]``) and ``evaluation_policy_action_dist`` (the target's
  choice probabilities of every candidate at every slot given the logged prefix, ``[n * L * K]``).

Each estimate is the sum over slots of ``reward * weight`` (the DR: OBP's per-slot correction), averaged over
sessions. The time of ``estimate_policy_value`` (its input checks included, as a user calls it) is measured once
per estimator. The bootstrap is measured twice: OBP's ``estimate_interval`` on the first ``--interval_sessions``
sessions (its per-slate Python loop, ``estimated_rewards[slate_id == slate].sum()`` for every slate, is quadratic
in the number of sessions, so it cannot finish on 10^6), and OBP's bootstrap core,
``obp.utils.estimate_confidence_interval_by_bootstrap``, on the per-session values of all sessions (what
``estimate_interval`` would run after that loop: OBP's best case). Writes a JSON of estimates and seconds.

  <obp-venv>/bin/python benchmarks/_obp_side.py --log log.npz --out obp.json --bootstrap 1000
"""

import argparse
import importlib.metadata as md
import json
import time

import numpy as np


def _estimators(len_list: int, n_unique_action: int) -> dict:
  from obp.ope import (  # noqa: PLC0415 - OBP lives in its own venv
    SlateCascadeDoublyRobust,
    SlateIndependentIPS,
    SlateRewardInteractionIPS,
    SlateStandardIPS,
  )

  return {
    "sips": SlateStandardIPS(len_list=len_list),
    "iips": SlateIndependentIPS(len_list=len_list),
    "rips": SlateRewardInteractionIPS(len_list=len_list),
    "cascade_dr": SlateCascadeDoublyRobust(len_list=len_list, n_unique_action=n_unique_action),
  }


def _inputs(log: dict, name: str, rows: slice, cells: slice) -> dict:
  """OBP's keyword arguments of estimator ``name`` on the rows ``rows`` (and Q-table cells ``cells``)."""
  common = {"slate_id": log["slate_id"][rows], "reward": log["reward"][rows], "position": log["position"][rows]}
  if name == "sips":
    return {**common, "pscore": log["pscore"][rows], "evaluation_policy_pscore": log["evaluation_policy_pscore"][rows]}
  if name == "iips":
    return {
      **common,
      "pscore_item_position": log["pscore_item_position"][rows],
      "evaluation_policy_pscore_item_position": log["evaluation_policy_pscore_item_position"][rows],
    }
  cascade = {
    **common,
    "pscore_cascade": log["pscore_cascade"][rows],
    "evaluation_policy_pscore_cascade": log["evaluation_policy_pscore_cascade"][rows],
  }
  if name == "rips":
    return cascade
  return {
    **cascade,
    "action": log["action"][rows],
    "q_hat": log["q_hat"][cells],
    "evaluation_policy_action_dist": log["evaluation_policy_action_dist"][cells],
  }


def _per_session(estimator, name: str, inputs: dict, len_list: int) -> np.ndarray:
  """OBP's per-slot estimated rewards (its own ``_estimate_round_rewards``), summed over each session's slots."""
  kwargs = {
    "reward": inputs["reward"],
    "position": inputs["position"],
    "behavior_policy_pscore": inputs[[k for k in inputs if k.startswith("pscore")][0]],
    "evaluation_policy_pscore": inputs[[k for k in inputs if k.startswith("evaluation_policy_pscore")][0]],
  }
  if name == "cascade_dr":
    estimator.n_rounds_ = inputs["slate_id"].shape[0] // len_list
    kwargs.update(
      action=inputs["action"],
      q_hat=inputs["q_hat"],
      evaluation_policy_action_dist=inputs["evaluation_policy_action_dist"],
    )
  return estimator._estimate_round_rewards(**kwargs).reshape(-1, len_list).sum(axis=1)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--log", required=True)
  parser.add_argument("--out", required=True)
  parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates")
  parser.add_argument("--interval_sessions", type=int, default=20000, help="sessions for estimate_interval")
  parser.add_argument("--estimators", default="sips,iips,rips,cascade_dr")
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()

  from obp.utils import estimate_confidence_interval_by_bootstrap  # noqa: PLC0415

  log = dict(np.load(args.log))
  len_list, n_unique_action = int(log["len_list"]), int(log["n_unique_action"])
  n = log["slate_id"].shape[0] // len_list
  estimators = _estimators(len_list, n_unique_action)
  out = {"obp": md.version("obp"), "numpy": md.version("numpy"), "pandas": md.version("pandas"), "sessions": n}
  out["estimates"], out["estimate_seconds"], out["bootstrap_seconds"], out["interval_seconds"] = {}, {}, {}, {}
  out["bootstrap"] = {}
  everything = (slice(None), slice(None))
  m = min(args.interval_sessions, n)
  head = (slice(0, m * len_list), slice(0, m * len_list * n_unique_action))
  for name in args.estimators.split(","):
    estimator = estimators[name]
    inputs = _inputs(log, name, *everything)
    t = time.perf_counter()
    value = estimator.estimate_policy_value(**inputs)
    out["estimate_seconds"][name] = time.perf_counter() - t
    out["estimates"][name] = float(value)
    # The bootstrap core on every session's value: OBP's best case at this size.
    per_session = _per_session(estimator, name, inputs, len_list)
    t = time.perf_counter()
    ci = estimate_confidence_interval_by_bootstrap(
      samples=per_session, alpha=0.1, n_bootstrap_samples=args.bootstrap, random_state=args.seed
    )
    out["bootstrap_seconds"][name] = time.perf_counter() - t
    out["bootstrap"][name] = {k: float(v) for k, v in ci.items()}
    # estimate_interval as a user calls it, on the first m sessions (its per-slate loop is quadratic in m).
    t = time.perf_counter()
    estimator.estimate_interval(
      **_inputs(log, name, *head), alpha=0.1, n_bootstrap_samples=args.bootstrap, random_state=args.seed
    )
    out["interval_seconds"][name] = time.perf_counter() - t
    print(
      f"[obp] {name}: {value:.6f}; estimate {out['estimate_seconds'][name]:.2f}s, bootstrap core x{args.bootstrap} "
      f"{out['bootstrap_seconds'][name]:.1f}s, estimate_interval on {m} sessions {out['interval_seconds'][name]:.1f}s",
      flush=True,
    )
  out["interval_sessions"] = m
  with open(args.out, "w", encoding="utf-8") as f:
    json.dump(out, f, indent=1)


if __name__ == "__main__":
  main()
