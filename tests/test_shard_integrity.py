"""Shards prove their integrity, conversions are whole or visibly not, and a stream's state and identity name
its shard set (issue 37): every case gives the right data or a ValueError naming the file."""

import gc
import json
import os
import pathlib
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.feather
import pyarrow.parquet as pq
import pytest

from ultr_jax import data
from ultr_jax.data import _shards, convert
from conftest import assert_batches_equal

HEADER = "session_id\tquery_id\tdoc_id\tposition\tclick\n"


def write_tsv(path, seed=0, num_sessions=40):
  rng = np.random.default_rng(seed)
  lines = [HEADER]
  for s in range(num_sessions):
    q = f"q{rng.integers(4)}"
    for pos in range(1, int(rng.integers(1, 5)) + 1):
      lines.append(f"s{s}\t{q}\td{rng.integers(9)}\t{pos}\t{int(rng.random() < 0.4)}\n")
  path.write_text("".join(lines))
  return path


def session_shards(d, seed=0):
  return data.convert_click_log(write_tsv(d.parent / f"{d.name}.tsv", seed), d, shard_size=15, row_group_size=5)


def feature_shards(d, seed=0):
  ds = data.make_synthetic(num_train=30, num_valid=1, num_test=1, list_size=4, num_features=3, seed=seed).train
  return data.write_feature_shards(ds, d, shard_size=12, row_group_size=4)


def baidu_shards(d, seed=0):
  rng = np.random.default_rng(seed)
  qid = np.repeat(np.arange(12), 3)
  table = pa.table(
    {
      "query_id": qid,
      "position": np.tile([1, 2, 3], 12),
      "click": rng.integers(0, 2, len(qid)),
      "bm25": rng.random(len(qid)),
    }
  )
  src = d.parent / f"{d.name}.feather"
  pa.feather.write_feather(table, src)
  return data.convert_baidu_ultr(src, d, features=["bm25"], shard_size=5, row_group_size=2)


KINDS = {"session": session_shards, "features": feature_shards, "baidu": baidu_shards}


def read(kind, source, **kw):
  kw = {"batch_size": 4, "process_index": 0, "process_count": 1, "num_threads": 0, "prefetch": 0, **kw}
  stream = data.SessionStream(source, **kw) if kind == "session" else data.FeatureStream(source, **kw)
  return stream, list(stream)


# ----------------------------------------------------------------------------
# 1. Shard integrity.


def _flip(path, offset):
  raw = bytearray(pathlib.Path(path).read_bytes())
  raw[offset] ^= 0x10
  pathlib.Path(path).write_bytes(bytes(raw))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("region", ["page", "footer"])
def test_a_flipped_byte_is_an_error_naming_the_file(tmp_path, kind, region):
  paths = KINDS[kind](tmp_path / "s")
  target = paths[1]
  md = pq.ParquetFile(target).metadata
  if region == "page":  # inside a data page of the second row group (past its page header)
    col = md.row_group(1).column(1)
    offset = col.data_page_offset + col.total_compressed_size - 3
    match = rf"{target}, row group 1 \(rows from \d+\): cannot read it \(a damaged or truncated"
  else:
    offset = os.path.getsize(target) - 8 - md.serialized_size // 2
    match = rf"{target}: its footer fails the manifest's checksum"
  _flip(target, offset)
  with pytest.raises(ValueError, match=match):
    read(kind, tmp_path / "s")


def test_shards_carry_page_checksums(tmp_path):
  """A flip that pyarrow alone decodes into other document ids (the silent wrong result) is an error."""
  batch = {"doc_ids": np.arange(400).reshape(200, 2), "clicks": np.zeros((200, 2))}
  (path,) = data.write_session_shards([batch], tmp_path / "s")
  raw = pathlib.Path(path).read_bytes()
  col = pq.ParquetFile(path).metadata.row_group(0).column(2)  # doc_ids
  want = pq.read_table(path)
  silent = 0
  start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
  for offset in range(start + 40, start + col.total_compressed_size, 7):
    bad = bytearray(raw)
    bad[offset] ^= 0x04
    pathlib.Path(path).write_bytes(bytes(bad))
    try:
      got = pq.read_table(path)  # without the page checksums verified
    except (OSError, pa.ArrowException):
      got = want
    if got.equals(want):
      continue
    silent += 1
    with pytest.raises(ValueError, match=rf"{path}, row group 0 .*cannot read it"):
      data.read_session_shards(tmp_path / "s")
  assert silent >= 3  # the flips that pass unseen without checksums are there, and each is caught


