"""Tests for the Parquet session shards (ultr_jax.data.convert) and the session stream (ultr_jax.data.stream)."""

import gzip
import json
import os
import pathlib
import warnings

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ultr_jax import data
from ultr_jax.data import convert
from conftest import assert_batches_equal

# ----------------------------------------------------------------------------
# Small logs in the three text layouts.


def write_tsv(path, seed=0, num_sessions=60, header="session_id\tquery_id\tdoc_id\tposition\tclick"):
  rng = np.random.default_rng(seed)
  rows = [header]
  for s in range(num_sessions):
    q = f"q{rng.integers(6)}"
    n = int(rng.integers(1, 7))
    for p in rng.choice(np.arange(1, 9), n, replace=False):
      rows.append(f"s{s:03d}\t{q}\td{rng.integers(10)}\t{p}\t{rng.integers(2)}")
  path.write_text("\n".join(rows) + "\n")
  return path


def _doc(pos, url, click):
  return "\t".join([str(pos), url, "1\x012", "3", "0", str(click)] + ["0"] * 27)


def write_baidu(path, seed=0, num_pages=40):
  """Pages with 1 to 5 documents (a page without documents is an error, as a document line cut short)."""
  rng = np.random.default_rng(seed)
  lines = []
  for _ in range(num_pages):
    lines.append(f"{100 + rng.integers(5)}\t1{rng.integers(3)}\x0112\t")  # qids unlike positions
    n = int(rng.integers(1, 6))
    for p in rng.choice(np.arange(1, 11), n, replace=False):
      lines.append(_doc(p, f"u{rng.integers(12)}", rng.integers(2)))
  lines.append(f"{100 + rng.integers(5)}\t10\x0112\t")  # the last page shows a document
  lines.append(_doc(3, "u1", 1))
  with gzip.open(path, "wt") as f:
    f.write("\n".join(lines) + "\n")
  return path


def write_relpred(path, seed=0, num_sessions=25):
  rng = np.random.default_rng(seed)
  lines = []
  for s in range(num_sessions):
    for _ in range(int(rng.integers(1, 4))):
      urls = rng.choice([f"u{j}" for j in range(15)], int(rng.integers(1, 7)), replace=False)
      lines.append("\t".join([str(s), "0", "Q", str(rng.integers(8)), "213", *urls]))
      for _ in range(int(rng.integers(0, 3))):
        lines.append("\t".join([str(s), "5", "C", str(rng.choice(urls)) if rng.random() < 0.9 else "ad"]))
  path.write_text("\n".join(lines) + "\n")
  return path


def write_personalized(path, seed=0, num_sessions=20):
  rng = np.random.default_rng(seed)
  lines = []
  for s in range(num_sessions):
    lines.append(f"{s}\tM\t3\t9")
    pages = []
    for serp in range(int(rng.integers(1, 4))):
      urls = rng.choice([f"u{j}" for j in range(15)], int(rng.integers(1, 6)), replace=False)
      kind = "T" if rng.random() < 0.2 else "Q"
      lines.append("\t".join([str(s), "1", kind, str(serp), str(rng.integers(8)), "1,2", *(f"{u},d" for u in urls)]))
      pages.append(urls)
    for _ in range(int(rng.integers(0, 4))):  # clicks on any earlier page of the session
      serp = int(rng.integers(len(pages)))
      lines.append("\t".join([str(s), "9", "C", str(serp), str(rng.choice(pages[serp]))]))
  path.write_text("\n".join(lines) + "\n")
  return path


FORMATS = {
  "tsv": (write_tsv, "log.tsv", lambda p: data.read_click_log(p)),
  "baidu": (write_baidu, "part-00000.gz", lambda p: data.read_baidu_sessions(p)),
  "yandex": (write_relpred, "relpred.txt", lambda p: data.read_yandex_sessions(p)),
  "yandex_personalized": (
    write_personalized,
    "personalized.txt",
    lambda p: data.read_yandex_sessions(p, layout="personalized"),
  ),
}


def _read(fmt, path):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # the Yandex logs' clicks on ads
    return FORMATS[fmt][2](path)


def _convert(fmt, path, out, **kw):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    return data.convert_click_log(path, out, format=fmt, **kw)


