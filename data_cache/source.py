"""Where a cache server's rows come from: a dataset named by a URI, read with pyarrow.

Contract:

* :func:`open_source` takes a local path or ``file://`` URI naming one file or a
  directory of files (Parquet ``.parquet``/``.pq``, Arrow IPC ``.arrow``/``.feather``/
  ``.ipc``, CSV ``.csv``; ``fmt`` overrides the suffix, and is needed for a directory
  whose files have none of them). Files are read in sorted path order. Any other scheme,
  a path that does not exist or cannot be read, a directory with no such files and files
  whose schemas differ raise :class:`SourceError` naming the path and the reason.
  A directory is walked whole (a subdirectory it cannot read is an error, not skipped);
  names starting with ``.`` or ``_`` are skipped at any depth, as pyarrow's discovery
  does (``_temporary``, ``.snapshot``). The types are the first non-empty file's (a
  CSV holding only its header has no types); counting a CSV's rows reads it.
* :meth:`Source.load` reads the rows of a block range — and only the files that hold
  them — into one contiguous record batch per block (so a reader can hand each column to
  numpy without a copy), stopping with :class:`SourceError` as soon as the blocks read
  would pass ``memory_limit`` bytes: the cache never holds more than its limit plus one
  file batch. A block of 2 GiB or more (more than Flight sends in one message) is refused,
  naming ``BLOCK_ROWS``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.dataset as ds

from data_cache.layout import block_rows_of

__all__ = ["FORMATS", "Source", "SourceError", "open_source"]

#: File suffix -> pyarrow.dataset format name.
FORMATS = {
    ".parquet": "parquet", ".pq": "parquet",
    ".arrow": "ipc", ".feather": "ipc", ".ipc": "ipc",
    ".csv": "csv",
}


#: The largest block Flight can send as one record batch (2 GiB).
MAX_BLOCK_BYTES = 2**31


class SourceError(Exception):
    """The dataset cannot be served; the message names the path and the reason."""


def _path_of(uri: str) -> Path:
    parsed = urlparse(uri)
    if parsed.scheme and (parsed.query or parsed.fragment):
        raise SourceError(f"{uri}: a dataset URI has no query or fragment")
    if parsed.scheme in ("", "file"):
        if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
            raise SourceError(f"{uri}: a file:// URI names a local path (file:///path)")
        raw = unquote(parsed.path) if parsed.scheme else uri
        if not raw.startswith("/"):
            raise SourceError(f"{uri}: the dataset path must be absolute")
        return Path(raw)
    raise SourceError(f"{uri}: unsupported scheme {parsed.scheme!r} "
                      "(a local path, file://, or an Iceberg table through cache://)")


def _hidden(name: str) -> bool:
    """A name pyarrow's own discovery skips (``_temporary``, ``.snapshot`` ...)."""
    return name.startswith((".", "_"))


def _walk(path: Path) -> list[str]:
    def fail(exc: OSError) -> None:
        raise SourceError(f"dataset {exc.filename or path}: {exc.strerror or exc}")

    found = []
    for top, dirs, names in os.walk(path, onerror=fail):
        dirs[:] = [d for d in dirs if not _hidden(d)]
        found += [os.path.join(top, n) for n in names if not _hidden(n)
                  and os.path.isfile(os.path.join(top, n))]
    return sorted(found)


def _files(path: Path, fmt: str | None) -> tuple[list[str], str]:
    try:
        if path.is_dir():
            entries = _walk(path)
        else:
            path.stat()
            entries = [str(path)]
    except OSError as exc:
        raise SourceError(f"dataset {path}: {exc.strerror or exc}") from None
    if fmt is None:
        suffixes = {FORMATS.get(Path(e).suffix.lower()) for e in entries}
        suffixes.discard(None)
        if len(suffixes) > 1:
            found = sorted(s for s in suffixes if s)
            raise SourceError(f"dataset {path}: files of several formats ({found}); "
                              "name one with --format")
        if not suffixes:
            raise SourceError(f"dataset {path}: no Parquet, Arrow IPC or CSV file "
                              f"(suffixes {', '.join(sorted(FORMATS))}; or name one with --format)")
        fmt = suffixes.pop()
        assert fmt is not None
        entries = [e for e in entries if FORMATS.get(Path(e).suffix.lower()) == fmt]
    elif fmt not in set(FORMATS.values()):
        raise SourceError(f"format {fmt!r} is not one of {sorted(set(FORMATS.values()))}")
    for entry in entries:
        if not os.access(entry, os.R_OK):
            raise SourceError(f"dataset file {entry}: permission denied")
    if not entries:
        raise SourceError(f"dataset {path}: no files")
    return entries, fmt


