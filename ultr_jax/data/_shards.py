"""Parquet shards written in bounded memory and read back only when whole: the one writer and the checks behind
session shards, feature shards and Baidu-ULTR's feature shards.

Private to ``ultr_jax.data``. :class:`ShardWriter` writes tables of rows to ``out_dir/part-NNNNN.parquet`` with a
CRC-32 on every Parquet page (``write_page_checksum``), and, last, the **manifest** ``out_dir/_manifest.json``:
every shard's name, rows, bytes, CRC-32 and footer CRC-32, the conversion's sizes (vocabulary, list size), its
options and a ``conversion_id`` (the SHA-256 of all that, so the same data converted again gets the same id).
A directory without a manifest is a conversion that did not finish, and no reader takes it.

:func:`shard_set` is the readers' side: the given shards must all be listed by one manifest, and each is
opened by :func:`open_shard` only when its size and footer match the manifest's (a flipped byte in the footer
is caught there); pages are read with ``page_checksum_verification``, so a flipped byte in a page's data is an
error. Every error names the file.
"""

import contextlib
import functools
import hashlib
import inspect
import json
import os
import pathlib
import re
import types
import zlib
from typing import Any, Callable, Iterator, Optional, TypeVar

from ultr_jax import _workdir
from ultr_jax._state_files import check_shape, read_state_file

#: Prefix of the shards' footer keys (``ultr_jax.source``, ``ultr_jax.num_items``, ...).
META = "ultr_jax."
#: The manifest's file name in a shard directory (a leading ``_``: Parquet tools skip it).
MANIFEST = "_manifest.json"
MANIFEST_VERSION = 1
#: The shards' file names.
SHARD_NAME = re.compile(r"part-[0-9]{5}\.parquet")
TMP_SUFFIX = ".tmp"
_CRC_BLOCK = 1 << 22


def pyarrow(what: str = "shards") -> types.ModuleType:
  """pyarrow with its compute and Parquet modules, or an ImportError naming the extra that brings it.

  Typed as a plain module: pyarrow ships no stubs and generates ``pyarrow.compute``'s functions at import time.
  """
  try:
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute  # noqa: PLC0415,F401
    import pyarrow.parquet  # noqa: PLC0415,F401
  except ImportError as e:  # pragma: no cover - pyarrow is in the test extras
    raise ImportError(f"{what} are Parquet files read with pyarrow: pip install 'ultr_jax[stream]' (or pyarrow)") from e
  return pa


def digest(value) -> str:
  """SHA-256 (hex) of ``value``'s canonical JSON (sorted keys): the same value gives the same digest anywhere."""
  text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
  return hashlib.sha256(text.encode("utf-8")).hexdigest()


def vocabulary_digest(keys) -> str:
  """SHA-256 (hex) of a vocabulary's keys in id order (``keys[i]`` is the key of id ``i``)."""
  h = hashlib.sha256()
  for k in keys:
    h.update(repr(k).encode("utf-8", "backslashreplace") + b"\n")
  return h.hexdigest()


def _file_crc(path) -> int:
  crc = 0
  with open(path, "rb") as fh:
    while True:
      block = fh.read(_CRC_BLOCK)
      if not block:
        return crc
      crc = zlib.crc32(block, crc)


def _footer(path, size: int) -> tuple:
  """``(offset, bytes)`` of a Parquet file's footer (its metadata, length and magic); ValueError naming it."""
  with open(path, "rb") as fh:
    if size < 12:
      raise ValueError(f"{path}: {size} bytes, too short for a Parquet file (truncated?)")
    fh.seek(size - 8)
    tail = fh.read(8)
    length = int.from_bytes(tail[:4], "little")
    if tail[4:] != b"PAR1" or length > size - 12:
      raise ValueError(f"{path}: no Parquet footer at its end (a truncated or damaged file)")
    fh.seek(size - 8 - length)
    return size - 8 - length, fh.read(length + 8)


