r"""The off-policy evaluation study's replicate logs, session by session against from their cells, side by side.

One (user, logging temperature, log size) cell of :mod:`ultr_jax.studies.ope` (the ``grid`` config's queries,
targets and estimators): ``--replicates`` replicate logs of ``--sessions`` sessions.

* **IPS family**: every model-free estimator on every replicate log, session by session (``_model_free_run``,
  the reference) and from the terms of every cell (query, ranking, click pattern) computed once per logging
  temperature (``_cells_run``; that one-off computation is timed apart).
* **Model-based** (``--model_replicates`` logs): a click model fitted in memory to the whole log
  (``simulation.fit_click_model`` with ``solver=simulation.LBFGS(...)``) and the direct method, doubly robust and
  cascade doubly robust on every session (the reference), against the fit to the log's sufficient statistics and the
  estimators on its distinct sessions, each counted.

Each side is run once to compile, then timed; prints both times, the ratio and the largest difference of the
estimates, with the machine's load.

  python benchmarks/ope_study_cells.py --sessions=100000 --replicates=20
"""

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax import simulation as sim
from ultr_jax.studies import ope


def _timed(fn):
  fn()  # compile
  start = time.perf_counter()
  out = jax.block_until_ready(fn())
  return time.perf_counter() - start, out


def _model_based_in_memory(config, queries, user, sessions, logits, keys, targets, table):
  """The reference: the in-memory fit and the estimators on every session."""
  arrays, scalars = ope._split_user(queries["users"][user])
  attraction = jnp.asarray(queries["attraction"])
  num_docs = int(config.num_queries) * int(config.list_size)
  out = []
  for key in keys[: int(config.model_replicates)]:
    log = ope._simulate(key, logits, attraction, arrays, user=user, scalars=scalars, num_sessions=sessions)
    for model in config.fitted_models:
      fit = sim.fit_click_model(
        model, {"doc_ids": log["doc_ids"], "clicks": log["clicks"]},
        solver=sim.LBFGS(max_iters=int(config.fit_max_iters)), num_docs=num_docs, l2=float(config.fit_l2),
        prior="zero",
      )  # fmt: skip
      names = tuple(config.model_estimators)
      out.append(
        ope._model_based_run(
          log, jnp.ones(sessions), fit.params, targets, table, model=model, names=names, settings=ope._settings(config)
        )
      )
  return np.stack([np.asarray(v) for v in out])


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sessions", type=int, default=100_000)
  parser.add_argument("--replicates", type=int, default=20)
  parser.add_argument("--model_replicates", type=int, default=2)
  parser.add_argument("--user", default="pbm")
  parser.add_argument("--temperature", type=float, default=1.0)
  args = parser.parse_args()
  config = ope.default_config("grid")
  with config.unlocked():
    config.num_replicates, config.model_replicates = args.replicates, args.model_replicates
  queries = ope.study_queries(config)
  targets = jnp.asarray(ope.target_scores(config, queries))
  logits = jnp.asarray(ope.logging_logits(queries["logging_scores"], args.temperature))
  names = ope._cell_names(config, args.sessions)
  table = ope.logging_table(logits, pairs=any(ope._reads_pairs(n) for n in names))
  keys = jax.random.split(jax.random.key(0), args.replicates)
  print(f"load {os.getloadavg()}; {args.replicates} replicate logs of {args.sessions} sessions, {args.user} users")
  start = time.perf_counter()
  parts = ope._temperature_parts(config, queries, targets, args.temperature)
  print(f"cell terms (once per logging temperature, compile included): {time.perf_counter() - start:.1f}s")
  run = lambda p: ope._model_free(config, queries, args.user, args.sessions, logits, keys, targets, table, p)  # noqa: E731
  t_ref, ref = _timed(lambda: run(None))
  t_new, new = _timed(lambda: run(parts))
  diff = max(float(np.max(np.abs(ref[n] - new[n]))) for n in ref)
  print(
    f"IPS family: session by session {t_ref:.1f}s, from the cells {t_new:.1f}s ({t_ref / t_new:.1f}x), |diff| {diff:.1e}"
  )
  mb = (config, queries, args.user, args.sessions, logits, keys, targets, table)
  t_ref, ref = _timed(lambda: _model_based_in_memory(*mb))
  t_new, new = _timed(lambda: ope._model_based(*mb))
  by_model = [np.stack([new[f"{n}[{m}]"] for n in config.model_estimators], 1) for m in config.fitted_models]
  new = np.stack(by_model, 1).reshape(ref.shape)  # [replicate, model, estimator, target, 3], as the reference
  diff = float(np.max(np.abs(ref - new)))
  print(
    f"model-based: in-memory fits, every session {t_ref:.1f}s; statistics fits, distinct sessions {t_new:.1f}s "
    f"({t_ref / t_new:.1f}x), |diff| {diff:.1e}; load {os.getloadavg()}"
  )


if __name__ == "__main__":
  main()
