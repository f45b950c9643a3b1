"""Click logs streamed into the binaries: ultr_jax.data.open_click_log, ClickLogRows, held_out_sessions, the click-model
study's click-log mode (ultr_jax.studies.click_models) and the IG check's (ultr_jax.studies.identifiability.click_log).

Every format (the delimited rows, raw Baidu-ULTR sessions, both Yandex layouts, Parquet session shards), given as a
file, a glob, a directory or a list: the streamed results equal the in-memory reader's; bad input is an error naming
the file, line or row and field, and nothing already written is lost.
"""

import gzip
import json
import os
import pathlib
import warnings

import jax
import numpy as np
import pytest

from ultr_jax import data
from ultr_jax import graph
from ultr_jax import simulation as sim
from ultr_jax.studies import click_models as study
from ultr_jax.studies.identifiability import click_log as ig

FORMATS = ("tsv", "baidu", "yandex", "yandex_personalized")

# ----------------------------------------------------------------------------
# One simulated log written in every text format.


def _sessions(num_sessions=300, seed=0):
  """DBN clicks (several per session) on 4 queries x 5 documents, a noisy logging ranker (documents move)."""
  attraction = np.random.default_rng(seed).uniform(0.1, 0.9, size=(4, 5)).astype(np.float32)
  log = sim.simulate_session_log(jax.random.key(seed), "dbn", attraction, num_sessions=num_sessions, noise=0.5)
  return np.asarray(log["doc_ids"]), np.asarray(log["clicks"]).astype(int)


def _doc(pos, url, click):
  return "\t".join([str(pos), url, "1\x012", "3", "0", str(click)] + ["0"] * 27)


def _lines(fmt, ids, clicks, first=0):
  """The sessions as the lines of ``fmt`` (session ids from ``first``)."""
  out = []
  for k, (row, c) in enumerate(zip(ids, clicks)):
    s, q = first + k, f"q{row[0] // 5}"
    if fmt == "tsv":
      out += [f"s{s}\t{q}\td{d}\t{p + 1}\t{int(v)}" for p, (d, v) in enumerate(zip(row, c))]
    elif fmt == "baidu":
      out += [f"{s}\t{q}\t"] + [_doc(p + 1, f"d{d}", int(v)) for p, (d, v) in enumerate(zip(row, c))]
    elif fmt == "yandex":
      out.append("\t".join([str(s), "0", "Q", q, "213", *(f"d{d}" for d in row)]))
      out += [f"{s}\t1\tC\td{d}" for d, v in zip(row, c) if v]
    else:
      out.append(f"{s}\tM\t3\t9")
      out.append("\t".join([str(s), "1", "Q", "0", q, "1,2", *(f"d{d},x" for d in row)]))
      out += [f"{s}\t9\tC\t0\td{d}" for d, v in zip(row, c) if v]
  return out


def write_log(fmt, path, ids, clicks, first=0):
  header = ["session_id\tquery_id\tdoc_id\tposition\tclick"] if fmt == "tsv" else []
  text = "\n".join(header + _lines(fmt, ids, clicks, first)) + "\n"
  if str(path).endswith(".gz"):
    with gzip.open(path, "wt") as f:
      f.write(text)
  else:
    pathlib.Path(path).write_text(text)
  return path


def read(fmt, path):
  return data.read_click_log(path, format=fmt)


def batches_of(stream):
  return [{k: np.asarray(v) for k, v in b.items()} for b in stream]


@pytest.fixture(scope="module")
def sessions():
  return _sessions()