def _entry(path: str) -> dict:
  """The manifest's record of a completed shard."""
  size = os.path.getsize(path)
  offset, footer = _footer(path, size)
  return {
    "name": os.path.basename(path),
    "bytes": size,
    "crc32": _file_crc(path),
    "footer_offset": offset,
    "footer_crc32": zlib.crc32(footer),
  }


@contextlib.contextmanager
def converting(out_dir) -> Iterator[None]:
  """Holds ``out_dir`` for one conversion with the binaries' exclusive workdir lock (its ``IN_PROGRESS``,
  :mod:`ultr_jax._workdir`): a second writer is refused naming the first. A conversion stopped by bad input (a
  ``ValueError`` or a missing file, which the error names) leaves the directory as it was; one that fails for any
  other reason (a full disk, an interrupt) leaves the marker with ``failed: <error>``, and one killed leaves it as
  it was, so every reader reports the directory as incomplete (:func:`check_complete`) until a conversion with
  ``overwrite=True`` replaces it.

  >>> import tempfile
  >>> d = tempfile.mkdtemp()
  >>> with converting(d):
  ...   print(sorted(os.listdir(d)))
  ['IN_PROGRESS']
  >>> os.listdir(d)
  []
  """
  created = not os.path.exists(out_dir)
  _workdir.acquire(str(out_dir))  # WorkdirLockedError: another live conversion (or run) holds it
  try:
    yield
  except (ValueError, FileNotFoundError):  # bad input, named by the error: the directory is left as it was
    _workdir.release(str(out_dir))
    if created:
      with contextlib.suppress(OSError):
        os.rmdir(out_dir)  # only when empty
    raise
  except BaseException as e:  # a full disk, an interrupt, a kill: readers report the directory incomplete
    _workdir.release(str(out_dir), failure=f"{type(e).__name__}: {e}".replace("\n", " "))
    raise
  _workdir.release(str(out_dir))


_F = TypeVar("_F", bound=Callable[..., Any])


def converts_into_out_dir(fn: _F) -> _F:
  """Runs the conversion ``fn`` (which takes an ``out_dir`` argument) under :func:`converting` ``(out_dir)``."""
  signature = inspect.signature(fn)

  @functools.wraps(fn)
  def locked(*args, **kwargs):
    with converting(signature.bind(*args, **kwargs).arguments["out_dir"]):
      return fn(*args, **kwargs)

  return locked  # type: ignore[return-value]


def check_complete(directory, what: str = "shards") -> None:
  """Refuses a directory another conversion is writing or did not finish (its ``IN_PROGRESS`` marker).

  Raises:
    ValueError: ``"<directory>: an incomplete conversion of <what>: <why>; ..."`` with how to restart.
  """
  why = _workdir.unfinished(str(directory))
  if why is not None:
    raise ValueError(
      f"{directory}: an incomplete conversion of {what}: {why}. Convert again with overwrite=True to restart it "
      f"(a conversion does not resume); if it did finish and only the marker is left, delete {_workdir.LOCK_NAME}"
    )


def prepare_out_dir(out_dir, overwrite: bool = False, *, create: bool = True) -> pathlib.Path:
  """``out_dir``, created (``create``), with no shard, temporary shard or manifest in it.

  With ``overwrite``, a previous conversion's files there (``part-NNNNN.parquet``, their ``.tmp`` and the
  manifest; the manifest first, so a crash in between leaves a directory no reader takes) are removed; any
  other ``.parquet`` file is never removed (it is an error). Without, any of them is an error naming the flag.
  """
  out_dir = pathlib.Path(out_dir)
  if create:
    out_dir.mkdir(parents=True, exist_ok=True)
  elif not out_dir.is_dir():
    return out_dir
  manifest = out_dir / MANIFEST
  ours = sorted(p for p in out_dir.iterdir() if SHARD_NAME.fullmatch(p.name.removesuffix(TMP_SUFFIX)))
  foreign = sorted(p.name for p in out_dir.glob("*.parquet") if not SHARD_NAME.fullmatch(p.name))
  if foreign:
    raise ValueError(
      f"{out_dir}: holds {foreign[0]}, a Parquet file that is not a shard written here; write into an empty "
      "directory (overwrite=True removes only a previous conversion's part-NNNNN.parquet and _manifest.json)"
    )
  if not ours and not manifest.exists():
    return out_dir
  if not overwrite:
    if manifest.exists():
      why = f"already holds a conversion ({manifest.name}, {len(ours)} shard files)"
    else:
      why = f"holds {len(ours)} shard file(s) ({ours[0].name}, ...) but no {MANIFEST}: an interrupted conversion"
    raise ValueError(f"{out_dir}: {why}; pass overwrite=True to replace it, or use an empty directory")
  if manifest.exists():
    manifest.unlink()
  for p in ours:
    p.unlink()
  return out_dir


