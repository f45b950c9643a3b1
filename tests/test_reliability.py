"""Issue 45's classes: each bad input is refused before any work with an error naming what is wrong.

(a) config values (one schema for ``train.fit`` and the studies), (b) labels, (c) degenerate data,
(d) run-state and side files, (e) conversions, (f) off-policy estimates and their intervals.
"""

import dataclasses
import os
import re
import socket

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ultr_jax import _checkpoint, _workdir, data, graph, metrics, studies, train
from ultr_jax import evaluation as ev

SPLITS = data.make_synthetic(num_train=8, num_valid=4, num_test=4, list_size=3, num_features=2)

# ----------------------------------------------------------------------------
# (a) Config values: train.fit checks the same declared ranges as the binaries, before any work.


@pytest.mark.parametrize(
  "field,value,allowed",
  [
    ("steps", -5, "an integer >= 1"),
    ("learning_rate", -0.1, "a number >= 0"),
    ("batch_size", 0, "an integer >= 1"),
    ("eval_every", -1, "an integer >= 0"),
    ("eval_batch_size", 0, "an integer >= 1"),
    ("max_to_keep", 0, "an integer >= 1"),
    ("progress", 1, "a bool"),
    ("learning_rate", float("nan"), "a number >= 0"),
  ],
)
def test_fit_refuses_a_value_out_of_range_before_any_work(field, value, allowed):
  method = train.get_method("naive", {"ranker": "linear"}, num_features=2, list_size=3)
  with pytest.raises(ValueError, match=re.escape(f"config.{field}: {value!r} is out of range; expected {allowed}")):
    train.fit(method, SPLITS.train, SPLITS.valid, config={field: value})


def test_the_studies_train_sections_use_the_same_declaration():
  rules = studies.get("lbd").CONFIG_RULES
  for field, rule in train.TRAIN_CONFIG_RULES.items():
    if f"train.{field}" in rules:
      assert rules[f"train.{field}"] is rule


def _study_config(name, **fields):
  config = studies.default_config(name, "smoke")
  config.unlock()
  for k, v in fields.items():
    config[k] = v
  return config