# ----------------------------------------------------------------------------
# open_click_log


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_stream_of_any_format_equals_the_in_memory_batches(tmp_path, sessions, fmt):
  src = write_log(fmt, tmp_path / ("log.txt.gz" if fmt == "baidu" else "log.txt"), *sessions)
  want = batches_of(data.session_batches(read(fmt, src), batch_size=64))
  with data.open_click_log(src, format=fmt, tmp_dir=tmp_path / "tmp", row_group_size=50) as log:
    assert log.converted and log.format == fmt and log.num_sessions == len(sessions[0])
    assert log.num_docs == read(fmt, src).num_items and log.list_size == 5
    got = batches_of(log.stream(batch_size=64, process_index=0, process_count=1))
    again = batches_of(log.stream(batch_size=64, process_index=0, process_count=1))  # a second pass
    shards = list(log.shards)
  for g, a, w in zip(got, again, want, strict=True):
    assert set(g) == set(w)
    for k in w:
      np.testing.assert_array_equal(g[k], w[k], err_msg=k)
      np.testing.assert_array_equal(a[k], w[k], err_msg=k)
  assert shards and not any(os.path.exists(p) for p in shards)  # the temporary shards are gone
  assert not list((tmp_path / "tmp").iterdir())


def test_a_glob_a_directory_a_list_and_shards_are_one_log(tmp_path, sessions):
  ids, clicks = sessions
  d = tmp_path / "parts"
  d.mkdir()
  for k, sl in enumerate((slice(0, 100), slice(100, 220), slice(220, 300))):
    write_log("baidu", d / f"part-{k:05d}.gz", ids[sl], clicks[sl], first=sl.start)
  want = batches_of(
    data.session_batches(read("baidu", write_log("baidu", tmp_path / "all", ids, clicks)), batch_size=32)
  )
  sources = [d, d / "part-*.gz", sorted(d.iterdir())]
  for source in sources:
    with data.open_click_log(source, format="baidu") as log:
      got = batches_of(log.stream(batch_size=32, process_index=0, process_count=1))
    assert len(got) == len(want)
    for g, w in zip(got, want):
      for k in ("doc_ids", "clicks", "where", "valid", "session"):
        np.testing.assert_array_equal(g[k], w[k], err_msg=f"{source}: {k}")
  # Converted once and kept: the shard directory is a source of its own (any format said), not converted again.
  with data.open_click_log(d, format="baidu", shard_dir=tmp_path / "shards") as log:
    assert log.converted and len(log.shards) == 3  # a shard never spans two files
  assert len(list((tmp_path / "shards").glob("*.parquet"))) == 3  # kept
  with data.open_click_log(tmp_path / "shards", format="tsv") as log:
    assert not log.converted and log.format == "baidu"
    got = batches_of(log.stream(batch_size=32, process_index=0, process_count=1))
  np.testing.assert_array_equal(
    np.concatenate([g["doc_ids"] for g in got]), np.concatenate([w["doc_ids"] for w in want])
  )


def test_missing_sources_and_mixed_kinds_name_the_path(tmp_path, sessions):
  with pytest.raises(FileNotFoundError, match=r"nothing/part-\*\.gz: no files match"):
    data.open_click_log(tmp_path / "nothing" / "part-*.gz", format="baidu")
  with pytest.raises(FileNotFoundError, match=r"gone\.tsv: no such file"):
    data.open_click_log([write_log("tsv", tmp_path / "a.tsv", *sessions), tmp_path / "gone.tsv"])
  (tmp_path / "empty").mkdir()
  with pytest.raises(FileNotFoundError, match=r"empty: no files match"):
    data.open_click_log(tmp_path / "empty")
  data.convert_click_log(tmp_path / "a.tsv", tmp_path / "mixed")
  (tmp_path / "mixed" / "notes.txt").write_text("x")
  with pytest.raises(ValueError, match=r"notes\.txt: a text log among Parquet session shards"):
    data.open_click_log([tmp_path / "mixed" / "part-00000.parquet", tmp_path / "mixed" / "notes.txt"])
  with pytest.raises(ValueError, match="format must be one of"):
    data.open_click_log(tmp_path / "a.tsv", format="csv")