@pytest.fixture(params=sorted(FORMATS))
def converted(request, tmp_path):
  """(format, source file, shard directory): small shards, so a log spans several files and row groups."""
  fmt = request.param
  writer, name, _ = FORMATS[fmt]
  src = writer(tmp_path / name)
  _convert(fmt, src, tmp_path / "shards", shard_size=11, row_group_size=4)
  return fmt, src, tmp_path / "shards"


def assert_logs_equal(got, want):
  for field in want._fields:
    a, b = getattr(got, field), getattr(want, field)
    if isinstance(b, np.ndarray) or isinstance(a, np.ndarray):
      assert a is not None and b is not None, field
      np.testing.assert_array_equal(a, b, err_msg=field)
      assert a.dtype.kind == b.dtype.kind, (field, a.dtype, b.dtype)
    else:
      assert a == b, (field, a, b)


def stream(source, **kw):
  kw.setdefault("process_index", 0)
  kw.setdefault("process_count", 1)
  return data.SessionStream(source, **kw)


# ----------------------------------------------------------------------------
# Round trip, stream == in memory.


def test_round_trip_equals_the_in_memory_reader(converted):
  fmt, src, shards = converted
  assert len(data.session_shard_paths(shards)) > 1
  assert_logs_equal(data.read_session_shards(shards), _read(fmt, src))


@pytest.mark.parametrize("irregular", [False, True])
def test_tsv_arrow_path_and_line_parser_write_the_same_shards(tmp_path, monkeypatch, irregular):
  """A clean log takes the Arrow CSV path; a blank line or an exotic number sends it to the per-line parser."""
  src = write_tsv(tmp_path / "log.tsv", num_sessions=50)
  if irregular:
    text = src.read_text().splitlines(keepends=True)
    text[7] = "\n"  # a blank line; and a position written as NumPy reads it, not as a plain integer
    text[9] = text[9].replace("\t", "\t+", 3).replace("\t+", "\t", 2)
    src.write_text("".join(text))
  calls = []
  line_parser = convert._tsv_sessions

  def spy(*a, **k):  # a generator: it records only when the converter reads from it
    calls.append(1)
    yield from line_parser(*a, **k)

  monkeypatch.setattr(convert, "_tsv_sessions", spy)
  data.convert_click_log(src, tmp_path / "a", row_group_size=6, max_sessions=45)
  assert bool(calls) == irregular

  def no_arrow(*a, **k):
    raise convert._Fallback("test")
    yield

  monkeypatch.setattr(convert, "_tsv_tables", no_arrow)
  data.convert_click_log(src, tmp_path / "b", row_group_size=6, max_sessions=45)
  a, b = pq.read_table(tmp_path / "a"), pq.read_table(tmp_path / "b")
  assert a.num_rows == 45 and a.equals(b)
  assert a.schema.metadata == b.schema.metadata


@pytest.mark.parametrize("fmt", ["tsv", "baidu"])
def test_several_files_convert_as_their_concatenation(tmp_path, fmt):
  """One vocabulary and one session numbering over the files: the reader's log of the files joined."""
  if fmt == "tsv":
    a, b = write_tsv(tmp_path / "a.tsv", seed=1), write_tsv(tmp_path / "b.tsv", seed=2)
    b.write_text(b.read_text().replace("\ts0", "\tt0").replace("s0", "t0"))  # other session ids
    (tmp_path / "ab.tsv").write_text(a.read_text() + "".join(b.read_text().splitlines(True)[1:]))
    want = data.read_click_log(tmp_path / "ab.tsv")
  else:
    a, b = write_baidu(tmp_path / "part-00000.gz", seed=1), write_baidu(tmp_path / "part-00001.gz", seed=2)
    with gzip.open(tmp_path / "ab.gz", "wb") as f:
      f.write(gzip.decompress(a.read_bytes()) + gzip.decompress(b.read_bytes()))
    want = data.read_baidu_sessions(tmp_path / "ab.gz")
  shards = data.convert_click_log([a, b], tmp_path / "o", format=fmt, shard_size=1000, row_group_size=7)
  assert [pq.read_metadata(p).metadata[b"ultr_jax.source"].decode() for p in shards] == [str(a), str(b)]
  got = data.read_session_shards(tmp_path / "o")
  assert_logs_equal(got._replace(lines=want.lines, path=want.path), want)
  assert_batches_equal(list(stream(tmp_path / "o", batch_size=16)), list(data.session_batches(want, batch_size=16)))