@pytest.mark.parametrize(
  "name,fields,message",
  [
    ("ope", {"estimators": ()}, "config.estimators: () is out of range; expected a sequence of at least 1 of"),
    (
      "click_models",
      {"fit_models": (), "ctr_models": ()},
      "config.fit_models and config.ctr_models are both empty: the study has nothing to do",
    ),
    ("ope", {"label_fractions": (0.0, 0.0)}, "config.label_fractions: (0.0, 0.0) is out of range"),
    ("click_models", {"label_fractions": (0.0, 0.0)}, "config.label_fractions: (0.0, 0.0) is out of range"),
  ],
)
def test_a_study_with_nothing_to_do_says_so(tmp_path, name, fields, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    studies.run(name, _study_config(name, **fields), str(tmp_path))
  assert not (tmp_path / "results.json").exists()


# ----------------------------------------------------------------------------
# (b) Labels: finite and non-negative where they enter a dataset or a metric; model selection never on NaN.


@pytest.mark.parametrize("value,shown", [(float("nan"), "nan"), (-1.0, "-1.0"), (float("inf"), "inf")])
def test_a_bad_label_is_refused_naming_its_list_and_position(value, shown):
  labels = SPLITS.valid.labels.copy()
  labels[2, 1] = value
  qid = SPLITS.valid.qid[2]
  with pytest.raises(ValueError, match=re.escape(f"RankingDataset.labels: list 2 (qid {qid}), position 1 is {shown}")):
    dataclasses.replace(SPLITS.valid, labels=labels)
  scores = jnp.asarray(SPLITS.valid.features[..., 0])
  for metric in (metrics.ndcg, metrics.dcg, metrics.err, metrics.mrr):
    with pytest.raises(ValueError, match=re.escape(f"metric labels: list 2, position 1 is {shown}")):
      metric(scores, jnp.asarray(labels), where=jnp.asarray(SPLITS.valid.where))


def test_a_bad_label_at_padding_is_not_read():
  labels, where = np.array([[1.0, -1.0]]), np.array([[True, False]])
  assert float(metrics.ndcg(jnp.array([[1.0, 0.0]]), labels, where=where)) == pytest.approx(1.0)


@pytest.mark.parametrize("diverged,refused", [((False, False), [1]), ((False, True), None), ((True, False), [1])])
def test_a_non_finite_selection_metric_is_refused_unless_the_seed_is_marked_diverged(diverged, refused):
  values, check = np.array([0.5, np.nan]), train.divergence.check_selection_metric
  if refused is None:
    check(values, "ndcg@10", seeds=(3, 4), diverged=np.array(diverged))
    return
  with pytest.raises(ValueError, match=re.escape("validation ndcg@10 is not finite for seed(s) [4]")):
    check(values, "ndcg@10", seeds=(3, 4), diverged=np.array(diverged))


@pytest.mark.slow
def test_model_selection_refuses_a_non_finite_validation_metric():
  features = SPLITS.valid.features.copy()
  features[1, 0, 0] = np.nan  # a NaN score on a valid item: that list's nDCG is NaN
  valid = dataclasses.replace(SPLITS.valid, features=features)
  method = train.get_method("naive", {"ranker": "linear"}, num_features=2, list_size=3)
  train_set = dataclasses.replace(SPLITS.train, extras={"clicks": (SPLITS.train.labels >= 2).astype(np.float32)})
  config = {"steps": 2, "batch_size": 4, "eval_every": 2, "progress": False, "steps_per_call": 1}
  with pytest.raises(ValueError, match=r"validation ndcg@10 is not finite for seed\(s\) \[0\]"):
    train.fit(method, train_set, valid, config=config)


# ----------------------------------------------------------------------------
# (c) Degenerate inputs: named before the work.


@pytest.mark.parametrize(
  "change,message",
  [
    ({"num_features": 0}, "the lists have no features: there is nothing to rank by"),
  ],
)
def test_the_baselines_study_names_degenerate_data(tmp_path, change, message):
  config = studies.default_config("baselines", "smoke")
  for k, v in change.items():
    config.data[k] = v
  with pytest.raises(ValueError, match=re.escape(f"config.data (source 'synthetic', the train split): {message}")):
    studies.run("baselines", config, str(tmp_path))


def test_a_split_without_positive_labels_is_named():
  from ultr_jax.studies import experiment  # noqa: PLC0415

  config = studies.default_config("baselines", "smoke")
  zero = dataclasses.replace(SPLITS.test, labels=np.zeros_like(SPLITS.test.labels))
  with pytest.raises(ValueError, match=re.escape("the test split): no document has a positive label")):
    experiment._check_not_degenerate(config.data, "test", zero, positives=True)


@pytest.mark.parametrize(  # ctr (biased) reads CTRs, not interventions; all_pairs' L-BFGS compiles for ~10 s
  "method", [pytest.param("all_pairs", marks=pytest.mark.slow), "pivot", "adjacent_chain"]
)
def test_lists_of_one_document_identify_the_pivot_only(method):
  items, clicks = np.array([[0], [1], [2]]), np.array([[1.0], [0.0], [1.0]])
  est = graph.harvest_propensities(items, np.zeros((3, 1), int), clicks, method=method)
  assert np.asarray(est.identified).tolist() == [True] and np.asarray(est.propensities).tolist() == [1.0]
  with pytest.raises(ValueError, match=r"factors \[1\] are not identified .*every list holds at most one document"):
    graph.harvest_propensities(items, np.array([[0], [1], [1]]), clicks, method=method)


@pytest.mark.parametrize(
  "arrow_type,qid",
  [("uint64", 2**64 - 1), ("uint64", 2**63), ("int64", -(2**63))],
)
def test_an_id_beyond_the_id_type_is_refused_never_wrapped(tmp_path, arrow_type, qid):
  pa = pytest.importorskip("pyarrow")
  feather = pytest.importorskip("pyarrow.feather")
  path = tmp_path / "page.feather"
  table = {"query_id": pa.array([qid] * 2, getattr(pa, arrow_type)()), "position": [1, 2], "click": [0, 1]}
  feather.write_feather(pa.table({**table, "label": [0, 1], "bm25": [0.1, 0.2]}), str(path))
  if arrow_type == "int64":  # in range: read as itself
    assert data.load_baidu_ultr(path, features=("bm25",)).qid.tolist() == [qid]
    return
  with pytest.raises(ValueError, match=re.escape(f"row 0, field 'query_id': {qid} is outside the int64 id range")):
    data.load_baidu_ultr(path, features=("bm25",))


# ----------------------------------------------------------------------------
# (d) Run-state and side files: one validating reader names the file, the expectation and the recovery.


def _write(path, content: bytes):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(content)
  return path


def _read_marker(tmp_path, content):
  _write(tmp_path / "IN_PROGRESS", content)
  return _workdir.holder(str(tmp_path))


def _read_propensities(tmp_path, content):
  from ultr_jax.studies import experiment  # noqa: PLC0415

  path = _write(tmp_path / "report.json", content)
  return experiment.with_position_propensities(SPLITS.train, str(path))


def _read_manifest(tmp_path, content):
  from ultr_jax.data import _shards  # noqa: PLC0415

  _write(tmp_path / "_manifest.json", content)
  return _shards.read_manifest(tmp_path)


def _read_statistics_meta(tmp_path, content):
  from ultr_jax.simulation.click_models import statistics  # noqa: PLC0415

  _write(tmp_path / "w.json", content)
  return statistics.open_partitioned_statistics(tmp_path)


SIDE_FILES = {
  "IN_PROGRESS": (_read_marker, "a workdir marker", "delete the file"),
  "report.json": (
    _read_propensities,
    "the identifiability check's report.json",
    "experiments/identifiability/check.py",
  ),
  "_manifest.json": (_read_manifest, "the manifest of a directory of ultr_jax shards", "overwrite=True"),
  "w.json": (_read_statistics_meta, "a statistics writer's metadata", "gather the statistics again"),
}
DAMAGE = {
  "garbage bytes": (b"\xff\xfe\x00garbage", "(not UTF-8)"),
  "truncated JSON": (b'{"propensities": {"all_pairs": [1.0, 0.', "got malformed JSON at line 1"),
  "a JSON list": (b"[1, 2]", "got a list"),
  "empty": (b"", "got an empty file"),
  "nested too deeply": (b"[" * 100_000, "got malformed JSON (nested too deeply to parse)"),  # was a RecursionError
}
CASES = [(f, d) for f in SIDE_FILES for d in DAMAGE if not (f == "IN_PROGRESS" and d != "garbage bytes")]


@pytest.mark.parametrize("name,damage", CASES, ids=[f"{f}:{d}" for f, d in CASES])
def test_a_damaged_side_file_names_itself_the_expectation_and_the_recovery(tmp_path, name, damage):
  read, what, recovery = SIDE_FILES[name]
  content, got = DAMAGE[damage]
  with pytest.raises(ValueError) as e:
    read(tmp_path, content)
  message = str(e.value)
  assert str(tmp_path / name) in message and what in message and got in message and recovery in message, message


@pytest.mark.parametrize("meta", [{"history": [{"step": "2"}]}, {"history": {"step": 2}}, {"diverged": "no"}])
def test_a_checkpoint_meta_of_the_wrong_shape_falls_back_to_the_older_step(tmp_path, meta):
  ckpt = train.Checkpointer(str(tmp_path / "ckpt"), max_to_keep=3)
  ckpt.save(1, {"w": np.ones(2, np.float32)}, {"fingerprint": {"hash": "a"}})
  ckpt.save(2, {"w": np.full(2, 2.0, np.float32)}, {"fingerprint": {"hash": "a"}, **meta})
  ckpt.wait()
  with pytest.raises(ValueError, match=r"2/meta/metadata: expected a checkpoint's meta .* restart=True"):
    _checkpoint.restore_checkpoint(ckpt, {"w": np.zeros(2)}, {"hash": "a"}, max_step=9, on_corrupt="raise")
  ckpt = train.Checkpointer(str(tmp_path / "ckpt"), max_to_keep=3)
  warnings = []
  step, state, _ = _checkpoint.restore_checkpoint(
    ckpt, {"w": np.zeros(2)}, {"hash": "a"}, max_step=9, warn=warnings.append
  )
  assert step == 1 and state["w"].tolist() == [1.0, 1.0]
  assert "2/meta/metadata: expected a checkpoint's meta" in warnings[0]
  ckpt.close()


# ----------------------------------------------------------------------------
# (e) Conversions: the workdir lock, incomplete directories that say so, a stream used after its log is closed.


def _tsv(path, num_sessions=6):
  rows = ["session_id\tquery_id\tdoc_id\tposition\tclick"]
  rows += [f"s{s}\tq{s % 2}\td{(s + i) % 5}\t{i + 1}\t{int(i == s % 3)}" for s in range(num_sessions) for i in range(3)]
  path.write_text("\n".join(rows) + "\n")
  return path


def _disk_full(monkeypatch):
  pq = pytest.importorskip("pyarrow.parquet")

  def write_table(self, *args, **kwargs):
    raise OSError(28, "No space left on device")

  monkeypatch.setattr(pq.ParquetWriter, "write_table", write_table)


def _second_writer(out):
  out.mkdir()  # a live process on this host (the test runner's parent) holds it
  (out / "IN_PROGRESS").write_text(f"pid {os.getppid()}\nhost {socket.gethostname()}\nstarted now\ncommand convert\n")


@pytest.mark.parametrize("failure", ["disk full", "interrupted"])
def test_a_failed_conversion_leaves_a_directory_every_reader_calls_incomplete(tmp_path, monkeypatch, failure):
  out = tmp_path / "shards"
  if failure == "disk full":
    _disk_full(monkeypatch)
    with pytest.raises(OSError, match=r"shards/part-00000\.parquet\.tmp: No space left on device"):
      data.convert_click_log(_tsv(tmp_path / "log.tsv"), out)
  else:
    with pytest.raises(KeyboardInterrupt), data._shards.converting(out):
      raise KeyboardInterrupt
  monkeypatch.undo()
  reason = "OSError: .*No space left on device" if failure == "disk full" else "KeyboardInterrupt"
  for read in (lambda: data.SessionStream(out, batch_size=2), lambda: data.session_shard_paths(out)):
    with pytest.raises(ValueError, match=rf"shards: an incomplete conversion of session shards: .*failed: {reason}"):
      read()
  data.convert_click_log(_tsv(tmp_path / "log.tsv"), out, overwrite=True)  # the restart the error names
  assert sum(b["where"].any(-1).sum() for b in data.SessionStream(out, batch_size=2, num_threads=0)) == 6


def test_a_second_writer_is_refused_naming_the_first(tmp_path):
  out = tmp_path / "shards"
  _second_writer(out)
  with pytest.raises(_workdir.WorkdirLockedError, match=rf"shards holds a run in progress: pid {os.getppid()}"):
    data.convert_click_log(_tsv(tmp_path / "log.tsv"), out)
  with pytest.raises(
    ValueError, match=rf"an incomplete conversion of session shards: a run in progress .*{os.getppid()}"
  ):
    data.session_shard_paths(out)
  assert sorted(p.name for p in out.iterdir()) == ["IN_PROGRESS"]  # the first writer's marker stands


def test_a_second_thread_of_the_process_is_refused_too(tmp_path):
  """The lock is re-entrant within a thread only: another thread of the same process (the marker names the same pid)
  is refused while the first holds the directory, and takes it once the first has released it."""
  import threading  # noqa: PLC0415

  out, errors = tmp_path / "shards", []
  holding, done = threading.Event(), threading.Event()

  def first():
    with _workdir.held(str(out)):
      holding.set()
      done.wait(30)

  thread = threading.Thread(target=first)
  thread.start()
  holding.wait(30)
  try:
    with pytest.raises(_workdir.WorkdirLockedError, match="another thread of this process"):
      data.convert_click_log(_tsv(tmp_path / "log.tsv"), out)
    assert "another thread of this process" in (_workdir.unfinished(str(out)) or "")
  except BaseException as e:  # noqa: BLE001 (re-raised below, after the thread ends)
    errors.append(e)
  done.set()
  thread.join()
  if errors:
    raise errors[0]
  assert sorted(p.name for p in out.iterdir()) == []  # the first thread's release removed its marker
  data.convert_click_log(_tsv(tmp_path / "log.tsv"), out)
  assert sum(b["where"].any(-1).sum() for b in data.SessionStream(out, batch_size=2, num_threads=0)) == 6


def test_bad_input_leaves_the_directory_as_it_was(tmp_path):
  out = tmp_path / "shards"
  with pytest.raises(ValueError, match="path: give at least one file"):
    data.convert_click_log([], out)
  assert not out.exists()


def test_a_stream_read_after_its_log_is_closed_says_so(tmp_path):
  log = data.open_click_log(_tsv(tmp_path / "log.tsv"), tmp_dir=tmp_path / "tmp")
  stream = log.stream(batch_size=2, num_threads=0)
  log.close()
  with pytest.raises(ValueError, match=r"the click log this stream reads was closed .*close\(\) removed the shards"):
    next(iter(stream))


# ----------------------------------------------------------------------------
# (f) Off-policy estimates: effective sample size, sessions with a non-zero weight, intervals that say so.

MATCHED = jnp.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])  # the target keeps sessions 0-1's display
CLICKS = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])


