"""A manifest input: a Parquet or CSV file (or directory of them) with a column of image
paths or URIs, read by Ray Data's workers through pyarrow's filesystems (local paths,
``file://``, ``s3://``, ``gs://``, ``hdfs://``...). The driver never lists the images: it
reads only the manifest's schema (the Parquet footer, or the CSV header) to check the
column, so a job over 10^8 images starts as fast as one over ten.

A row whose path is null or empty gives a result row with an ``error``; CSV rows with the
wrong number of fields are skipped by the reader and counted in the log of the worker that
read them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..types import CopylessError

if TYPE_CHECKING:
    import ray.data

logger = logging.getLogger(__name__)

FORMATS = ("parquet", "csv")


class ManifestError(CopylessError):
    """A manifest that cannot be read, or has no column of paths."""


@dataclass(frozen=True, slots=True)
class Manifest:
    """The ``column`` of the Parquet or CSV file(s) at ``uri`` (the format follows the
    suffix, or ``format``)."""

    uri: str
    column: str = "path"
    format: str = ""

    def __post_init__(self) -> None:
        found = self.format or _format_of(self.uri)
        if found not in FORMATS:
            raise ManifestError(
                f"{self.uri}: a manifest is a .parquet or .csv file (or a directory of them); "
                "name the format with format='parquet' or 'csv'"
            )
        object.__setattr__(self, "format", found)

    def check(self) -> pa.Schema:
        """Read the manifest's schema and check its column; returns the schema.

        Raises :class:`ManifestError` with one clear line otherwise.
        """
        schema = self._schema()
        if self.column not in schema.names:
            raise ManifestError(
                f"{self.uri}: no column {self.column!r} (columns: {', '.join(schema.names)}); "
                "name the column of paths with --path-column"
            )
        kind = schema.field(self.column).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise ManifestError(f"{self.uri}: column {self.column!r} holds {kind}, not paths")
        return schema

    def dataset(self) -> ray.data.Dataset:
        """The lazy dataset of one ``path`` column (string), read by Ray's workers."""
        import ray.data
        from pyarrow import csv

        if self.format == "parquet":
            ds = ray.data.read_parquet(self.uri).select_columns([self.column])
        else:
            ds = ray.data.read_csv(
                self.uri,
                convert_options=csv.ConvertOptions(
                    include_columns=[self.column], column_types={self.column: pa.string()}
                ),
                parse_options=csv.ParseOptions(invalid_row_handler=_skip_row),
            )
        if self.column != "path":
            ds = ds.rename_columns({self.column: "path"})
        return ds

    def _schema(self) -> pa.Schema:
        from pyarrow import csv, fs

        try:
            filesystem, path = fs.FileSystem.from_uri(self.uri)
        except (pa.ArrowInvalid, ValueError):  # a plain path
            filesystem, path = fs.LocalFileSystem(), self.uri
        try:
            info = filesystem.get_file_info(path)
            if info.type is fs.FileType.Directory:
                selector = fs.FileSelector(path, recursive=True)
                files = sorted(
                    f.path
                    for f in filesystem.get_file_info(selector)
                    if f.is_file and f.path.endswith(f".{self.format}")
                )
                if not files:
                    raise ManifestError(f"{self.uri}: no .{self.format} file in the directory")
                path = files[0]
            elif info.type is fs.FileType.NotFound:
                raise ManifestError(f"{self.uri}: no such manifest")
            if self.format == "parquet":
                import pyarrow.parquet as pq

                with filesystem.open_input_file(path) as file:
                    return pq.read_schema(file)
            with filesystem.open_input_stream(path) as stream:
                reader = csv.open_csv(stream)
                schema: pa.Schema = reader.schema
                return schema
        except (OSError, pa.ArrowException) as exc:
            reason = f"not a readable {self.format} manifest: {exc}"
            raise ManifestError(f"{self.uri}: {reason}") from None


def _format_of(uri: str) -> str:
    name = uri.rstrip("/").lower()
    for suffix in FORMATS:
        if name.endswith(f".{suffix}"):
            return suffix
    return ""


def _skip_row(row: Any) -> str:
    """pyarrow's invalid-row handler: skip a CSV row with the wrong number of fields."""
    logger.warning("manifest row %s skipped: %s", getattr(row, "number", "?"), row.text)
    return "skip"