@contextlib.contextmanager
def _naming(path) -> Iterator[None]:
  """An ``OSError`` while writing ``path`` (a full disk, a lost mount) re-raised naming the file."""
  try:
    yield
  except OSError as e:
    if str(path) in str(e):
      raise
    if e.errno is None:
      raise OSError(f"{path}: {e} (while writing it)") from e
    raise OSError(e.errno, f"{path}: {e.strerror or e} (while writing it)") from e


class ShardWriter:
  """Writes tables of rows to ``out_dir/part-NNNNN.parquet``: ``shard_size`` rows per file, row groups of
  ``row_group_size`` rows, whatever sizes the tables come in; :meth:`finish` writes the manifest.

  A shard is written under a temporary name (``.tmp``) and renamed when complete, and the manifest is written
  last (atomically), so an interrupted conversion leaves a directory that no reader takes; :meth:`abort`
  removes every file written. Each footer records ``metadata`` and the running maxima passed to :meth:`add`
  (``num_items``, ``list_size``, ...); the manifest records the whole conversion's. Every page carries a CRC-32.
  Memory: the tables not yet written, less than a row group past the last :meth:`add`.
  """

  def __init__(self, out_dir, schema, shard_size: int, row_group_size: int, metadata: dict, *, overwrite: bool = False):
    if int(shard_size) < 1 or int(row_group_size) < 1:
      raise ValueError(f"shard_size and row_group_size must be >= 1, got {shard_size} and {row_group_size}")
    self.pa = pyarrow()
    self.out_dir = prepare_out_dir(out_dir, overwrite)
    self.schema, self.shard_size, self.row_group_size = schema, int(shard_size), int(row_group_size)
    self.metadata = dict(metadata)
    self.sizes: dict = {}
    self.paths: list = []  # completed shards
    self.entries: list = []  # their manifest records
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
      self._tmp = self.out_dir / (name + TMP_SUFFIX)
      with _naming(self._tmp):
        self._writer = self.pa.parquet.ParquetWriter(self._tmp, self.schema, write_page_checksum=True)
    with _naming(self._tmp):
      self._writer.write_table(head, row_group_size=k)
    self._in_shard += k
    self._pending = [rest] if rest.num_rows else []
    self._pending_rows -= k
    if self._in_shard >= self.shard_size:
      self._close()

  def _close(self) -> None:
    if self._writer is None:
      return
    tmp = self._tmp
    assert tmp is not None  # set with the writer
    meta = {**self.metadata, **self.sizes}
    self._writer.add_key_value_metadata({META + k: str(v) for k, v in meta.items()})
    final = tmp.with_suffix("")  # drops .tmp
    with _naming(tmp):
      self._writer.close()
      os.replace(tmp, final)
    self.paths.append(str(final))
    self.entries.append(
      {**_entry(str(final)), "rows": self._in_shard, "metadata": {k: str(v) for k, v in meta.items()}}
    )
    self._writer, self._tmp, self._in_shard = None, None, 0

  def end_shard(self, **metadata) -> None:
    """Writes the pending rows and closes the current shard; later shards' footers take ``metadata``."""
    while self._pending_rows:
      self._write(min(self._room(), self._pending_rows))
    self._close()
    self.metadata.update(metadata)

  def finish(self, **manifest) -> list:
    """Writes the pending rows, closes the last shard, writes the manifest (``manifest``: further fields, such
    as ``vocabulary_digest``) and returns every shard's path, in order."""
    self.end_shard()
    body = {
      "ultr_jax_manifest": MANIFEST_VERSION,
      "files": self.entries,
      "num_rows": sum(e["rows"] for e in self.entries),
      "metadata": {k: str(v) for k, v in self.metadata.items()},
      "sizes": {k: int(v) for k, v in self.sizes.items()},
      **manifest,
    }
    body["conversion_id"] = digest(body)
    tmp = self.out_dir / (MANIFEST + TMP_SUFFIX)
    with _naming(tmp):
      tmp.write_text(json.dumps(body, indent=1, sort_keys=True))
      os.replace(tmp, self.out_dir / MANIFEST)
    return list(self.paths)

  def abort(self) -> None:
    """Closes and removes every shard this writer wrote."""
    if self._writer is not None:
      with contextlib.suppress(OSError):  # a full disk fails the close too; the file goes anyway
        self._writer.close()
    for p in [*self.paths, self._tmp]:
      if p is not None and os.path.exists(p):
        os.remove(p)