def test_standard_ips_reports_its_effective_sample_size_in_closed_form():
  logging = ev.plackett_luce_propensities(jnp.zeros((4, 2)), temperature=1.0)  # each ranking 1/2
  est = ev.evaluate("sips", MATCHED, CLICKS, logging=logging)
  # weights 2, 2, 0, 0: Kish's ESS (2 + 2)^2 / (4 + 4) = 2, two sessions with a non-zero weight
  assert float(est.effective_sample_size) == pytest.approx(2.0) and float(est.num_nonzero_weight) == 2.0
  assert float(est.num_sessions) == 4.0


@pytest.mark.parametrize("name", ["sips", "iips", "rips", pytest.param("pi", marks=pytest.mark.slow)])  # pi: ~5 s
def test_every_estimate_carries_its_support(name):
  logging = ev.plackett_luce_propensities(jnp.zeros((4, 2)), temperature=1.0, pairs=True)
  est = ev.evaluate(name, MATCHED, CLICKS, logging=logging)
  assert 0.0 < float(est.effective_sample_size) <= 4.0 + 1e-5
  assert 0.0 < float(est.num_nonzero_weight) <= 4.0


@pytest.mark.parametrize("interval", ["normal", "bootstrap"])
@pytest.mark.parametrize(
  "log,message",
  [
    ("one session", r"1 valid session\(s\) .*an interval needs at least 2"),
    ("all masked", r"0 valid session\(s\)"),
    ("no support", r"no session has a non-zero importance weight"),
  ],
)
def test_an_interval_without_the_sessions_it_needs_is_refused(interval, log, message):
  logging = ev.plackett_luce_propensities(jnp.zeros((4, 2)), temperature=1.0)
  where = jnp.ones((4, 2), bool)
  scores, clicks = MATCHED, CLICKS
  if log == "one session":
    where = where.at[1:].set(False)
  elif log == "all masked":
    where = jnp.zeros((4, 2), bool)
  else:
    scores = jnp.array([[0.0, 1.0]] * 4)  # a deterministic target...
    logging = ev.plackett_luce_propensities(jnp.array([[1.0, 0.0]] * 4), temperature=0.0)  # ...no log matches
  est = ev.standard_ips(scores, clicks, logging=logging, where=where)
  make = {
    "normal": ev.normal_interval,
    "bootstrap": lambda e: ev.bootstrap_interval(e, jax.random.key(0), num_replicates=8),
  }[interval]
  with pytest.raises(ValueError, match=message):
    make(est)
  if interval == "normal":  # under jit: flagged and unbounded, never zero-width
    flagged = jax.jit(ev.normal_interval)(est)
    assert not bool(flagged.trusted) and float(flagged.lower) == -np.inf and float(flagged.upper) == np.inf


