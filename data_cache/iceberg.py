"""An Iceberg table as a cache source, read with pyiceberg: Kubeflow Trainer's
``cache://<schema>/<table>`` (docs/data-cache.md).

Contract: :func:`open_iceberg` finds the table either from its metadata file
(``metadata_location``: Trainer's ``METADATA_LOC``, a local path or ``file://`` URI, read
with pyiceberg's ``StaticTable``) or from a SQL catalog (``catalog_uri``: a
``sqlite:///`` database, pyiceberg's ``SqlCatalog`` named ``catalog_name``, pyiceberg's
default ``default``; table ``<schema>.<table>``), plans
a scan of its current snapshot, and returns a :class:`data_cache.source.Source` over the
data files (Parquet) sorted by path — the same order on every cache server — with the
row counts the manifests give (no file is opened to count). A table with row-level
delete files, data files that are not local Parquet files, and anything pyiceberg
cannot read raise :class:`data_cache.source.SourceError` naming the table and why.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.dataset as ds

from data_cache.source import Source, SourceError

__all__ = ["open_iceberg", "parse_cache_uri"]


def parse_cache_uri(uri: str) -> tuple[str, str]:
    """``cache://<schema>/<table>`` -> ``(schema, table)``; SourceError otherwise."""
    parsed = urlparse(uri)
    parts = [parsed.netloc, *[p for p in parsed.path.split("/") if p]]
    if parsed.scheme != "cache" or len(parts) != 2 or not all(parts):
        raise SourceError(f"{uri}: an Iceberg table is named cache://<schema>/<table>")
    return parts[0], parts[1]


def _local(location: str, what: str) -> str:
    parsed = urlparse(location)
    if parsed.scheme not in ("", "file") or (parsed.scheme == "file"
                                             and parsed.netloc not in ("", "localhost")):
        raise SourceError(f"{what} {location}: only local files are read (file:///path)")
    path = unquote(parsed.path) if parsed.scheme else location
    if not path.startswith("/"):
        raise SourceError(f"{what} {location}: the path must be absolute")
    return path


def open_iceberg(uri: str, *, metadata_location: str | None = None,
                 catalog_uri: str | None = None, catalog_name: str = "default") -> Source:
    """The table ``uri`` names as a source (see the module docstring)."""
    schema_name, table_name = parse_cache_uri(uri)
    table: Any
    try:
        if metadata_location:
            from pyiceberg.table import StaticTable

            table = StaticTable.from_metadata(
                "file://" + _local(metadata_location, "metadata file"))
        elif catalog_uri:
            from pyiceberg.catalog.sql import SqlCatalog

            if not catalog_uri.startswith("sqlite:///"):
                raise SourceError(f"catalog {catalog_uri}: only a sqlite:/// SQL catalog "
                                  "is read")
            catalog = SqlCatalog(catalog_name, uri=catalog_uri)
            table = catalog.load_table((schema_name, table_name))
        else:
            raise SourceError(f"{uri}: name the table's metadata file (METADATA_LOC) or "
                              "its SQL catalog (CATALOG_URI)")
        tasks = list(table.scan().plan_files())
        arrow_schema: pa.Schema = table.schema().as_arrow()
    except SourceError:
        raise
    except Exception as exc:  # pyiceberg raises many kinds (NoSuchTable, OSError, ...)
        raise SourceError(f"Iceberg table {schema_name}.{table_name}: "
                          f"{type(exc).__name__}: {exc}") from None
    if any(task.delete_files for task in tasks):
        raise SourceError(f"Iceberg table {schema_name}.{table_name} has row-level delete "
                          "files, which the cache does not apply: compact the table first")
    files: list[tuple[str, int]] = []
    for task in tasks:
        if str(task.file.file_format).upper().endswith("ORC") or \
                str(task.file.file_format).upper().endswith("AVRO"):
            raise SourceError(f"Iceberg table {schema_name}.{table_name}: data file "
                              f"{task.file.file_path} is not Parquet")
        files.append((_local(task.file.file_path, "data file"), int(task.file.record_count)))
    files.sort()
    if not files:
        raise SourceError(f"Iceberg table {schema_name}.{table_name} has no rows")
    try:
        dataset = ds.dataset([f for f, _ in files], format="parquet", schema=arrow_schema)
    except (OSError, pa.ArrowException) as exc:
        raise SourceError(f"Iceberg table {schema_name}.{table_name}: {exc}") from None
    return Source(uri=uri, dataset=dataset, fragment_rows=[n for _, n in files])