# ----------------------------------------------------------------------------
# Reading: shards only as their manifest lists them, whole.


def footer_keys(f) -> dict:
  """``{key: value}`` of a ParquetFile's ``ultr_jax.*`` footer keys (the prefix dropped)."""
  raw = f.metadata.metadata or {}
  return {k.decode()[len(META) :]: v.decode() for k, v in raw.items() if k.decode().startswith(META)}


def open_parquet(path, what: str = "Parquet shard", *, memory_map: bool = False):
  """``pyarrow.parquet.ParquetFile`` of ``path`` with page checksums verified; every error names the file."""
  pa = pyarrow()
  try:
    return pa.parquet.ParquetFile(path, memory_map=memory_map, page_checksum_verification=True)
  except FileNotFoundError:
    raise FileNotFoundError(f"{path}: no such {what}") from None
  except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ArrowNotImplementedError, ... on damaged bytes
    raise ValueError(f"{path}: not a readable {what} (truncated, damaged, or not Parquet: {e})") from None


def read_row_group(f, path, group: int, first_row: int, columns, what: str = "shard"):
  """Row group ``group`` of the open ParquetFile ``f`` (its ``columns``), every error naming the file."""
  try:
    return f.read_row_group(group, columns=columns)
  except FileNotFoundError:
    raise FileNotFoundError(f"{path}: no such {what} (it was there when the stream started)") from None
  except Exception as e:  # a page whose checksum fails is an OSError; a damaged page header, ArrowInvalid, ...
    raise ValueError(
      f"{path}, row group {group} (rows from {first_row}): cannot read it (a damaged or truncated {what}: {e})"
    ) from None


#: The shape of a shard directory's manifest (beyond it, each writer's own keys).
MANIFEST_SPEC = {
  "ultr_jax_manifest": int,
  "conversion_id": str,
  "files": [{"name": str, "rows": int, "bytes": int, "footer_offset": int, "footer_crc32": int}],
}
_MANIFEST_WHAT = "the manifest of a directory of ultr_jax shards (a JSON object listing its files)"