def test_round_trip_with_max_sessions_and_query_key(tmp_path):
  src = write_baidu(tmp_path / "part-00001.gz", seed=3)
  data.convert_click_log(src, tmp_path / "o", format="baidu", query_key="qid", max_sessions=13, row_group_size=5)
  assert_logs_equal(
    data.read_session_shards(tmp_path / "o"), data.read_baidu_sessions(src, query_key="qid", max_sessions=13)
  )


def test_extra_columns_travel_per_document(tmp_path):
  src = tmp_path / "log.tsv"
  src.write_text("session_id\tquery_id\tdoc_id\tposition\tclick\tdwell\ns\tq\ta\t2\t1\t3.5\ns\tq\tb\t1\t0\t0.25\n")
  data.convert_click_log(src, tmp_path / "o", extra_columns=["dwell"])
  (batch,) = stream(tmp_path / "o", batch_size=1, extra_columns=["dwell"])
  np.testing.assert_array_equal(batch["dwell"], [[0.25, 3.5]])  # by position
  np.testing.assert_array_equal(batch["clicks"], [[0.0, 1.0]])


@pytest.mark.parametrize("batch_size", [1, 7, 500])
def test_stream_equals_in_memory_batches(converted, batch_size):
  fmt, src, shards = converted
  got = list(stream(shards, batch_size=batch_size))
  want = list(data.session_batches(_read(fmt, src), batch_size=batch_size))
  assert_batches_equal(got, want)
  assert stream(shards, batch_size=batch_size).num_batches == len(want)


def test_batches_have_fixed_shapes_and_compile_once(tmp_path, assert_compiles_once):
  src = write_tsv(tmp_path / "log.tsv", num_sessions=23)
  data.convert_click_log(src, tmp_path / "o", row_group_size=5)

  def clicks_per_valid_session(batch):
    return (batch["clicks"] * batch["where"]).sum(-1) * batch["valid"]

  batches = list(stream(tmp_path / "o", batch_size=4))
  shapes = {tuple((k, v.shape, v.dtype.name) for k, v in sorted(b.items())) for b in batches}
  assert len(shapes) == 1  # every batch, the padded last one too: a jitted step compiles once
  outs = assert_compiles_once(clicks_per_valid_session, lambda i: ((batches[i],), {}), calls=len(batches))
  assert sum(float(o.sum()) for o in outs) == data.read_click_log(src).clicks.sum()
  batch = batches[-1]
  # The last batch: 23 = 5 * 4 + 3 sessions, one padding row.
  assert batch["valid"].tolist() == [True, True, True, False] and batch["session"][-1] == -1


def test_list_size_from_shards_and_override(converted):
  fmt, src, shards = converted
  log = _read(fmt, src)
  assert stream(shards, batch_size=3).list_size == log.num_positions
  assert stream(shards, batch_size=3).num_docs == log.num_items
  got = list(stream(shards, batch_size=3, list_size=log.num_positions + 2))
  want = list(data.session_batches(log, batch_size=3, list_size=log.num_positions + 2))
  assert_batches_equal(got, want)


# ----------------------------------------------------------------------------
# Order: seeds, resume, processes.


def _sessions(batches):
  return np.concatenate([b["session"][b["valid"]] for b in batches])


def test_shuffle_is_seeded_and_a_permutation(tmp_path):
  src = write_tsv(tmp_path / "log.tsv", num_sessions=80)
  data.convert_click_log(src, tmp_path / "o", shard_size=30, row_group_size=8)
  a = _sessions(stream(tmp_path / "o", batch_size=5, shuffle=True, seed=1))
  b = _sessions(stream(tmp_path / "o", batch_size=5, shuffle=True, seed=1))
  c = _sessions(stream(tmp_path / "o", batch_size=5, shuffle=True, seed=2))
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c) and not np.array_equal(a, np.arange(80))
  np.testing.assert_array_equal(np.sort(a), np.arange(80))
  # Each session's row still holds its own documents.
  want = {
    int(s): row
    for b in data.session_batches(data.read_click_log(src), batch_size=80)
    for s, row in enumerate(b["doc_ids"])
  }
  for batch in stream(tmp_path / "o", batch_size=5, shuffle=True, seed=1):
    for s, row in zip(batch["session"][batch["valid"]], batch["doc_ids"][batch["valid"]]):
      np.testing.assert_array_equal(row, want[int(s)])


