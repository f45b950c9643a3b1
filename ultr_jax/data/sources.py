r"""One entry point for a click log of any supported kind, streamed as fixed-shape session batches.

:func:`open_click_log` takes a file, a glob, a directory or a list of them, in any of the formats
the library reads (the delimited rows of :func:`~ultr_jax.data.read_click_log`, raw Baidu-ULTR
``part-*.gz`` session files, the Yandex logs: :data:`~ultr_jax.data.CLICK_LOG_FORMATS`; or the
Parquet session shards of :func:`~ultr_jax.data.convert_click_log`), and gives a
:class:`StreamedClickLog` whose :meth:`~StreamedClickLog.stream` is a
:class:`~ultr_jax.data.SessionStream` over it: ``[B, L]`` batches in bounded memory, never the log.

**How a text log is streamed.** It is converted, once, by
:func:`~ultr_jax.data.convert_click_log` into Parquet session shards in a temporary directory
(removed by :meth:`~StreamedClickLog.close`, or when the object is collected), and the shards are
streamed. The converter reads line by line and holds one row group and the (query, document)
vocabulary, so the whole path is in bounded memory. Converting instead of parsing the text on every
pass, because:

* the consumers make several passes (the click-model study gathers each model's statistics in one
  pass and scores the held-out sessions in another; a minibatch fit makes one per epoch); Parquet
  reads several times faster than the text parses (the stream's sessions per second are in
  ``benchmarks/RESULTS.md``, section "Streaming input"), so from the second pass on conversion is cheaper;
* a stream needs, before its first batch, what only a whole pass over the text can tell: the
  vocabulary size (the ids of the in-memory readers, sorted for a delimited log) and the longest list
  (the batches' fixed shape), which the shards' footers record;
* one reader and one set of checks then serves every format, with Grain's seeded shuffle,
  per-process split and resumable state (:class:`~ultr_jax.data.SessionStream`).

The cost is disk: the shards (a fraction of the text's size; pass ``shard_dir`` to keep them, and
the directory as the source next time, so a log is converted once). For several processes, convert
once with :func:`~ultr_jax.data.convert_click_log` and give every process the shard directory.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
import weakref
from typing import Optional, Sequence, Union

from ultr_jax.data import _io
from ultr_jax.data import _shards
from ultr_jax.data.click_log import CLICK_LOG_FORMATS
from ultr_jax.data.convert import convert_click_log, session_shard_set
from ultr_jax.data.stream import SessionStream

__all__ = ["StreamedClickLog", "click_log_files", "open_click_log"]

PathLike = Union[str, os.PathLike]


def click_log_files(source: Union[PathLike, Sequence[PathLike]]) -> list:
  """The files of ``source``: a file, a glob, a directory, or a list of them, in order and without duplicates.

  A directory gives the session shards its manifest lists where it has one (``_manifest.json``), its
  ``*.parquet`` files where it holds any (the readers then refuse them without a manifest), else every
  file in it (hidden ones, ``_``-prefixed ones excepted), sorted by name, as Baidu-ULTR's
  ``part-00000.gz, part-00001.gz, ...``.

  Args:
    source: a file, a glob pattern, a directory, or a list of them (read in the list's order).

  Returns:
    The file paths (strings), in order, without duplicates.

  Raises:
    FileNotFoundError: a file that does not exist, or a glob or directory that matches no file
      (naming it).
    ValueError: a directory holding an interrupted conversion's temporary shard (``*.parquet.tmp``) or files
      its manifest does not list (naming the file).

  >>> click_log_files("/nonexistent/part-*.gz")
  Traceback (most recent call last):
  ...
  FileNotFoundError: /nonexistent/part-*.gz: no files match
  """

  def directory(d: pathlib.Path) -> list:  # its session shards, else every visible file
    if (d / _shards.MANIFEST).exists() or any(d.glob("*.parquet" + _shards.TMP_SUFFIX)):
      return _shards.manifest_paths(d, "session shards")
    files = sorted(p for p in d.iterdir() if p.is_file() and not p.name.startswith((".", "_")))
    return [p for p in files if p.suffix == ".parquet"] or files

  return _io.expand_sources(source, what="files", directory=directory)


class StreamedClickLog:
  """A click log ready to stream: its session shards and their sizes (made by :func:`open_click_log`).

  Attributes:
    shards: the Parquet session shards (converted from the source, or the source itself).
    format: the source's format (one of :data:`~ultr_jax.data.CLICK_LOG_FORMATS`, from the shards'
      metadata for shards).
    converted: whether the shards were converted from text by :func:`open_click_log`.
    num_docs: the vocabulary size: ``doc_ids`` lie in ``[0, num_docs)`` (the ids
      :func:`~ultr_jax.data.read_click_log` gives the source's (query, document) pairs).
    list_size: the longest list (largest 0-based position + 1) over all shards.
    num_sessions: the sessions of all shards.
  """

  def __init__(self, shards: list, fmt: str, *, converted: bool, owned_dir: Optional[str] = None):
    self.shards = list(shards)
    self.format = fmt
    self.converted = converted
    shard_set = session_shard_set(self.shards)
    sizes = shard_set.sizes
    self.num_docs, self.list_size = int(sizes.get("num_items", 0)), int(sizes.get("num_positions", 0))
    self.num_sessions = sum(shard_set.metadata[p].num_rows for p in self.shards)
    self._cleanup = weakref.finalize(self, shutil.rmtree, owned_dir, True) if owned_dir else None

  def stream(self, *, batch_size: int, **kwargs) -> SessionStream:
    """A fresh :class:`~ultr_jax.data.SessionStream` over the shards (one pass unless ``num_epochs`` says more).

    Args:
      batch_size: ``B`` sessions per batch.
      **kwargs: :class:`~ultr_jax.data.SessionStream`'s (``list_size``, ``shuffle``, ``seed``,
        ``num_epochs``, ``process_index``, ``process_count``, ...).

    Returns:
      A :class:`~ultr_jax.data.SessionStream` that keeps this log (and so its converted shards) alive.

    Raises:
      ValueError: the log is closed (its converted shards are gone), or the errors of
        :class:`~ultr_jax.data.SessionStream`.
    """
    if self.closed:
      raise ValueError("the click log is closed: its converted shards are gone")
    stream = SessionStream(self.shards, batch_size=batch_size, **kwargs)
    stream._log = self  # the stream keeps the log, and so its converted shards, alive
    return stream

  @property
  def closed(self) -> bool:
    """Whether :meth:`close` removed the shards :func:`open_click_log` converted (a log of given shards never
    closes)."""
    return self._cleanup is not None and not self._cleanup.alive

  def close(self) -> None:
    """Removes the shards :func:`open_click_log` converted into a temporary directory (nothing else)."""
    if self._cleanup is not None:
      self._cleanup()

  def __enter__(self) -> "StreamedClickLog":
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def __repr__(self) -> str:
    return (
      f"StreamedClickLog({len(self.shards)} shards, format={self.format!r}, sessions={self.num_sessions}, "
      f"num_docs={self.num_docs}, list_size={self.list_size}, converted={self.converted})"
    )


def open_click_log(
  source: Union[PathLike, Sequence[PathLike]],
  *,
  format: str = "tsv",  # pylint: disable=redefined-builtin
  shard_dir: Optional[PathLike] = None,
  tmp_dir: Optional[PathLike] = None,
  shard_size: int = 1 << 20,
  row_group_size: int = 4096,
  delimiter: Optional[str] = None,
  position_base: int = 1,
  query_key: str = "query",
  max_sessions: Optional[int] = None,
  overwrite: bool = False,
) -> StreamedClickLog:
  r"""Opens a click log of any supported kind for streaming (see the module docstring for how).

  Parquet files are session shards, whatever ``format`` says (their footers say what they were
  converted from); any other files are text logs in ``format``, converted as one log (one
  vocabulary, sessions numbered on from file to file) into session shards, in ``shard_dir`` when
  given (kept), else in a temporary directory under ``tmp_dir`` (removed by
  :meth:`StreamedClickLog.close`; use the result as a context manager). The batches of
  :meth:`StreamedClickLog.stream` equal :func:`~ultr_jax.data.session_batches` of the in-memory
  reader's log (``read_click_log(path, format=format)`` of a single file).

  Args:
    source: a file, a glob, a directory or a list of them (:func:`click_log_files`).
    format: the text logs' format, one of :data:`~ultr_jax.data.CLICK_LOG_FORMATS`.
    shard_dir: keep the conversion here (an empty or new directory; with ``overwrite``, one holding a
      previous or interrupted conversion, which is replaced).
    tmp_dir: where the temporary directory goes (default: the system's, ``$TMPDIR``; the shards take a
      fraction of the text's size: 187 MB for the 266 MB log of 10^6 sessions of ``benchmarks/stream_memory.py``).
    shard_size: sessions per shard file (:func:`~ultr_jax.data.convert_click_log`'s).
    row_group_size: sessions per Parquet row group (:func:`~ultr_jax.data.convert_click_log`'s).
    delimiter: the column separator of a ``"tsv"`` log (None: a tab if the header has one, else a comma).
    position_base: the rank of the top position in a ``"tsv"`` log (1, or 0).
    query_key: what makes two pages of a ``"baidu"`` log the same query (``"query"`` or ``"qid"``), as in
      :func:`~ultr_jax.data.read_baidu_sessions`.
    max_sessions: convert only the first this many sessions (over all files; None: all).
    overwrite: with ``shard_dir``, replace a conversion already there (complete or interrupted).

  Returns:
    A :class:`StreamedClickLog`.

  Raises:
    FileNotFoundError: a missing file, or a glob or directory without files (naming it).
    ValueError: Parquet and text files mixed; the conversion's errors (the in-memory readers',
      naming the file, line and field), after which nothing of the conversion is left.

  >>> import pathlib, tempfile
  >>> d = pathlib.Path(tempfile.mkdtemp())
  >>> for k in range(2):
  ...   _ = (d / f"part-{k}.tsv").write_text("session_id\tquery_id\tdoc_id\tposition\tclick\n"
  ...                                        f"s{k}\tq\ta\t1\t{k}\ns{k}\tq\tb\t2\t1\n")
  >>> with open_click_log(d / "part-*.tsv") as log:
  ...   print(log.num_sessions, log.num_docs, log.list_size)
  ...   print([b["clicks"].tolist() for b in log.stream(batch_size=2, process_index=0, process_count=1)])
  2 2 2
  [[[0.0, 1.0], [1.0, 1.0]]]
  """
  if format not in CLICK_LOG_FORMATS:
    raise ValueError(f"format must be one of {CLICK_LOG_FORMATS}, got {format!r}")
  files = click_log_files(source)
  parquet = [f for f in files if f.endswith(".parquet")]
  if parquet:
    if len(parquet) != len(files):
      text = next(f for f in files if not f.endswith(".parquet"))
      raise ValueError(f"{text}: a text log among Parquet session shards; give one kind of source")
    if max_sessions is not None:
      raise ValueError("max_sessions: session shards are streamed whole (it applies to a text log's conversion)")
    shards = session_shard_set(parquet)
    return StreamedClickLog(parquet, shards.footers[parquet[0]].get("format", "tsv"), converted=False)
  if shard_dir is not None:
    out, owned = pathlib.Path(shard_dir), None
  else:
    if tmp_dir is not None:
      os.makedirs(tmp_dir, exist_ok=True)
    out = owned = tempfile.mkdtemp(prefix="ultr_jax_shards_", dir=tmp_dir)
  try:
    shards = convert_click_log(
      files,
      out,
      format=format,
      shard_size=shard_size,
      row_group_size=row_group_size,
      delimiter=delimiter,
      position_base=position_base,
      query_key=query_key,
      max_sessions=max_sessions,
      overwrite=overwrite,
    )
  except BaseException:
    if owned:
      shutil.rmtree(owned, ignore_errors=True)
    raise
  return StreamedClickLog(shards, format, converted=True, owned_dir=owned)