def test_a_session_cut_between_files_is_an_error_naming_both_and_nothing_is_left(tmp_path, sessions):
  ids, clicks = sessions
  a, b = tmp_path / "a.tsv", tmp_path / "b.tsv"
  write_log("tsv", a, ids[:10], clicks[:10])
  lines = a.read_text().splitlines()
  a.write_text("\n".join(lines[:-2]) + "\n")  # a ends inside session s9 ...
  b.write_text("\n".join([lines[0], *lines[-2:], *_lines("tsv", ids[10:20], clicks[10:20], first=10)]) + "\n")
  tmp = tmp_path / "tmp"
  with pytest.raises(ValueError, match=rf"{b}:2: field 'session_id': session 's9' \(begun on {a}:\d+\) resumes"):
    data.open_click_log([a, b], tmp_dir=tmp)  # ... and b goes on with it
  assert not list(tmp.iterdir())  # the failed conversion left nothing
  # A Baidu file that starts inside a page (document lines first), or ends on a page without documents.
  c = tmp_path / "part-00001"
  c.write_text("\n".join(_lines("baidu", ids[:3], clicks[:3])[1:]) + "\n")
  with pytest.raises(ValueError, match=rf"{c}:1: a document line before any query line"):
    data.open_click_log([write_log("baidu", tmp_path / "part-00000", ids[:5], clicks[:5]), c], format="baidu")
  c.write_text("\n".join(_lines("baidu", ids[:3], clicks[:3]) + ["7\tq1\t"]) + "\n")
  with pytest.raises(ValueError, match=rf"{c}:19: field 'qid': .* no document line follows it"):
    data.open_click_log(c, format="baidu", tmp_dir=tmp)
  assert not list(tmp.iterdir())


