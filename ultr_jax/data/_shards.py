"""Parquet shards written in bounded memory: the one writer behind session shards and feature shards.

Private to ``ultr_jax.data``: :func:`pyarrow` imports pyarrow with an error that says which extra to install, and
:class:`ShardWriter` writes tables of rows to ``out_dir/part-NNNNN.parquet``.
"""

import os
import pathlib
from typing import Optional

#: Prefix of the shards' footer keys (``ultr_jax.source``, ``ultr_jax.num_items``, ...).
META = "ultr_jax."


def pyarrow(what: str = "shards"):
  """pyarrow with its compute and Parquet modules, or an ImportError naming the extra that brings it."""
  try:
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute  # noqa: PLC0415,F401
    import pyarrow.parquet  # noqa: PLC0415,F401
  except ImportError as e:  # pragma: no cover - pyarrow is in the test extras
    raise ImportError(f"{what} are Parquet files read with pyarrow: pip install 'ultr_jax[stream]' (or pyarrow)") from e
  return pa


class ShardWriter:
  """Writes tables of rows to ``out_dir/part-NNNNN.parquet``: ``shard_size`` rows per file, row groups of
  ``row_group_size`` rows, whatever sizes the tables come in.

  A shard is written under a temporary name and renamed when complete, so an interrupted conversion leaves no
  file a reader would take as whole; :meth:`abort` removes every file written. Each footer records ``metadata``
  and the running maxima passed to :meth:`add` (``num_items``, ``list_size``, ...: the sizes seen so far, so the
  last shard's are the whole conversion's and a reader takes the maximum over the shards it is given). Memory:
  the tables not yet written, less than a row group past the last :meth:`add`.
  """

  def __init__(self, out_dir, schema, shard_size: int, row_group_size: int, metadata: dict):
    if int(shard_size) < 1 or int(row_group_size) < 1:
      raise ValueError(f"shard_size and row_group_size must be >= 1, got {shard_size} and {row_group_size}")
    self.pa = pyarrow()
    self.out_dir = pathlib.Path(out_dir)
    self.out_dir.mkdir(parents=True, exist_ok=True)
    if any(self.out_dir.glob("*.parquet")):
      raise ValueError(f"{self.out_dir}: already holds .parquet files; write into an empty directory")
    self.schema, self.shard_size, self.row_group_size = schema, int(shard_size), int(row_group_size)
    self.metadata = dict(metadata)
    self.sizes: dict = {}
    self.paths: list = []  # completed shards
    self._writer, self._tmp, self._in_shard = None, None, 0
    self._pending: list = []
    self._pending_rows = 0

  def add(self, table, **sizes: Optional[int]) -> None:
    """Adds a table of rows (the schema's columns); ``sizes``: running maxima for the footers (None: none)."""
    for k, v in sizes.items():
      if v is not None:
        self.sizes[k] = max(self.sizes.get(k, 0), int(v))
    if not table.num_rows:
      return
    self._pending.append(table)
    self._pending_rows += table.num_rows
    while self._pending_rows >= self._room():
      self._write(self._room())

  def _room(self) -> int:
    return min(self.row_group_size, self.shard_size - self._in_shard)

  def _write(self, k: int) -> None:
    """Writes the first ``k`` pending rows as one row group."""
    table = self.pa.concat_tables(self._pending)
    head, rest = table.slice(0, k), table.slice(k)
    if self._writer is None:
      name = f"part-{len(self.paths):05d}.parquet"
      self._tmp = self.out_dir / (name + ".tmp")
      self._writer = self.pa.parquet.ParquetWriter(self._tmp, self.schema)
    self._writer.write_table(head, row_group_size=k)
    self._in_shard += k
    self._pending = [rest] if rest.num_rows else []
    self._pending_rows -= k
    if self._in_shard >= self.shard_size:
      self._close()

  def _close(self) -> None:
    if self._writer is None:
      return
    meta = {**self.metadata, **self.sizes}
    self._writer.add_key_value_metadata({META + k: str(v) for k, v in meta.items()})
    self._writer.close()
    final = self._tmp.with_suffix("")  # drops .tmp
    os.replace(self._tmp, final)
    self.paths.append(str(final))
    self._writer, self._tmp, self._in_shard = None, None, 0

  def end_shard(self, **metadata) -> None:
    """Writes the pending rows and closes the current shard; later shards' footers take ``metadata``."""
    while self._pending_rows:
      self._write(min(self._room(), self._pending_rows))
    self._close()
    self.metadata.update(metadata)

  def finish(self) -> list:
    """Writes the pending rows, closes the last shard and returns every shard's path, in order."""
    self.end_shard()
    return list(self.paths)

  def abort(self) -> None:
    """Closes and removes every shard this writer wrote."""
    if self._writer is not None:
      self._writer.close()
    for p in [*self.paths, self._tmp]:
      if p is not None and os.path.exists(p):
        os.remove(p)