def read_manifest(directory) -> Optional[dict]:
  """The manifest of a shard directory (None when it has none); ValueError naming it when damaged."""
  path = pathlib.Path(directory) / MANIFEST
  if not path.is_file():
    return None
  recovery = "convert again with overwrite=True (the shards are checked against it; an edited one cannot be trusted)"
  manifest = read_state_file(
    path, {"ultr_jax_manifest": int, "conversion_id": str}, what=_MANIFEST_WHAT, recovery=recovery
  )
  body = {k: v for k, v in manifest.items() if k != "conversion_id"}
  if manifest["ultr_jax_manifest"] != MANIFEST_VERSION or manifest["conversion_id"] != digest(body):
    raise ValueError(
      f"{path}: a damaged or edited manifest (its conversion_id does not match its content, or its version is not "
      f"{MANIFEST_VERSION}); {recovery}"
    )
  return check_shape(manifest, MANIFEST_SPEC, path=path, what=_MANIFEST_WHAT, recovery=recovery)


def manifest_paths(directory, what: str) -> list:
  """The shards of a directory, as its manifest lists them; an unlisted ``.parquet`` or ``.tmp`` there is an
  error (shards of another conversion, or of one that was interrupted)."""
  directory = pathlib.Path(directory)
  check_complete(directory, what)
  manifest = read_manifest(directory)
  tmp = sorted(p.name for p in directory.glob("*" + TMP_SUFFIX))
  if manifest is None:
    if tmp:
      raise ValueError(
        f"{directory}: holds {tmp[0]}, a shard being written, and no {MANIFEST}: an interrupted conversion; "
        "convert again with overwrite=True"
      )
    return sorted(str(p) for p in directory.glob("*.parquet"))
  listed = [e["name"] for e in manifest["files"]]
  extra = sorted(p.name for p in directory.glob("*.parquet") if p.name not in set(listed)) + tmp
  if extra:
    raise ValueError(
      f"{directory / extra[0]}: not listed in {directory / MANIFEST}: a file of another conversion or an "
      f"interrupted one, mixed with this conversion's {what}; keep one conversion per directory"
    )
  return [str(directory / n) for n in listed]


class ShardSet:
  """Parquet files checked against the manifest of the conversion that wrote them (or foreign files).

  Attributes:
    paths: the files, in the order given.
    manifest: the conversion's manifest (None for foreign files).
    metadata: ``{path: pyarrow.parquet.FileMetaData}``.
    schemas: ``{path: pyarrow.Schema}``.
    footers: ``{path: {key: value}}`` of the ``ultr_jax.*`` footer keys.
    shard_id: the conversion's id, or for foreign files a digest of their names, sizes and footers.
  """

  def __init__(self, paths, manifest, metadata, schemas, footers, shard_id):
    self.paths, self.manifest, self.shard_id = paths, manifest, shard_id
    self.metadata, self.schemas, self.footers = metadata, schemas, footers

  @property
  def sizes(self) -> dict:
    """The conversion's sizes (``num_items``, ``num_positions``, ``list_size``): the manifest's, else the maxima
    over the footers given."""
    if self.manifest is not None:
      return dict(self.manifest.get("sizes", {}))
    out: dict = {}
    for meta in self.footers.values():
      for k in ("num_items", "num_positions", "list_size"):
        if k in meta:
          out[k] = max(out.get(k, 0), int(meta[k]))
    return out

  @property
  def identity(self) -> dict:
    """What names the shard set in a stream's identity and state: the conversion and the names of the files
    read (up to four by name; more as their count, first, last and a digest, so a state stays small)."""
    names = [os.path.basename(p) for p in self.paths]
    if len(names) > 4:
      names = [names[0], "...", names[-1], f"{len(names)} files", digest(names)[:16]]
    return {"shards": self.shard_id, "files": names}


def _no_manifest(path: str, what: str, footer: dict) -> ValueError:
  directory = os.path.dirname(path) or "."
  if not footer:
    return ValueError(
      f"{path}: not a {what} written by ultr_jax (its footer has no ultr_jax.* keys, and {directory} no "
      f"{MANIFEST}); write {what}s with ultr_jax's converters"
    )
  return ValueError(
    f"{path}: {directory} has no {MANIFEST}: the conversion that wrote it did not finish (interrupted?); "
    "convert again with overwrite=True"
  )