def test_a_deterministic_logger_refuses_a_target_it_does_not_support():
  logging = ev.plackett_luce_propensities(jnp.array([[1.0, 0.0]] * 4), temperature=0.0)
  with pytest.raises(ValueError, match=r"scores: row 2: the logging policy is deterministic .* moves it"):
    ev.evaluate("iips", MATCHED, CLICKS, logging=logging)
  est = ev.evaluate("iips", jnp.array([[1.0, 0.0]] * 4), CLICKS, logging=logging)  # the logger itself: fine
  assert float(est.value) == pytest.approx(float(jnp.mean(jnp.sum(CLICKS, -1))))


@pytest.mark.parametrize(
  "call,message",
  [
    (lambda lg: ev.evaluate("sips", MATCHED, CLICKS, logging=lg, temperature=-1.0), "temperature=-1.0 is out of"),
    (lambda lg: ev.evaluate("sips", MATCHED, CLICKS, logging=lg, top_k=0), "top_k=0 is out of range"),
    (lambda lg: ev.standard_ips(MATCHED, CLICKS, logging=lg, temperature=-1.0), "temperature=-1.0 is out of"),
    (lambda lg: ev.target_scores_from_ranking(np.array([[5, 7]]), np.array([[7, 7]])), "ranks document 7 twice"),
    (
      lambda lg: ev.true_value("pbm", jnp.ones((4, 3)), MATCHED),
      r"true_value: attraction, scores and where must be one \[B, L\] shape",
    ),
  ],
  ids=["temperature", "top_k", "temperature (estimator)", "repeated document", "true_value sizes"],
)
def test_target_options_and_rankings_are_validated(call, message):
  logging = ev.plackett_luce_propensities(jnp.zeros((4, 2)), temperature=1.0)
  with pytest.raises(ValueError, match=re.escape(message) if "\\" not in message else message):
    call(logging)