def test_a_truncated_or_missing_shard_is_an_error_naming_it(tmp_path, sessions):
  src = write_log("tsv", tmp_path / "log.tsv", *sessions)
  shards = data.convert_click_log(src, tmp_path / "shards", shard_size=100)
  raw = pathlib.Path(shards[1]).read_bytes()
  pathlib.Path(shards[1]).write_bytes(raw[: len(raw) // 2])  # a shard cut short: its footer is gone
  with pytest.raises(ValueError, match=r"part-00001\.parquet: \d+ bytes where the manifest records \d+ \(truncated"):
    data.open_click_log(tmp_path / "shards")
  os.remove(shards[1])
  with pytest.raises(FileNotFoundError, match=r"part-00001\.parquet: no such session shard"):
    data.open_click_log(tmp_path / "shards")  # the manifest lists it: the directory is not the whole log
  with data.open_click_log([shards[0], shards[2]]) as log:  # two of the conversion's shards, named
    stream = log.stream(batch_size=50, process_index=0, process_count=1)
    os.remove(shards[2])  # a shard gone while streaming
    with pytest.raises(FileNotFoundError, match=r"part-00002\.parquet: no such session shard"):
      batches_of(stream)


# ----------------------------------------------------------------------------
# The held-out split.


def test_the_held_out_split_is_a_function_of_the_session_alone():
  s = np.arange(20000)
  a = data.held_out_sessions(s, fraction=0.25, seed=3)
  assert abs(a.mean() - 0.25) < 0.01
  perm = np.random.default_rng(0).permutation(s)  # any order, any batching
  np.testing.assert_array_equal(data.held_out_sessions(perm.reshape(100, 200), fraction=0.25, seed=3).ravel(), a[perm])
  assert (data.held_out_sessions(s, fraction=0.25, seed=4) != a).mean() > 0.2  # the seed matters
  assert not data.held_out_sessions(np.array([-1]), fraction=1.0).any()  # padding
  assert data.held_out_sessions(s, fraction=0.0, seed=3).sum() == 0
  with pytest.raises(ValueError, match="fraction must be in"):
    data.held_out_sessions(s, fraction=1.5)


# ----------------------------------------------------------------------------
# The click-model study's click-log mode.


def _study_config(**kw):
  c = study.default_click_model_config()
  c.fit_models = ("pbm", "ubm", "cascade", "dbn")
  c.ctr_models = ("rctr", "drctr")
  c.max_iters = 200
  c.click_log_batch_size = 64
  for k, v in kw.items():
    setattr(c, k, v)
  return c


@pytest.mark.parametrize("fmt", [*FORMATS, "shards"])
def test_the_study_on_a_streamed_log_equals_the_log_in_memory(tmp_path, sessions, fmt):
  """The study's log mode (open_click_log, the hashed split, the statistics fits over the stream) against the
  same log read whole by its in-memory reader and batched differently."""
  text = "tsv" if fmt == "shards" else fmt
  src = write_log(text, tmp_path / "log.txt", *sessions)
  log = read(text, src)
  if fmt == "shards":
    data.convert_click_log(src, tmp_path / "shards", shard_size=70, row_group_size=16)
    src = tmp_path / "shards"
  config = _study_config(click_log=str(src), click_log_format=text)
  results = study.run_click_model_study(config, str(tmp_path / "out"))
  want = study.score_log_batches(
    lambda: data.session_batches(log, batch_size=37), num_docs=log.num_items, config=config
  )
  assert list(results) == ["log"] and set(results["log"]) == set(want)
  assert results["log"]["cascade"] is None and want["cascade"] is None  # several clicks: no cascade
  for m, w in want.items():
    if w is None:
      continue
    g = results["log"][m]
    for k in ("perplexity", "ctr_perplexity", "log_likelihood"):
      assert g[k]["mean"] == pytest.approx(w[k], abs=1e-6), (m, k)
    np.testing.assert_allclose(g["perplexity_per_rank"], w["perplexity_per_rank"], atol=1e-6, err_msg=m)
  saved = json.loads((tmp_path / "out" / "results.json").read_text())
  assert saved["log"]["pbm"]["perplexity"]["mean"] == pytest.approx(want["pbm"]["perplexity"], abs=1e-6)


def test_the_streamed_study_equals_the_in_memory_fits(tmp_path, sessions):
  """Against the in-memory path (fit_click_model and evaluate_click_model on [S, L] arrays split by the same
  rule), both fits run to a gradient norm of 1e-7 (test_click_stream's criterion)."""
  src = write_log("tsv", tmp_path / "log.tsv", *sessions)
  config = _study_config(click_log=str(src), fit_models=("pbm", "dbn"), tol=1e-7, max_iters=400)
  got = study.score_click_log(config)
  log = data.read_click_log(src)
  s = data.click_log_sessions(log)
  test = data.held_out_sessions(np.arange(len(s["where"])), fraction=config.test_fraction, seed=config.seed)
  assert 0 < test.sum() < len(test)
  train, held = ({k: s[k][m] for k in ("doc_ids", "clicks", "where")} for m in (~test, test))
  for m in config.fit_models:
    want = study.fit_and_score(m, train, held, num_docs=log.num_items, config=config)
    assert got[m]["num_sessions"] == test.sum() and got[m]["converged"] and want["converged"]
    for k in ("perplexity", "ctr_perplexity", "log_likelihood"):
      assert got[m][k] == pytest.approx(want[k], abs=1e-6), (m, k)
  for m in config.ctr_models:
    want = study.score_ctr_baseline(m, train, held, num_docs=log.num_items, config=config)
    for k in ("perplexity", "log_likelihood"):
      assert got[m][k] == pytest.approx(want[k], abs=1e-6), (m, k)


def test_a_bad_field_in_the_log_names_it_and_loses_nothing_written(tmp_path, sessions):
  src = write_log("tsv", tmp_path / "log.tsv", *sessions)
  out = tmp_path / "out"
  config = _study_config(click_log=str(src), fit_models=("pbm",), ctr_models=())
  study.run_click_model_study(config, str(out))
  before = {p.name: p.read_bytes() for p in out.iterdir()}
  lines = src.read_text().splitlines()
  lines[123] = lines[123].rsplit("\t", 1)[0] + "\t2"  # a click of 2 on line 124
  bad = tmp_path / "bad.tsv"
  bad.write_text("\n".join(lines) + "\n")
  config.click_log = str(bad)
  with pytest.raises(ValueError, match=rf"{bad}:124: field 'click': 2.0 is not 0 or 1"):
    study.run_click_model_study(config, str(out))
  assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the earlier results stand


def test_the_fit_reads_batches_not_the_log(tmp_path, sessions, monkeypatch):
  """The study never reads the log whole: no in-memory reader is called, every batch has B sessions."""
  src = write_log("tsv", tmp_path / "log.tsv", *sessions)
  for name in ("read_click_log", "read_baidu_sessions", "read_yandex_sessions", "read_session_shards"):
    monkeypatch.setattr(data, name, lambda *a, **k: pytest.fail("the log was read whole"))
  shapes = []
  stream = data.StreamedClickLog.stream

  def recorded(self, **kw):
    for b in stream(self, **kw):
      shapes.append(b["doc_ids"].shape)
      yield b

  monkeypatch.setattr(data.StreamedClickLog, "stream", recorded)
  study.score_click_log(_study_config(click_log=str(src), fit_models=("pbm",), ctr_models=()))
  assert set(shapes) == {(64, 5)} and len(shapes) == 2 * 5  # two passes (fit, score) of ceil(300 / 64) batches


# ----------------------------------------------------------------------------
# The IG check's click-log mode.


def _in_memory_check(log):
  report = graph.check_identifiability(log.items, log.positions, num_items=log.num_items, num_factors=log.num_positions)
  sets = graph.intervention_sets(
    log.items, log.positions, log.clicks, weights=log.weights, num_items=log.num_items, num_factors=log.num_positions
  )
  props = {m: graph.HARVESTING_METHODS[m](sets) for m in ig.HARVEST}
  return report, props


@pytest.mark.parametrize("fmt", [*FORMATS, "aggregated", "shards"])
def test_the_ig_check_of_a_streamed_log_equals_the_log_in_memory(tmp_path, sessions, fmt):
  ids, clicks = sessions
  text = {"aggregated": "tsv", "shards": "tsv"}.get(fmt, fmt)
  src = write_log(text, tmp_path / "log.txt", ids, clicks)
  if fmt == "aggregated":  # query_id, doc_id, position, click, impressions: no sessions at all
    log = data.read_click_log(src)
    key = np.stack([log.items, log.positions])
    cells, inverse = np.unique(key, axis=1, return_inverse=True)
    n = np.bincount(inverse.ravel())
    k = np.bincount(inverse.ravel(), weights=log.clicks)
    rows = [
      f"{log.query_ids[log.items == i][0]},{log.doc_ids[log.items == i][0]},{p + 1},{int(c)},{m}"
      for (i, p), c, m in zip(cells.T, k, n)
    ]
    src = tmp_path / "agg.csv"
    src.write_text("\n".join(["query_id,doc_id,position,click,impressions", *rows]) + "\n")
  log = read(text, src)
  if fmt == "shards":
    data.convert_click_log(src, tmp_path / "shards", shard_size=100)
    src = tmp_path / "shards"
  counts = ig.click_log_counts(src, format=text, batch_size=32)
  report, out = ig.check_click_log(counts)
  want, props = _in_memory_check(log)
  assert report.components == want.components and report.num_items == want.num_items
  np.testing.assert_array_equal(report.labels, want.labels)
  assert out["num_rows"] == report.num_records == want.num_records == len(log.items)
  for m in ig.HARVEST:
    ok = np.asarray(props[m].identified)
    assert [v is not None for v in out["propensities"][m]] == ok.tolist(), m
    got = np.array([np.nan if v is None else v for v in out["propensities"][m]])
    np.testing.assert_allclose(got[ok], np.asarray(props[m].propensities)[ok], rtol=1e-6, err_msg=m)


def test_the_check_binary_streams_a_glob_of_raw_files(tmp_path, sessions, subprocess_env):
  import subprocess  # noqa: PLC0415
  import sys  # noqa: PLC0415

  ids, clicks = sessions
  for k, sl in enumerate((slice(0, 150), slice(150, 300))):
    write_log("yandex", tmp_path / f"day{k}.txt", ids[sl], clicks[sl], first=sl.start)
  out = tmp_path / "r.json"
  cmd = [sys.executable, "experiments/identifiability/check.py", f"--click_log={tmp_path}/day*.txt"]
  cmd += ["--click_log_format=yandex", f"--out={out}"]
  root = pathlib.Path(__file__).resolve().parent.parent
  proc = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env, cwd=str(root))
  assert proc.returncode == 0, proc.stderr
  r = json.loads(out.read_text())
  report, props = _in_memory_check(read("yandex", write_log("yandex", tmp_path / "all.txt", ids, clicks)))
  assert r["components"] == report.components and r["num_rows"] == ids.size
  np.testing.assert_allclose(r["propensities"]["pivot"], np.asarray(props["pivot"].propensities), rtol=1e-6)
  # A bad field: the error names the file, line and field, and the report written before is kept.
  (tmp_path / "day1.txt").write_text("1\t0\tQ\t7\t213\tu1\n1\t0\tX\tu1\n")
  proc = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env, cwd=str(root))
  assert proc.returncode != 0 and f"{tmp_path / 'day1.txt'}:2: unknown record type 'X' in field 3" in proc.stderr
  assert json.loads(out.read_text()) == r