def test_shuffle_reaches_inside_a_row_group(tmp_path):
  data.convert_click_log(write_tsv(tmp_path / "log.tsv", num_sessions=40), tmp_path / "o", row_group_size=40)
  a = _sessions(stream(tmp_path / "o", batch_size=6, shuffle=True, seed=0))
  assert not np.array_equal(a, np.arange(40))  # one row group: only the in-group permutation moves sessions
  np.testing.assert_array_equal(np.sort(a), np.arange(40))


@pytest.mark.parametrize("k", [0, 3, 11, 17])
def test_resume_equals_the_uninterrupted_sequence(tmp_path, k):
  src = write_tsv(tmp_path / "log.tsv", num_sessions=70)
  data.convert_click_log(src, tmp_path / "o", shard_size=25, row_group_size=6)
  kw = dict(batch_size=9, shuffle=True, seed=5, num_epochs=2)
  whole = list(stream(tmp_path / "o", **kw))
  assert len(whole) == 16  # 140 sessions over two epochs: k = 11 resumes inside the second epoch
  first = stream(tmp_path / "o", **kw)
  head = [next(first) for _ in range(min(k, len(whole)))]
  state = json.loads(json.dumps(first.get_state()))  # JSON-able
  resumed = stream(tmp_path / "o", **kw)
  resumed.set_state(state)
  assert_batches_equal(head + list(resumed), whole)
  # The two epochs are two different permutations of all sessions.
  sessions = _sessions(whole)
  np.testing.assert_array_equal(np.sort(sessions[:70]), np.arange(70))
  np.testing.assert_array_equal(np.sort(sessions[70:]), np.arange(70))
  assert not np.array_equal(sessions[:70], sessions[70:])


def test_every_pass_reads_the_stream_again(tmp_path):
  """``iter(stream)`` starts a new pass with the same batches (shuffled too); set_state positions the next pass."""
  data.convert_click_log(write_tsv(tmp_path / "log.tsv", num_sessions=50), tmp_path / "o", row_group_size=6)
  s = stream(tmp_path / "o", batch_size=7, shuffle=True, seed=4, num_epochs=2)
  first = list(s)
  assert len(first) == 15 and next(s, None) is None  # the pass has ended ...
  assert_batches_equal(list(s), first)  # ... and a new one reads it all again
  assert_batches_equal([b for b in s], first)
  it = iter(s)
  head = [next(it) for _ in range(4)]
  state = s.get_state()
  assert_batches_equal(head + [next(s) for _ in range(2)], first[:6])  # next() continues the pass
  assert_batches_equal(list(s), first)  # a pass begun mid-way by next() restarts at iter()
  s.set_state(state)
  assert_batches_equal(list(s), first[4:])  # after set_state, the pass starts there
  assert_batches_equal(list(s), first)


def test_set_state_of_another_stream_is_an_error(tmp_path):
  data.convert_click_log(write_tsv(tmp_path / "log.tsv"), tmp_path / "o")
  state = stream(tmp_path / "o", batch_size=4, seed=1, shuffle=True).get_state()
  with pytest.raises(ValueError, match="other arguments.*seed"):
    stream(tmp_path / "o", batch_size=4, seed=2, shuffle=True).set_state(state)


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("shuffle", [False, True])
def test_processes_read_disjoint_parts_that_cover_the_log(tmp_path, count, shuffle):
  src = write_tsv(tmp_path / "log.tsv", num_sessions=90)
  data.convert_click_log(src, tmp_path / "o", shard_size=40, row_group_size=7)
  want = {
    int(s): (row, c)
    for b in data.session_batches(data.read_click_log(src), batch_size=90)
    for s, row, c in zip(b["session"], b["doc_ids"], b["clicks"])
  }
  parts = []
  for p in range(count):
    s = data.SessionStream(tmp_path / "o", batch_size=4, shuffle=shuffle, seed=3, process_index=p, process_count=count)
    batches = list(s)
    assert len(batches) == s.num_batches
    parts.append(_sessions(batches))
    for b in batches:
      for sid, row, c in zip(b["session"][b["valid"]], b["doc_ids"][b["valid"]], b["clicks"][b["valid"]]):
        np.testing.assert_array_equal(row, want[int(sid)][0])
        np.testing.assert_array_equal(c, want[int(sid)][1])
  every = np.concatenate(parts)
  assert len(every) == len(set(every.tolist())) == 90  # disjoint and complete
  assert all(len(p) for p in parts)