@pytest.mark.parametrize(
  "reader",
  [
    lambda p: data.SessionStream(p, batch_size=2, process_count=1),
    data.read_session_shards,
    data.open_click_log,
  ],
)
def test_a_parquet_file_written_elsewhere_is_refused_by_name(tmp_path, reader):
  """A file with the session columns but without ultr_jax's footer keys and manifest (plain pyarrow)."""
  table = pq.read_table(session_shards(tmp_path / "s")[0]).replace_schema_metadata(None)
  (tmp_path / "plain").mkdir()
  pq.write_table(table, tmp_path / "plain" / "part-00000.parquet")
  with pytest.raises(ValueError, match=r"plain/part-00000\.parquet: not a session shard written by ultr_jax"):
    reader(tmp_path / "plain")


def test_a_damaged_manifest_names_it(tmp_path):
  session_shards(tmp_path / "s")
  m = tmp_path / "s" / "_manifest.json"
  body = json.loads(m.read_text())
  body["sizes"]["num_items"] += 1
  m.write_text(json.dumps(body))
  with pytest.raises(ValueError, match=r"s/_manifest\.json: a damaged or edited manifest"):
    data.SessionStream(tmp_path / "s", batch_size=2, process_count=1)


# ----------------------------------------------------------------------------
# 2. Incomplete and mixed shard sets.


def _interrupted(tmp_path, kind, leave_tmp):
  """A conversion killed before it finished: its shards so far, no manifest (and maybe a shard being written)."""
  KINDS[kind](tmp_path / "full")
  d = tmp_path / "killed"
  d.mkdir()
  for p in sorted((tmp_path / "full").glob("part-*.parquet"))[:2]:
    shutil.copy(p, d / p.name)
  if leave_tmp:
    (d / "part-00002.parquet.tmp").write_bytes(b"PAR1 half a row group")
  return d


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("leave_tmp", [False, True])
def test_an_interrupted_conversion_is_refused_naming_the_flag(tmp_path, kind, leave_tmp):
  d = _interrupted(tmp_path, kind, leave_tmp)
  match = r"killed.*(no _manifest\.json|an interrupted conversion).*overwrite=True"
  with pytest.raises(ValueError, match=match):
    read(kind, d)
  with pytest.raises(ValueError, match=match):  # nor any of its files named one by one
    read(kind, sorted(d.glob("*.parquet")))
  if kind == "session":
    with pytest.raises(ValueError, match=match):
      data.open_click_log(d)
    with pytest.raises(ValueError, match=match):
      data.read_session_shards(d)


@pytest.mark.parametrize("kind", KINDS)
def test_converting_into_a_used_directory_needs_overwrite(tmp_path, kind):
  d = _interrupted(tmp_path, kind, leave_tmp=True)
  (d / "notes.txt").write_text("kept")
  with pytest.raises(ValueError, match=r"killed: holds 3 shard file\(s\).*no _manifest\.json.*pass overwrite=True"):
    KINDS[kind](d)
  assert sorted(p.name for p in d.iterdir()) == [
    "notes.txt",
    "part-00000.parquet",
    "part-00001.parquet",
    "part-00002.parquet.tmp",
  ]  # nothing removed
  convert_again = {"session": data.convert_click_log, "features": None, "baidu": data.convert_baidu_ultr}[kind]
  if convert_again is None:
    ds = data.make_synthetic(num_train=30, num_valid=1, num_test=1, list_size=4, num_features=3, seed=0).train
    data.write_feature_shards(ds, d, shard_size=12, row_group_size=4, overwrite=True)
  elif kind == "session":
    data.convert_click_log(tmp_path / "full.tsv", d, shard_size=15, row_group_size=5, overwrite=True)
  else:
    data.convert_baidu_ultr(
      tmp_path / "full.feather", d, features=["bm25"], shard_size=5, row_group_size=2, overwrite=True
    )
  assert (d / "notes.txt").read_text() == "kept"
  assert not list(d.glob("*.tmp"))
  (_, want), (_, got) = read(kind, tmp_path / "full"), read(kind, d)
  assert_batches_equal(got, want)
  with pytest.raises(ValueError, match=r"killed: already holds a conversion .*pass overwrite=True"):
    KINDS[kind](d)


