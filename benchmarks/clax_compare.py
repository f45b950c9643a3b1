r"""Click-model fits side by side: ultr_jax against CLAX (``clax-models``) on the same generated log.

One log of ``--sessions`` training sessions x 10 ranks (plus validation and test splits of
``--heldout_fraction`` of that each) is generated here with :func:`ultr_jax.simulation.simulate_session_log`
(a noisy logging ranker, DBN clicks by default) and written once to an ``.npz`` both sides read. Per model
(PBM, UBM, DBN):

* **CLAX** runs in its own venv (``bash benchmarks/clax_venv.sh``; ``--clax_python``), one subprocess per model
  (``benchmarks/_clax_side.py``), with CLAX's experiment settings: ``optax.adamw(0.01)``, batches of 4096,
  up to 100 epochs with its ``Trainer``'s early stopping on the validation split. It returns its fit's wall time
  (compile included) and its conditional click probabilities on the test split.
* **ultr_jax**: :func:`ultr_jax.simulation.fit_click_model` with ``solver=sim.LBFGS()`` (in-memory L-BFGS, its
  defaults), wall time including compile, on the training split only. The streaming / sufficient-statistics fit
  (:data:`STREAM_FIT`: the same call on the split's batches with ``solver=sim.Statistics()``) is timed too, and
  with ``--validate`` the statistics fit whose prior precision ``fit_click_model(..., l2=PRIOR_GRID,
  validation=...)`` picks on the validation split (the split CLAX's early stopping reads): gathering, every fit of
  the grid and every validation pass timed; with ``--minibatch_epochs`` the fit by ``solver=sim.Minibatch(...)``
  with CLAX's optimiser and batch (Adam 0.01, 4096 sessions) for that many epochs.

Both sides' held-out conditional perplexity comes from the same function here,
:func:`ultr_jax.simulation.click_prediction_scores` (per-rank conditional perplexity averaged over ranks, as
:func:`ultr_jax.simulation.evaluate_click_model` defines it), fed each side's
:math:`P(C_{s,r} = 1 \mid c_{s,<r})` on the test split. ``truth`` is the generating model's own.

With ``--log=long_tail`` the log is :func:`ultr_jax.simulation.simulate_long_tail_log`'s instead (``--queries``
Zipf(``--zipf``) queries of ``--candidates`` documents, a noisy logging ranker showing 10: millions of distinct
query-document pairs, as in real click logs), and ``--minibatch_child`` times
:func:`ultr_jax.simulation.fit_click_model` with ``solver=sim.Minibatch(...)`` in a fresh process as CLAX's side is
(row-wise steps where they pay, ``--sparse``; compressed tables, ``--table``), each side reporting its peak RSS.

  bash benchmarks/clax_venv.sh                                  # once: /tmp/clax-venv
  python benchmarks/clax_compare.py                             # 10^6 sessions, pbm ubm dbn
  python benchmarks/clax_compare.py --sessions=10000000 --models=pbm --repeats=1
  python benchmarks/clax_compare.py --log=long_tail --queries=1000000 --models=dbn --skip_in_memory --skip_stream \
    --minibatch_child --minibatch_epochs=1 --clax_epochs=10
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np

from ultr_jax import simulation as sim

#: The streaming fit's side (``--skip_stream`` skips it): :func:`ultr_jax.simulation.fit_click_model` with
#: ``solver=sim.Statistics()`` on the training split as an iterable of session-batch dicts (``doc_ids``,
#: ``clicks``; ``--stream_batch`` sessions each): one pass to the sufficient statistics, then their fit.
STREAM_FIT = "fit_click_model Statistics (stream)"
#: The prior precisions ``--validate`` chooses among on the validation split (about a factor 2 apart).
PRIOR_GRID = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
HERE = os.path.dirname(os.path.abspath(__file__))


def peak_rss_mb() -> float:
  """This process's peak resident set (``VmHWM``; ``ru_maxrss`` would carry the parent's peak across the fork and
  exec of a subprocess)."""
  with open("/proc/self/status") as f:
    return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def generate(args, path):
  """Writes the shared log: ``train_/val_/test_query_doc_ids int32[S, L]``, ``..._clicks float32[S, L]``,
  ``num_docs``, and ``test_truth`` (the generating model's conditional click probabilities)."""
  rng = np.random.default_rng(args.seed)
  attraction = rng.beta(1.0, 3.0, size=(args.queries, 10)).astype(np.float32)
  heldout = max(1, int(args.sessions * args.heldout_fraction))
  total = args.sessions + 2 * heldout
  params = {"perseverance": 0.9, "satisfaction": rng.beta(2.0, 2.0, size=attraction.shape).astype(np.float32)}
  if args.generator != "dbn":
    params = {}
  out = {"num_docs": np.int64(attraction.size)}
  parts, chunk = [], 2_000_000  # generate in chunks to bound the generator's memory at 10^7 sessions
  for i, start in enumerate(range(0, total, chunk)):
    n = min(chunk, total - start)
    log = sim.simulate_session_log(
      jax.random.key(args.seed * 1000 + i), args.generator, attraction, num_sessions=n, **params
    )
    parts.append({k: np.asarray(log[k]) for k in ("doc_ids", "clicks", "conditional_click_prob")})
  ids = np.concatenate([p["doc_ids"] for p in parts]).astype(np.int32)
  clicks = np.concatenate([p["clicks"] for p in parts]).astype(np.float32)
  truth = np.concatenate([p["conditional_click_prob"] for p in parts])
  bounds = {
    "train": (0, args.sessions),
    "val": (args.sessions, args.sessions + heldout),
    "test": (total - heldout, total),
  }
  for split, (a, b) in bounds.items():
    out[f"{split}_query_doc_ids"], out[f"{split}_clicks"] = ids[a:b], clicks[a:b]
  out["test_truth"] = truth[total - heldout :].astype(np.float32)
  np.savez(path, **out)
  return out


def generate_long_tail(args, path):
  """The long-tail log (:func:`ultr_jax.simulation.simulate_long_tail_log`: ``--queries`` Zipf(``--zipf``)
  queries of ``--candidates`` documents each, a noisy logging ranker showing 10), in the layout of
  :func:`generate`; the held-out splits are other sessions of the same documents (the same key, batches numbered
  past the training split's: another key would draw other parameters under the same document ids)."""
  params = {"document_params": {"satisfaction": (2.0, 2.0)}, "perseverance": 0.9} if args.generator == "dbn" else {}
  heldout = max(1, int(args.sessions * args.heldout_fraction))
  out = {"num_docs": np.int64(args.queries * args.candidates)}
  batch = 500_000
  first = {"train": 0, "val": -(-args.sessions // batch)}
  first["test"] = first["val"] + -(-heldout // batch)
  for split, n in (("train", args.sessions), ("val", heldout), ("test", heldout)):
    batches = list(
      sim.simulate_long_tail_log(
        jax.random.key(args.seed),
        args.generator,
        first_batch=first[split],
        num_sessions=n,
        num_queries=args.queries,
        num_candidates=args.candidates,
        list_size=10,
        batch_size=batch,
        zipf_exponent=args.zipf,
        noise=args.noise,
        **params,
      )
    )
    out[f"{split}_query_doc_ids"] = np.concatenate([b["doc_ids"] for b in batches]).astype(np.int32)
    out[f"{split}_clicks"] = np.concatenate([b["clicks"] for b in batches]).astype(np.float32)
    if split == "test":
      out["test_truth"] = np.concatenate([b["conditional_click_prob"] for b in batches]).astype(np.float32)
  np.savez(path, **out)
  return out


def perplexity(conditional, clicks):
  """The shared formula: :func:`ultr_jax.simulation.click_prediction_scores`' conditional perplexity."""
  cond = np.clip(np.asarray(conditional, np.float64), 1e-7, 1 - 1e-7).astype(np.float32)
  return sim.click_prediction_scores(cond, cond, clicks)["perplexity"]


def run_clax(args, model, log_path, workdir):
  """One CLAX fit in its venv: (seconds, test conditional probabilities, info) or (None, None, error)."""
  out = os.path.join(workdir, f"clax_{model}.npz")
  env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
  env["JAX_PLATFORMS"] = os.environ.get("JAX_PLATFORMS", "cpu")
  cmd = [args.clax_python, os.path.join(HERE, "_clax_side.py"), "--log", log_path, "--model", model, "--out", out]
  cmd += ["--epochs", str(args.clax_epochs)]
  proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=workdir)
  if proc.returncode != 0:
    return None, None, {"error": proc.stderr.strip().splitlines()[-5:]}
  res = np.load(out)
  info = json.loads(proc.stdout.strip().splitlines()[-1])
  return float(res["fit_s"]), res["conditional"], info


def run_minibatch_child(args, model, log_path, workdir):
  """:func:`ultr_jax.simulation.fit_click_model` by ``sim.Minibatch`` in a fresh process (as CLAX's side: compile
  included, its own peak RSS): (seconds, test conditional probabilities, info) or (None, None, error)."""
  out = os.path.join(workdir, f"ultr_jax_{model}.npz")
  cmd = [sys.executable, os.path.abspath(__file__), "--child_fit", model, "--workdir", workdir, "--child_out", out]
  flags = (
    "minibatch_epochs",
    "minibatch_lr",
    "minibatch_schedule",
    "minibatch_batch",
    "l2",
    "sparse",
    "table",
    "prior",
  )
  flags += ("minibatch_optimizer",)
  for flag in flags + ("steps_per_call",):
    cmd += [f"--{flag}", str(getattr(args, flag))]
  proc = subprocess.run(cmd, capture_output=True, text=True)
  if proc.returncode != 0:
    return None, None, {"error": proc.stderr.strip().splitlines()[-5:]}
  res = np.load(out)
  return float(res["fit_s"]), res["conditional"], json.loads(proc.stdout.strip().splitlines()[-1])


def child_fit(args):
  """The child of :func:`run_minibatch_child`: reads the shared log, fits, writes the test predictions."""
  import optax  # noqa: PLC0415
  from ultr_jax.simulation.click_models import tables  # noqa: PLC0415

  log = np.load(os.path.join(args.workdir, "log.npz"))
  ids, clicks, num_docs = log["train_query_doc_ids"], log["train_clicks"], int(log["num_docs"])
  step = args.minibatch_batch
  chunks = [{"doc_ids": ids[i : i + step], "clicks": clicks[i : i + step]} for i in range(0, len(ids), step)]
  kind, _, size = args.table.partition(":")
  table = {
    "full": None,
    "hashed": lambda: {"attraction": tables.HashedTable(int(size)), "satisfaction": tables.HashedTable(int(size))},
    "qr": lambda: {
      "attraction": tables.QuotientRemainderTable(int(size)),
      "satisfaction": tables.QuotientRemainderTable(int(size)),
    },
  }[kind]
  m = sim.get_click_model(args.child_fit)
  table = {k: v for k, v in table().items() if k in ("attraction",) + m.item_params} if table else None
  sparse = {"auto": None, "true": True, "false": False}[args.sparse.lower()]
  lr = args.minibatch_lr
  if args.minibatch_schedule == "linear":  # to 0 at the last step: the late steps average the gradient noise
    lr = optax.linear_schedule(lr, 0.0, args.minibatch_epochs * len(chunks))
  t0 = time.perf_counter()
  fit = sim.fit_click_model(
    args.child_fit,
    chunks,
    solver=sim.Minibatch(
      optimizer=getattr(optax, args.minibatch_optimizer)(lr),
      epochs=args.minibatch_epochs,
      list_size=ids.shape[1],
      num_sessions=float(len(ids)),
      sparse=sparse,
      tables=table,
      steps_per_call=args.steps_per_call,
    ),
    num_docs=num_docs,
    l2=args.l2,
    prior=args.prior if args.prior not in (None, "None") else None,
  )
  jax.block_until_ready(fit.params)
  fit_s = time.perf_counter() - t0
  test_ids, test_clicks = log["test_query_doc_ids"], log["test_clicks"]
  cond = np.concatenate(
    [
      np.asarray(
        sim.click_model_predict(args.child_fit, fit.params, test_ids[i : i + 65536], test_clicks[i : i + 65536])[
          "conditional"
        ]
      )
      for i in range(0, len(test_ids), 65536)
    ]
  )
  np.savez(args.child_out, conditional=cond, fit_s=fit_s)
  rss = peak_rss_mb()
  print(json.dumps({"steps": fit.iterations, "peak_rss_mb": rss, "table": args.table, "sparse": args.sparse}))


def timed(fn):
  t0 = time.perf_counter()
  out = fn()
  jax.block_until_ready(out.params)
  return time.perf_counter() - t0, out


def in_memory_fit(model, ids, clicks, *, num_docs, l2, prior=None):
  """:func:`ultr_jax.simulation.fit_click_model` by in-memory L-BFGS on the ``[S, L]`` arrays (its defaults)."""
  return sim.fit_click_model(
    model, {"doc_ids": ids, "clicks": clicks}, solver=sim.LBFGS(), num_docs=num_docs, l2=l2, prior=prior
  )


def stream_fits(batch_size, validate=False, minibatch_epochs=0):
  """``(name, function)`` of the streaming fits, each wrapped to take ``(model, doc_ids, clicks,
  num_docs=...)``."""
  found = []
  if validate:

    def validated(model, ids, clicks, *, num_docs, l2, val=None):
      del l2  # chosen on the validation split
      chunks = [
        {"doc_ids": ids[i : i + batch_size], "clicks": clicks[i : i + batch_size]}
        for i in range(0, len(ids), batch_size)
      ]
      stats = sim.gather_click_statistics(model, chunks)
      fit = sim.fit_click_model(
        model, stats, solver=sim.Statistics(), num_docs=num_docs, l2=PRIOR_GRID, validation=[val]
      )
      scores = fit.perplexities
      print(f"  ({model} validation perplexity by l2: { ({k: round(v, 5) for k, v in scores.items()}) })")
      return fit

    found.append(("statistics, l2 by validation", validated))
  if minibatch_epochs:
    import optax  # noqa: PLC0415

    def minibatch(model, ids, clicks, *, num_docs, l2, val=None, prior=None):
      del val
      step = 4096  # CLAX's batch and learning rate: its way of fitting, ultr_jax's loop
      chunks = [{"doc_ids": ids[i : i + step], "clicks": clicks[i : i + step]} for i in range(0, len(ids), step)]
      return sim.fit_click_model(
        model,
        chunks,
        solver=sim.Minibatch(
          optimizer=optax.adam(0.01),
          epochs=minibatch_epochs,
          list_size=ids.shape[1],
          num_sessions=float(len(ids)),
        ),
        num_docs=num_docs,
        l2=l2,
        prior=prior or None,
      )

    found.append((f"minibatch Adam, {minibatch_epochs} epoch(s)", minibatch))

  def streamed(model, ids, clicks, **kwargs):
    chunks = [
      {"doc_ids": ids[i : i + batch_size], "clicks": clicks[i : i + batch_size]}
      for i in range(0, ids.shape[0], batch_size)
    ]
    return sim.fit_click_model(model, chunks, solver=sim.Statistics(), **kwargs)

  found.append((STREAM_FIT, streamed))
  return found


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sessions", type=int, default=1_000_000, help="training sessions")
  parser.add_argument("--models", default="pbm,ubm,dbn")
  parser.add_argument("--repeats", type=int, default=1, help="fits per side and model (best wall time kept)")
  parser.add_argument("--queries", type=int, default=10_000, help="queries of 10 documents each")
  parser.add_argument("--heldout_fraction", type=float, default=0.1, help="validation and test sessions each")
  parser.add_argument("--generator", default="dbn", help="the click model generating the log")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument(
    "--clax_python", default=os.path.join(os.environ.get("CLAX_VENV", "/tmp/clax-venv"), "bin/python")
  )
  parser.add_argument("--l2", type=float, default=1.0, help="ultr_jax's prior precision (fit_click_model's default)")
  parser.add_argument(
    "--prior", default=None, help="ultr_jax's prior centre (simulation.LOGIT_PRIORS; default each fit's)"
  )
  parser.add_argument("--stream_batch", type=int, default=100_000, help="sessions per batch of a streaming fit")
  parser.add_argument("--reuse_log", action="store_true", help="read --workdir's log.npz if there (same --sessions)")
  parser.add_argument("--validate", action="store_true", help="also time the statistics fit with l2 by validation")
  parser.add_argument(
    "--skip_stream", action="store_true", help="do not time the streaming statistics fit (STREAM_FIT)"
  )
  parser.add_argument(
    "--minibatch_epochs", type=int, default=0, help="also time the fit by sim.Minibatch (Adam 0.01, 4096 sessions)"
  )
  parser.add_argument("--log", default="small", choices=("small", "long_tail"), help="which generated log")
  parser.add_argument("--candidates", type=int, default=20, help="long_tail: documents per query")
  parser.add_argument("--zipf", type=float, default=1.1, help="long_tail: the queries' Zipf exponent")
  parser.add_argument("--noise", type=float, default=0.3, help="long_tail: the logging ranker's noise")
  parser.add_argument("--clax_epochs", type=int, default=100, help="CLAX's epoch cap (its early stopping inside)")
  parser.add_argument(
    "--minibatch_child",
    action="store_true",
    help="time the fit by sim.Minibatch in a fresh process (its own peak RSS; with --minibatch_epochs, lr, batch)",
  )
  parser.add_argument("--minibatch_lr", type=float, default=0.01, help="minibatch fit: Adam's step (CLAX's)")
  parser.add_argument("--minibatch_optimizer", default="adam", help="minibatch fit: an optax optimiser's name")
  parser.add_argument(
    "--minibatch_schedule", default="constant", choices=("constant", "linear"), help="minibatch fit: Adam's step"
  )
  parser.add_argument("--minibatch_batch", type=int, default=4096, help="minibatch fit: sessions per step (CLAX's)")
  parser.add_argument("--sparse", default="auto", help="minibatch fit: row-wise steps (auto, true, false)")
  parser.add_argument("--table", default="full", help="minibatch fit: full, hashed:<rows> or qr:<buckets>")
  parser.add_argument("--steps_per_call", type=int, default=16, help="minibatch fit: batches per jitted call")
  parser.add_argument("--child_fit", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--child_out", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--skip_clax", action="store_true")
  parser.add_argument("--skip_ultr_jax", action="store_true")
  parser.add_argument(
    "--skip_in_memory", action="store_true", help="time only the streaming fits, not the LBFGS fit on [S, L] arrays"
  )
  parser.add_argument("--workdir", default=None, help="where the shared log goes (default a temporary folder)")
  args = parser.parse_args()
  if args.child_fit:
    return child_fit(args)
  models = [m.strip() for m in args.models.split(",") if m.strip()]

  workdir = args.workdir or tempfile.mkdtemp(prefix="clax_compare_")
  os.makedirs(workdir, exist_ok=True)
  log_path = os.path.join(workdir, "log.npz")
  print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; load {os.getloadavg()}")
  print(f"command: {' '.join(sys.argv)}")
  print(f"ultr_jax side: {os.path.dirname(sim.__file__)}, jax {jax.__version__}, devices {jax.devices()}")
  t0 = time.perf_counter()
  how = "read" if args.reuse_log and os.path.exists(log_path) else "generate"
  if how == "read":
    log = dict(np.load(log_path))
    if log["train_clicks"].shape[0] != args.sessions:
      raise ValueError(f"{log_path} holds {log['train_clicks'].shape[0]} training sessions, not {args.sessions}")
  else:
    log = (generate_long_tail if args.log == "long_tail" else generate)(args, log_path)
  train_ids, train_clicks = log["train_query_doc_ids"], log["train_clicks"]
  test_ids, test_clicks = log["test_query_doc_ids"], log["test_clicks"]
  num_docs = int(log["num_docs"])
  pairs = len(np.unique(train_ids))
  print(
    f"log ({time.perf_counter() - t0:.0f} s to {how}, {log_path}; {args.log}, {pairs:,} distinct training "
    f"query-document pairs): {args.generator} clicks, "
    f"{train_ids.shape[0]} train / {log['val_clicks'].shape[0]} val / {test_ids.shape[0]} test sessions x "
    f"{train_ids.shape[1]} ranks, {num_docs} documents, {train_clicks.sum(1).mean():.2f} clicks per session; "
    f"truth's test perplexity {perplexity(log['test_truth'], test_clicks):.4f}"
  )
  in_process_minibatch = 0 if args.minibatch_child else args.minibatch_epochs
  extra = [] if args.skip_ultr_jax else stream_fits(args.stream_batch, args.validate, in_process_minibatch)
  val = {"doc_ids": log["val_query_doc_ids"], "clicks": log["val_clicks"]}
  print(f"streaming fits: {[n for n, _ in extra] or 'none'}")

  rows = []
  for model in models:
    if not args.skip_ultr_jax:
      sides = [] if args.skip_in_memory else [("ultr_jax fit_click_model LBFGS", in_memory_fit)]
      sides += [(f"ultr_jax {n}", f) for n, f in extra if not (args.skip_stream and n == STREAM_FIT)]
      for side, fn in sides:
        best, fit = None, None
        for _ in range(args.repeats):
          jax.clear_caches()  # compile included in every repeat, as on CLAX's side
          more = {"val": val} if "validation" in side else ({"prior": args.prior} if args.prior else {})
          t, fit = timed(lambda fn=fn: fn(model, train_ids, train_clicks, num_docs=num_docs, l2=args.l2, **more))
          best = t if best is None else min(best, t)
        cond = sim.click_model_predict(model, fit.params, test_ids, test_clicks)["conditional"]
        note = f"{getattr(fit, 'iterations', '?')} it, prior {more.get('prior', 'default')}"
        rows.append((model, side, best, perplexity(cond, test_clicks), note))
        print(f"  {model} {side}: {best:.1f} s, {args.sessions / best:,.0f} sessions/s, ppl {rows[-1][3]:.4f} ({note})")
    if args.minibatch_child and not args.skip_ultr_jax:
      t, cond, info = run_minibatch_child(args, model, log_path, workdir)
      side = (
        f"ultr_jax minibatch (fresh process, {args.minibatch_epochs} ep, batch {args.minibatch_batch}, "
        f"{args.minibatch_optimizer} {args.minibatch_lr} {args.minibatch_schedule}, l2 {args.l2}, {args.table}, "
        f"prior {args.prior or 'default'})"
      )
      if t is None:
        print(f"  {model} {side} failed: {info['error']}")
      else:
        note = f"{info['steps']} steps, sparse={info['sparse']}, peak RSS {info['peak_rss_mb']:.0f} MB"
        rows.append((model, side, t, perplexity(cond, test_clicks), note))
        print(f"  {model} {side}: {t:.1f} s, {args.sessions / t:,.0f} sessions/s, ppl {rows[-1][3]:.4f} ({note})")
    if not args.skip_clax:
      best, cond, info = None, None, {}
      for _ in range(args.repeats):
        t, c, info = run_clax(args, model, log_path, workdir)
        if t is None:
          break
        if best is None or t < best:
          best, cond = t, c
      if best is None:
        print(f"  {model} CLAX failed: {info['error']}")
        rows.append((model, "CLAX", float("nan"), float("nan"), "failed"))
      else:
        rows.append(
          (
            model,
            "CLAX",
            best,
            perplexity(cond, test_clicks),
            f"{info['epochs']} epochs; CLAX's own cond_ppl {info.get('clax_test_cond_ppl', float('nan')):.4f}; "
            f"peak RSS {info.get('peak_rss_mb', float('nan')):.0f} MB",
          )
        )
        print(f"  {model} CLAX: {best:.1f} s, {args.sessions / best:,.0f} sessions/s, ppl {rows[-1][3]:.4f} ({info})")
    sys.stdout.flush()

  print(f"\nload at the end {os.getloadavg()}")
  print("\n| model | side | fit wall time (s) | sessions/s | test cond. perplexity | note |")
  print("|---|---|---|---|---|---|")
  for model, side, t, ppl, note in rows:
    print(f"| {model} | {side} | {t:.1f} | {args.sessions / t:,.0f} | {ppl:.4f} | {note} |")


if __name__ == "__main__":
  main()