def test_processes_default_to_jax_s(tmp_path):
  data.convert_click_log(write_tsv(tmp_path / "log.tsv"), tmp_path / "o", row_group_size=8)
  s = data.SessionStream(tmp_path / "o", batch_size=8)
  assert (s.process_index, s.process_count) == (jax.process_index(), jax.process_count())
  assert_batches_equal(list(s), list(stream(tmp_path / "o", batch_size=8)))


def test_sources_file_glob_directory_list(tmp_path):
  data.convert_click_log(write_tsv(tmp_path / "log.tsv"), tmp_path / "o", shard_size=20)
  paths = data.session_shard_paths(tmp_path / "o")
  assert len(paths) == 3 and paths == sorted(paths)
  assert data.session_shard_paths(str(tmp_path / "o" / "part-*.parquet")) == paths
  assert data.session_shard_paths(paths[::-1]) == paths
  assert data.session_shard_paths(paths[1]) == [paths[1]]
  with pytest.raises(FileNotFoundError, match="no session shards match"):
    data.session_shard_paths(str(tmp_path / "o" / "nothing-*.parquet"))


# ----------------------------------------------------------------------------
# Errors name the file, the row (or line) and the field.


def _write_table(directory, table):
  """``directory/part-00000.parquet``: ``table`` written as a session shard, with its manifest."""
  writer = convert._ShardWriter(directory, 1 << 20, 1 << 20, (), {"format": "tsv"})
  writer.add_table(table)
  return pathlib.Path(writer.finish()[0])


def _write_shard(directory, rows):
  """A shard from ``rows``: dicts with the list columns (session and query_id filled in)."""
  schema = convert._schema(())
  cols = {name: [] for name in schema.names}
  for i, r in enumerate(rows):
    n = len(r["doc_ids"])
    r = {"session": i, "query_id": "q", "doc_names": ["x"] * n, "lines": [1] * n, **r}
    for name in schema.names:
      cols[name].append(r[name])
  return _write_table(directory, pa.table(cols, schema=schema))


GOOD = {"doc_ids": [0, 1], "positions": [0, 1], "clicks": [0, 1]}


@pytest.mark.parametrize(
  "bad, field, message",
  [
    ({"doc_ids": [0, 1], "positions": [0, -1], "clicks": [0, 1]}, "positions", "-1 is negative"),
    ({"doc_ids": [0, 1], "positions": [0, 9], "clicks": [0, 1]}, "positions", "9 is beyond list_size 4"),
    ({"doc_ids": [0, 1], "positions": [1, 1], "clicks": [0, 1]}, "positions", "two documents at position 1"),
    ({"doc_ids": [0, 1], "positions": [0, 1], "clicks": [0, 2]}, "clicks", "2 is not 0 or 1"),
    ({"doc_ids": [0, 1], "positions": [0, 1], "clicks": [0]}, "clicks", "1 values, where 'doc_ids' has 2"),
    ({"doc_ids": [0, 1], "positions": [0], "clicks": [0, 1]}, "positions", "1 values, where 'doc_ids' has 2"),
    ({"doc_ids": [0, -3], "positions": [0, 1], "clicks": [0, 1]}, "doc_ids", "-3 is not an id"),
  ],
)
def test_bad_rows_name_file_row_and_field(tmp_path, bad, field, message):
  path = _write_shard(tmp_path, [GOOD, GOOD, GOOD, bad, GOOD])
  with pytest.raises(ValueError) as e:
    list(stream(path, batch_size=2, list_size=4))
  assert str(e.value).startswith(f"{path}, row 3, field {field!r}: "), str(e.value)
  assert message in str(e.value)