def test_overwrite_never_removes_a_foreign_parquet_file(tmp_path):
  session_shards(tmp_path / "s")
  pq.write_table(pa.table({"x": [1]}), tmp_path / "s" / "mine.parquet")
  with pytest.raises(ValueError, match=r"s: holds mine\.parquet, a Parquet file that is not a shard written here"):
    data.convert_click_log(tmp_path / "s.tsv", tmp_path / "s", overwrite=True)
  assert (tmp_path / "s" / "mine.parquet").exists() and (tmp_path / "s" / "_manifest.json").exists()


def test_a_directory_holding_only_a_temporary_shard_is_not_a_text_log(tmp_path):
  (tmp_path / "d").mkdir()
  (tmp_path / "d" / "part-00000.parquet.tmp").write_bytes(b"PAR1\x00\x01")
  with pytest.raises(ValueError, match=r"d: holds part-00000\.parquet\.tmp, a shard being written.*overwrite=True"):
    data.open_click_log(tmp_path / "d")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["extra file", "same name", "two directories"])
def test_shards_of_two_conversions_are_refused(tmp_path, kind, how):
  a, b = KINDS[kind](tmp_path / "a", seed=0), KINDS[kind](tmp_path / "b", seed=1)
  if how == "extra file":
    shutil.copy(b[0], tmp_path / "a" / "part-00077.parquet")
    source, match = tmp_path / "a", r"a/part-00077\.parquet: not listed in .*a/_manifest\.json"
  elif how == "same name":
    shutil.copy(b[1], a[1])
    source, match = tmp_path / "a", rf"{a[1]}: (\d+ bytes where the manifest records|its footer fails the manifest)"
  else:
    source, match = [a[0], b[1]], r"a/part-00000\.parquet and .*b/part-00001\.parquet: shards of two conversions"
  with pytest.raises(ValueError, match=match):
    read(kind, source)


@pytest.mark.parametrize("blank", ["\n", "\r\n", "\t\t\t\t\n", "  \n"])
def test_a_blank_line_is_one_rule_and_no_pair_of_the_vocabulary(tmp_path, blank):
  """Arrow reads a blank line as a row of empty fields: counted, it would shift every id. The converter's two
  parsers and the in-memory reader agree: an empty line is skipped, one of blanks or empty fields is an error."""
  p = tmp_path / "log.tsv"
  p.write_bytes((HEADER + "s1\tq\ta\t1\t0\ns1\tq\tb\t2\t1\n" + blank + "s2\tq\tb\t1\t1\n" + blank).encode())
  try:
    arrow = convert._tsv_vocabulary_arrow([p], delimiter=None, extra_columns=())
  except convert._Fallback:
    arrow = None
  if blank.strip("\r\n"):
    with pytest.raises(ValueError, match=rf"{p}:4"):
      data.read_click_log(p)
    with pytest.raises(ValueError, match=rf"{p}:4"):
      data.convert_click_log(p, tmp_path / "o")
    return
  assert arrow in (None, convert._tsv_vocabulary([p], delimiter=None, extra_columns=()))
  log = data.read_session_shards(data.convert_click_log(p, tmp_path / "o"))
  assert log.items.tolist() == data.read_click_log(p).items.tolist() == [0, 1, 1]