@dataclass
class Source:
    """An opened dataset: its files in order and each file's row count."""

    uri: str
    dataset: ds.FileSystemDataset
    fragment_rows: list[int]

    @property
    def schema(self) -> pa.Schema:
        return self.dataset.schema

    @property
    def total_rows(self) -> int:
        return sum(self.fragment_rows)

    def load(self, blocks: range, block_rows: int,
             memory_limit: int | None = None) -> list[pa.RecordBatch]:
        """One contiguous record batch per block of ``blocks`` (see the module docstring)."""
        if not blocks:
            return []
        total = self.total_rows
        first = block_rows_of(blocks.start, total, block_rows).start
        stop = block_rows_of(blocks.stop - 1, total, block_rows).stop
        out: list[pa.RecordBatch] = []
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        held = 0
        offset = 0

        def cut(force: bool) -> None:
            nonlocal pending, pending_rows, held
            while pending_rows >= block_rows or (force and pending_rows):
                table = pa.Table.from_batches(pending, schema=self.schema)
                take = min(block_rows, pending_rows)
                # One chunk per column: a block travels as one batch and reads as one array.
                batch = table.slice(0, take).combine_chunks().to_batches()[0]
                if batch.nbytes >= MAX_BLOCK_BYTES:
                    raise SourceError(
                        f"dataset {self.uri}: a block of {take} rows takes {batch.nbytes} "
                        f"bytes; Arrow Flight sends at most {MAX_BLOCK_BYTES - 1} in one "
                        "message: make BLOCK_ROWS smaller")
                held += batch.nbytes
                if memory_limit is not None and held > memory_limit:
                    raise SourceError(
                        f"dataset {self.uri}: this cache node's share needs more than its "
                        f"memory limit of {memory_limit} bytes (after {len(out)} of "
                        f"{len(blocks)} blocks); give the job more memory or more nodes")
                out.append(batch)
                rest = table.slice(take)
                pending = rest.to_batches()
                pending_rows = rest.num_rows

        for fragment, rows in zip(self.dataset.get_fragments(), self.fragment_rows, strict=True):
            if offset + rows <= first or offset >= stop:
                offset += rows
                continue
            try:
                batches = fragment.to_batches(schema=self.schema)
                for batch in batches:
                    lo = max(first - offset, 0)
                    hi = min(stop - offset, batch.num_rows)
                    if hi > lo:
                        pending.append(batch.slice(lo, hi - lo))
                        pending_rows += hi - lo
                        cut(False)
                    offset += batch.num_rows
                    if offset >= stop:
                        break
            except (OSError, pa.ArrowException) as exc:
                raise SourceError(f"dataset file {fragment.path}: {exc}") from None
            if offset >= stop:
                break
        cut(True)
        return out


def _same(a: pa.Schema, b: pa.Schema, names_only: bool) -> bool:
    if names_only:
        return bool(a.names == b.names)
    return bool(a.remove_metadata().equals(b.remove_metadata()))


def open_source(uri: str, fmt: str | None = None) -> Source:
    """Open the dataset ``uri`` and count its rows (see the module docstring)."""
    path = _path_of(uri)
    files, fmt = _files(path, fmt)
    counts: list[int] = []
    schemas: list[pa.Schema] = []
    for name in files:
        try:
            one = ds.dataset(name, format=fmt)
            schemas.append(one.schema)
            counts.append(one.count_rows())
        except (OSError, pa.ArrowException) as exc:
            raise SourceError(f"dataset file {name}: {exc}") from None
    # The first file with rows says the types (a CSV with only a header reads as nulls).
    ref = next((s for s, n in zip(schemas, counts, strict=True) if n), schemas[0])
    for name, schema, rows in zip(files, schemas, counts, strict=True):
        if not _same(schema, ref, names_only=fmt == "csv" and rows == 0):
            raise SourceError(f"dataset file {name}: its schema differs from the dataset's "
                              f"({schema.to_string(show_schema_metadata=False)!r} against "
                              f"{ref.to_string(show_schema_metadata=False)!r})")
    try:
        dataset = ds.dataset(files, format=fmt, schema=ref)
    except (OSError, pa.ArrowException) as exc:
        raise SourceError(f"dataset {path}: {exc}") from None
    return Source(uri=uri, dataset=dataset, fragment_rows=counts)