# ----------------------------------------------------------------------------
# The pieces: ClickLogRows, ClickCounts, the CTR baselines from statistics.


@pytest.mark.parametrize(
  "text",
  [
    "query_id,doc_id,position,click\nq,a,1,1\n\nq,b,2\n",
    "query_id,doc_id,position,click\nq,a,1,1\nq,b,two,0\n",
    "query_id,doc_id,position,click\nq,a,1,1\nq,b,1_0,0\n",
    "query_id,doc_id,position,click\nq,a,0,1\n",
    "query_id,doc_id,position,click\nq,a,1,1\nq,b,2,2\n",
    "query_id,doc_id,position,click\nq,a,1,nan\n",
    "query_id,doc_id,position,click,impressions\nq,a,1,5,4\n",
    "query_id,doc_id,position,click,impressions\nq,a,1,0,0\n",
    "query_id,doc_id,position,click,impressions,session_id\nq,a,1,0,1,s\n",
    "query_id,doc_id,position,click\nq,a,70000,1\n",
    "query_id,doc_id,click\nq,a,1\n",
    "query_id,doc_id,position,click\n",
    "",
  ],
)
def test_click_log_rows_errors_are_read_click_log_s(tmp_path, text):
  p = tmp_path / "log.csv"
  p.write_text(text)
  with pytest.raises(ValueError) as want:
    data.read_click_log(p)
  with pytest.raises(ValueError) as got:
    list(data.ClickLogRows(p))
  assert str(got.value) == str(want.value)