def test_the_same_log_converted_again_has_the_same_conversion_id(tmp_path):
  src = write_tsv(tmp_path / "log.tsv")
  data.convert_click_log(src, tmp_path / "a", shard_size=15)
  data.convert_click_log(src, tmp_path / "b", shard_size=15)
  data.convert_click_log(src, tmp_path / "c", shard_size=16)
  ids = [_shards.read_manifest(tmp_path / d)["conversion_id"] for d in "abc"]
  assert ids[0] == ids[1] != ids[2]


# ----------------------------------------------------------------------------
# 3. A stream's state and identity name its shard set.


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_is_refused_on_a_stream_over_other_shards(tmp_path, kind):
  KINDS[kind](tmp_path / "a", seed=0)
  KINDS[kind](tmp_path / "b", seed=1)  # the same shapes, other data
  s, _ = read(kind, tmp_path / "a")
  s = read(kind, tmp_path / "a")[0]
  next(iter(s))
  state = s.get_state()
  other = read(kind, tmp_path / "b")[0]
  with pytest.raises(ValueError, match=r"the state is of a stream over other shards \(conversion \w+"):
    other.set_state(state)
  subset = read(kind, sorted((tmp_path / "a").glob("*.parquet"))[:2])[0]
  with pytest.raises(ValueError, match=r"other shards .* files part-00000\.parquet, part-00001\.parquet\)"):
    subset.set_state(state)
  again = read(kind, tmp_path / "a")[0]
  again.set_state(state)  # the same shards, the same arguments: resumes


@pytest.mark.parametrize("kind", KINDS)
def test_identity_names_the_shards_and_the_options_that_change_the_batches(tmp_path, kind):
  KINDS[kind](tmp_path / "a", seed=0)
  KINDS[kind](tmp_path / "b", seed=1)
  base = read(kind, tmp_path / "a")[0].identity()
  assert len(base) == 64 and int(base, 16) >= 0
  shutil.copytree(tmp_path / "a", tmp_path / "moved")
  same = [
    read(kind, tmp_path / "a")[0],
    read(kind, tmp_path / "moved")[0],  # a conversion moved keeps its identity
    read(kind, tmp_path / "a", num_threads=2, prefetch=3)[0],  # how it is read does not change the batches
  ]
  assert {s.identity() for s in same} == {base}
  others = [
    read(kind, tmp_path / "b")[0],
    read(kind, sorted((tmp_path / "a").glob("*.parquet"))[:2])[0],
    read(kind, tmp_path / "a", batch_size=3)[0],
    read(kind, tmp_path / "a", shuffle=True)[0],
    read(kind, tmp_path / "a", shuffle=True, seed=1)[0],
    read(kind, tmp_path / "a", list_size=9)[0],
    read(kind, tmp_path / "a", num_epochs=2)[0],
    read(kind, tmp_path / "a", process_index=1, process_count=2)[0],
  ]
  ids = [s.identity() for s in others]
  assert base not in ids and len(set(ids)) == len(ids)


# ----------------------------------------------------------------------------
# 9. The smaller items.


def test_a_session_that_resumes_is_one_rule_for_both_readers(tmp_path):
  p = tmp_path / "log.tsv"
  p.write_text(HEADER + "s1\tq\ta\t1\t0\ns2\tq\tb\t1\t1\n\ns1\tq\tb\t2\t1\n")
  match = rf"{p}:5: field 'session_id': session 's1' \(begun on line 2\) resumes after other sessions"
  with pytest.raises(ValueError, match=match):
    data.read_click_log(p)
  with pytest.raises(ValueError, match=match):
    data.convert_click_log(p, tmp_path / "o")


def test_a_stream_outlives_its_click_log_object(tmp_path):
  src = write_tsv(tmp_path / "log.tsv")
  want = list(data.session_batches(data.read_click_log(src), batch_size=8))
  stream = data.open_click_log(src, tmp_dir=tmp_path / "tmp").stream(batch_size=8, process_count=1)
  gc.collect()  # the StreamedClickLog is gone from the caller's hands
  assert_batches_equal(list(stream), want)
  del stream
  gc.collect()
  assert not list((tmp_path / "tmp").iterdir())  # and its temporary shards with the last stream