def test_missing_value_names_row_and_field(tmp_path):
  schema = convert._schema(())
  table = pa.table(
    {
      "session": [0, 1],
      "query_id": ["q", "q"],
      "doc_ids": [[0], [1]],
      "doc_names": [["a"], ["b"]],
      "positions": [[0], None],
      "clicks": [[1], [0]],
      "lines": [[1], [2]],
    },
    schema=schema,
  )
  path = _write_table(tmp_path, table)
  with pytest.raises(ValueError, match=r"part-00000\.parquet, row 1, field 'positions': missing value"):
    list(stream(path, batch_size=2, list_size=2))


def test_missing_and_unreadable_shards(tmp_path):
  good = _write_shard(tmp_path / "a", [GOOD])
  with pytest.raises(FileNotFoundError, match="part-00009.parquet: no such session shard"):
    stream([good, tmp_path / "a" / "part-00009.parquet"], batch_size=2)
  # A shard cut short: its size is not the manifest's.
  good.write_bytes(good.read_bytes()[:-40])
  with pytest.raises(ValueError, match=r"part-00000\.parquet: \d+ bytes where the manifest records \d+ \(truncated"):
    stream(tmp_path / "a", batch_size=2)
  # A Parquet file written elsewhere: no ultr_jax footer, no manifest.
  pq.write_table(pa.table({"session": [0]}), tmp_path / "other.parquet")
  with pytest.raises(ValueError, match=r"other\.parquet: not a session shard written by ultr_jax"):
    stream(tmp_path / "other.parquet", batch_size=2)
  # A shard of ultr_jax without the session columns.
  t = pa.table({"session": pa.array([0], pa.int64())})
  w = convert.ShardWriter(tmp_path / "b", t.schema, 1, 1, {"format": "tsv"})
  w.add(t)
  (other,) = w.finish()
  with pytest.raises(ValueError, match=r"part-00000\.parquet: field 'query_id': no such column"):
    stream(other, batch_size=2)


def test_a_shard_removed_while_streaming(tmp_path):
  data.convert_click_log(write_tsv(tmp_path / "log.tsv"), tmp_path / "o", shard_size=20, row_group_size=20)
  s = stream(tmp_path / "o", batch_size=20, prefetch=0, num_threads=0)  # no read-ahead: the test is deterministic
  next(s)
  os.remove(data.session_shard_paths(tmp_path / "o")[-1])
  with pytest.raises(FileNotFoundError, match=r"part-00002\.parquet: no such session shard"):
    list(s)


# The converter's errors are the in-memory readers' (same file, line, field, words).
TSV_HEADER = "session_id\tquery_id\tdoc_id\tposition\tclick\n"


@pytest.mark.parametrize(
  "body",
  [
    "s\tq\ta\t1\t0\ns\tq\tb\tx\t1\n",  # position not an integer
    "s\tq\ta\t1\t0\ns\tq\tb\t0\t1\n",  # below the top position
    "s\tq\ta\t1\t0\n\ns\tq\tb\t2\t3\n",  # click not 0/1 (after a blank line)
    "s\tq\ta\t1\t0\ns\tq\tb\t2\n",  # a row with too few fields
  ],
)
def test_tsv_errors_match_read_click_log(tmp_path, body):
  src = tmp_path / "log.tsv"
  src.write_text(TSV_HEADER + body)
  with pytest.raises(ValueError) as want:
    data.read_click_log(src)
  with pytest.raises(ValueError) as got:
    data.convert_click_log(src, tmp_path / "o")
  assert str(got.value) == str(want.value)
  assert not list((tmp_path / "o").glob("*"))  # nothing half-written is left


