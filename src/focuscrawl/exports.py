"""Records out of focuscrawl as JSON lines, CSV or Parquet: ``focuscrawl export`` and the
portal's exports of search results and of whole collections write them here, in one way.
Rows are read a chunk at a time, so a collection of millions of pages is never held whole."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import BinaryIO

FORMATS = ("jsonl", "csv", "parquet")
MEDIA_TYPES = {"jsonl": "application/x-ndjson", "csv": "text/csv", "parquet": "application/vnd.apache.parquet"}
CHUNK = 1000  # rows read, written, and (Parquet) put in a row group at a time
# every field an export may hold; the rest are text
INTEGERS = {"status", "depth", "size"}
FLOATS = {"relevance", "fetched_at", "score"}


def text_chunks(rows: Iterable[dict], fmt: str, fields: Iterable[str]) -> Iterator[str]:
    """Rows as JSON lines or as CSV (its header first, even without rows), a chunk at a time."""
    rows, fields = iter(rows), list(fields)
    header = fmt == "csv"
    while (chunk := list(islice(rows, CHUNK))) or header:
        if fmt == "jsonl":
            yield "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in chunk)
            continue
        out = io.StringIO()
        writer = csv.DictWriter(out, fields, lineterminator="\n")
        if header:
            writer.writeheader()
            header = False
        writer.writerows(chunk)
        yield out.getvalue()


def write_parquet(rows: Iterable[dict], fields: Iterable[str], target: Path | BinaryIO) -> None:
    """Rows into a Parquet file (a path, or a binary file open for writing), a row group per chunk."""
    import pyarrow as pa  # only exports need it: the crawl does not pay for its import
    import pyarrow.parquet as pq

    schema = pa.schema([(name, pa.int64() if name in INTEGERS else pa.float64() if name in FLOATS else pa.string())
                        for name in fields])
    rows = iter(rows)
    with pq.ParquetWriter(target, schema) as writer:
        while chunk := list(islice(rows, CHUNK)):
            writer.write_table(pa.Table.from_pylist(chunk, schema=schema))