def test_click_log_rows_are_the_in_memory_records(tmp_path, sessions):
  src = write_log("tsv", tmp_path / "log.tsv.gz", *sessions)
  rows = data.ClickLogRows(src, chunk_size=100)
  chunks = list(rows)
  assert max(len(c["doc_ids"]) for c in chunks) == 100 and rows.num_items == data.read_click_log(src).num_items
  log = data.read_click_log(src)
  np.testing.assert_array_equal(np.concatenate([c["doc_ids"] for c in chunks]), log.items)
  np.testing.assert_array_equal(np.concatenate([c["positions"] for c in chunks]), log.positions)
  np.testing.assert_array_equal(np.concatenate([c["clicks"] for c in chunks]), log.clicks)


def test_gathered_counts_equal_the_counts_of_the_whole():
  rng = np.random.default_rng(0)
  items, factors = rng.integers(0, 30, (500, 6)), rng.integers(0, 6, (500, 6))
  clicks, where = rng.random((500, 6)), rng.random((500, 6)) < 0.8
  weights = rng.integers(1, 5, (500, 6)).astype(float)
  whole = graph.click_counts(items, factors, clicks, where=where, weights=weights)
  parts = [
    {"doc_ids": items[i : i + 64], "positions": factors[i : i + 64], "clicks": clicks[i : i + 64],
     "where": where[i : i + 64], "weights": weights[i : i + 64]}
    for i in range(0, 500, 64)
  ]  # fmt: skip
  got = graph.gather_click_counts(parts)
  for k in ("items", "factors"):
    np.testing.assert_array_equal(getattr(got, k), getattr(whole, k))
  for k in ("clicks", "impressions"):
    np.testing.assert_allclose(getattr(got, k), getattr(whole, k), rtol=1e-12)
  assert got.num_records == whole.num_records == where.sum()
  # The sets of the counts are the sets of the records.
  want = graph.intervention_sets(items, factors, clicks, where=where, weights=weights, num_items=30, num_factors=6)
  sets = graph.intervention_sets_from_counts(got)
  for a, b in zip(sets, want):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5)
  with pytest.raises(ValueError, match="items: id 29 is outside"):
    graph.gather_click_counts(parts, num_items=20)


