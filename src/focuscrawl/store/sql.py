"""SQL helpers of the store's modules."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator


def rows_in(db: sqlite3.Connection, query: str, keys: list, before: tuple = ()) -> Iterator[tuple]:
    """The rows of ``query`` for many keys: its ``IN ({})`` filled 500 distinct keys at a time
    (SQLite's limit on parameters), after the parameters ``before`` it."""
    unique = list(dict.fromkeys(keys))
    for start in range(0, len(unique), 500):
        chunk = unique[start:start + 500]
        yield from db.execute(query.format(",".join("?" * len(chunk))), [*before, *chunk])