def _entries(manifest: dict) -> dict:
  """``{name: entry}`` of a manifest's files (built once per manifest)."""
  if "_by_name" not in manifest:
    manifest["_by_name"] = {e["name"]: e for e in manifest["files"]}
  return manifest["_by_name"]


def _check_listed(path: str, manifest: dict, size: int) -> dict:
  """The manifest's entry of ``path``, its size and footer checked (a flipped byte in the footer is caught)."""
  directory = os.path.dirname(path) or "."
  entry = _entries(manifest).get(os.path.basename(path))
  if entry is None:
    raise ValueError(
      f"{path}: not listed in {os.path.join(directory, MANIFEST)}: a shard of another conversion (or left over "
      "from an interrupted one); keep one conversion per directory"
    )
  if size != entry["bytes"]:
    raise ValueError(f"{path}: {size} bytes where the manifest records {entry['bytes']} (truncated or replaced)")
  offset, footer = _footer(path, size)
  if offset != entry["footer_offset"] or zlib.crc32(footer) != entry["footer_crc32"]:
    raise ValueError(f"{path}: its footer fails the manifest's checksum (a damaged file, or another conversion's)")
  return entry


def shard_set(paths, what: str = "shards", *, foreign: bool = False) -> ShardSet:
  """Opens ``paths`` as one conversion's shards: each listed by its directory's manifest, all of one conversion,
  sizes and footers as recorded. ``foreign``: files without ``ultr_jax.*`` footer keys and without a manifest
  are accepted as they are (Parquet files written elsewhere).

  Raises:
    FileNotFoundError: a missing file (naming it).
    ValueError: naming the file: no manifest (an interrupted conversion, or not written by ultr_jax), not listed
      by it, a size or footer that is not the manifest's, shards of two conversions, an unreadable file.
  """
  manifests: dict = {}
  metadata, schemas, footers, ids, entries = {}, {}, {}, {}, {}
  for path in paths:
    path = str(path)
    directory = os.path.dirname(path) or "."
    if directory not in manifests:
      check_complete(directory, what)
      manifests[directory] = read_manifest(directory)
    manifest = manifests[directory]
    if not os.path.isfile(path):
      raise FileNotFoundError(f"{path}: no such {what.rstrip('s')}")
    size = os.path.getsize(path)
    if manifest is not None:
      entries[path] = _check_listed(path, manifest, size)
    f = open_parquet(path, "Parquet " + what.rstrip("s").split()[-1], memory_map=True)
    try:
      footers[path], metadata[path], schemas[path] = footer_keys(f), f.metadata, f.schema_arrow
    except Exception as e:  # a footer that parses but does not make sense (a schema pyarrow cannot convert, ...)
      raise ValueError(f"{path}: not a readable Parquet file (a damaged footer: {e})") from None
    finally:
      f.close()
    if manifest is None:
      if not foreign or footers[path]:
        raise _no_manifest(path, what.rstrip("s"), footers[path])
      offset, footer = _footer(path, size)
      ids[path] = ("foreign", os.path.basename(path), size, zlib.crc32(footer))
    else:
      ids[path] = ("conversion", manifest["conversion_id"])
      if f.metadata.num_rows != entries[path]["rows"]:
        raise ValueError(f"{path}: {f.metadata.num_rows} rows where the manifest records {entries[path]['rows']}")
  kinds = {v[0] for v in ids.values()}
  conversions = {v[1]: p for p, v in ids.items() if v[0] == "conversion"}
  if len(kinds) > 1 or len(conversions) > 1:
    a, b = list(conversions.values())[:2] if len(conversions) > 1 else (paths[0], paths[-1])
    raise ValueError(f"{a} and {b}: shards of two conversions (or not all ultr_jax's); give one conversion's {what}")
  manifest = next(iter(manifests.values())) if conversions else None
  shard_id = next(iter(conversions)) if conversions else digest([ids[str(p)] for p in paths])
  return ShardSet([str(p) for p in paths], manifest, metadata, schemas, footers, shard_id)