@pytest.mark.parametrize("model", sim.CTR_MODELS)
def test_ctr_baselines_from_statistics_equal_the_in_memory_ones(sessions, model):
  ids, clicks = sessions
  where = np.random.default_rng(1).random(ids.shape) < 0.9
  stats = sim.gather_click_statistics("pbm", [{"doc_ids": ids, "clicks": clicks, "where": where}])
  got = sim.fit_click_model(model, stats, num_docs=25, solver=sim.Counts()).params
  want = sim.fit_click_model(
    model, {"doc_ids": ids, "clicks": clicks, "where": where}, num_docs=25, solver=sim.Counts()
  ).params
  assert set(got) == set(want)
  for k in want:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-6, err_msg=k)
  dbn = sim.gather_click_statistics("dbn", [{"doc_ids": ids, "clicks": clicks}])
  with pytest.raises(ValueError, match="expected 'items'"):
    sim.fit_click_model(model, dbn, solver=sim.Counts())


def test_open_click_log_warns_about_yandex_ads_once(tmp_path):
  p = tmp_path / "log.txt"
  p.write_text("1\t0\tQ\t7\t213\tu1\tu2\n1\t5\tC\tad\n")
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with data.open_click_log(p, format="yandex") as log:
      assert log.num_sessions == 1
  assert [str(w.message).count("click(s) on URLs their page does not show") for w in caught] == [1]


def test_a_model_whose_statistics_do_not_reduce_is_fitted_by_adam_over_the_stream(tmp_path, sessions):
  """With a memory budget below the DBN's distinct sessions, the study fits the DBN by
  fit_click_model's Minibatch solver over the same training split (equal to calling it directly) and says so; the
  PBM's item counts are spilled to disk by document past the budget, so it stays on its statistics."""
  import optax

  src = write_log("tsv", tmp_path / "log.tsv", *sessions)
  config = _study_config(
    click_log=str(src), fit_models=("pbm", "dbn"), ctr_models=(), statistics_memory_budget_bytes=2000
  )
  got = study.score_click_log(config)
  assert got["pbm"]["fit"] == "statistics" and got["dbn"]["fit"] == "minibatch"
  with data.open_click_log(src) as log:
    split = dict(fraction=config.test_fraction, seed=config.seed)
    train = lambda: study.log_split(log.stream(batch_size=config.click_log_batch_size), held_out=False, **split)
    test = lambda: study.log_split(log.stream(batch_size=config.click_log_batch_size), held_out=True, **split)
    with pytest.raises(sim.StatisticsTooLarge, match=r"dbn's patterns statistics hold .* records .* after .* sessions"):
      sim.gather_click_statistics("dbn", train(), memory_budget_bytes=2000)
    fit = sim.fit_click_model(
      "dbn",
      train,
      solver=sim.Minibatch(optimizer=optax.adam(config.minibatch_learning_rate), epochs=config.minibatch_epochs),
      num_docs=log.num_docs,
      l2=config.l2,
      prior="zero",  # as the study
    )
    want = sim.evaluate_click_model_stream("dbn", fit.params, test())
  for k in ("perplexity", "log_likelihood"):
    assert got["dbn"][k] == pytest.approx(want[k], abs=1e-6), k