@pytest.mark.parametrize(
  "text",
  [
    _doc(1, "u", 0) + "\n",  # a document before any query line
    "1\t11\t\n" + _doc(0, "u", 0) + "\n",  # pos < 1
    "1\t11\t\n" + _doc(1, "u", 2) + "\n",  # click 2
    "1\t11\t\n" + _doc(1, "", 1) + "\n",  # empty url
    "1\t11\t\n1\t2\t3\t4\n",  # 4 fields
    "1\t11\t\n2\t12\t\n" + _doc(1, "u", 0) + "\n",  # a page without documents (a document line cut short?)
    "1\t11\t\n" + _doc(1, "u", 0) + "\n2\t12\t\n",  # the last page without documents
    # A document line cut to 3 fields: a "query line" whose qid continues the positions above it.
    "1\t11\t\n" + _doc(1, "u", 0) + "\n" + _doc(2, "v", 0) + "\n3\tx\t\n" + _doc(4, "w", 1) + "\n",
    "1\t11\t\n" + _doc(1, "u", 0) + "\n" + _doc(70000, "v", 0) + "\n",  # an absurdly large pos
    ("1\t11\t\n" + _doc(1, "u", 0) + "\n" + _doc(2, "vX", 0) + "\n").encode().replace(b"vX", b"v\xff"),  # not UTF-8
  ],
)
def test_baidu_errors_match_read_baidu_sessions(tmp_path, text):
  """One grammar: the converter reads the pages with the reader's own parser (baidu.baidu_pages)."""
  src = tmp_path / "part-00000"
  src.write_bytes(text if isinstance(text, bytes) else text.encode())
  with pytest.raises(ValueError) as want:
    data.read_baidu_sessions(src)
  with pytest.raises(ValueError) as got:
    data.convert_click_log(src, tmp_path / "o", format="baidu")
  assert str(got.value) == str(want.value)


@pytest.mark.parametrize(
  "layout, text",
  [
    ("relpred", "1\t0\tQ\t7\t2\tu1\n1\t3\tX\tu1\n"),
    ("relpred", "1\t0\tQ\t7\t2\tu1\n2\t3\tC\tu1\n"),
    ("relpred", "1\t0\tQ\t7\t2\n"),
    ("personalized", "1\tM\t3\t9\n1\t0\tQ\t0\t7\t1\tu1,d\n1\t3\tC\t5\tu1\n"),
    ("personalized", "1\tM\t3\n"),
    ("relpred", b"1\t0\tQ\t7\t2\tu1\tu\xff\n"),  # a URLID that is not UTF-8
  ],
)
def test_yandex_errors_match_read_yandex_sessions(tmp_path, layout, text):
  src = tmp_path / "log.txt"
  src.write_bytes(text if isinstance(text, bytes) else text.encode())
  with pytest.raises(ValueError) as want:
    data.read_yandex_sessions(src, layout=layout)
  with pytest.raises(ValueError) as got:
    fmt = "yandex" if layout == "relpred" else "yandex_personalized"
    data.convert_click_log(src, tmp_path / "o", format=fmt)
  assert str(got.value) == str(want.value)


@pytest.mark.parametrize(
  "body, match",
  [
    (
      "a\tq\tx\t1\t0\nb\tq\ty\t1\t0\na\tq\tz\t2\t1\n",
      r"log\.tsv:4: field 'session_id': session 'a' \(begun on line 2\)",
    ),
    ("a\tq\tx\t1\t0\na\tr\ty\t2\t0\n", r"log\.tsv:3: field 'query_id': 'r', but its session began with query 'q'"),
  ],
)
def test_tsv_sessions_must_be_contiguous_and_one_query(tmp_path, body, match):
  src = tmp_path / "log.tsv"
  src.write_text(TSV_HEADER + body)
  with pytest.raises(ValueError, match=match):
    data.convert_click_log(src, tmp_path / "o")
  assert not list((tmp_path / "o").glob("*"))


def test_tsv_without_sessions_and_a_used_directory(tmp_path):
  src = tmp_path / "log.tsv"
  src.write_text("query_id\tdoc_id\tposition\tclick\nq\ta\t1\t0\n")
  with pytest.raises(ValueError, match=r"log\.tsv:1: no session_id column"):
    data.convert_click_log(src, tmp_path / "o")
  data.convert_click_log(write_tsv(tmp_path / "log2.tsv"), tmp_path / "p")
  with pytest.raises(ValueError, match=r"p: already holds a conversion .* pass overwrite=True"):
    data.convert_click_log(tmp_path / "log2.tsv", tmp_path / "p")
