"""Near-duplicate records of a crawl: each stored page's signature of its shingles, and for each page
that nearly repeats an earlier one (``focuscrawl.organise.duplicates``), that original. Search
folds a near-duplicate under its original; identical texts are ``documents.duplicate_of``."""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterator

import numpy as np

from focuscrawl.store.sql import rows_in

NEAR_DUPLICATES_SCHEMA = """
CREATE TABLE IF NOT EXISTS page_signatures (url_id INTEGER PRIMARY KEY, signature BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS near_duplicates (  -- a page whose shingles nearly repeat an earlier page's
    url_id INTEGER PRIMARY KEY,
    original INTEGER NOT NULL,  -- a page of the group that is nobody's near-duplicate (`organise duplicates`: its earliest)
    similarity REAL NOT NULL  -- Jaccard, as the signatures estimate it
);
CREATE INDEX IF NOT EXISTS near_duplicates_original ON near_duplicates (original);
CREATE TABLE IF NOT EXISTS signature_bands (band INTEGER NOT NULL, url_id INTEGER NOT NULL);  -- a crawl's LSH buckets
CREATE INDEX IF NOT EXISTS signature_bands_band ON signature_bands (band);
"""


STORED_BANDS = 32  # a crawl's buckets, of 8 values each: few rows per page (a pair at Jaccard 0.8 shares one: P = 0.997)


def stored_bands(signature: np.ndarray) -> list[int]:
    """The signature's bands as a running crawl stores them: band number and CRC-32 of its values."""
    rows = len(signature) // STORED_BANDS
    return [band << 32 | zlib.crc32(signature[band * rows:(band + 1) * rows].tobytes()) for band in range(STORED_BANDS)]


PG_NEAR_DUPLICATES_SCHEMA = """
CREATE TABLE IF NOT EXISTS page_signatures (url_id bigint PRIMARY KEY, signature bytea NOT NULL);
CREATE TABLE IF NOT EXISTS near_duplicates (url_id bigint PRIMARY KEY, original bigint NOT NULL, similarity real NOT NULL);
CREATE TABLE IF NOT EXISTS signature_bands (band bigint NOT NULL, url_id bigint NOT NULL);
CREATE INDEX IF NOT EXISTS signature_bands_band ON signature_bands (band);
"""


class RunningRecords:
    """What a running crawl asks of its near-duplicate records, in SQL both backends run (a shared
    crawl's subclass, ``pg_repository.PgNearDuplicateRecords``, rewrites the placeholders; its
    tables are copied into ``crawl.db`` by the snapshot, where the rest is read). Two workers
    signing near copies at the same moment may each keep theirs as an original: ``organise
    duplicates`` regroups them afterwards."""

    def __init__(self, db):
        self.db = db

    def _execute(self, sql: str, arguments: tuple = ()):
        return self.db.execute(sql, arguments)

    def _executemany(self, sql: str, rows) -> None:
        self.db.executemany(sql, rows)

    def original_of(self, signature: np.ndarray) -> tuple[int | None, float]:
        """The page signed before that this one nearly repeats (the most similar), if any, with
        the similarity: candidates share a stored band and are nobody's near-duplicate (a group
        is its original and the pages near it, as ``organise duplicates`` makes them)."""
        from focuscrawl.text import nearest  # here: the tools that read a crawl do without scikit-learn

        bands = stored_bands(signature)
        return nearest(signature, [(url_id, np.frombuffer(blob, dtype=np.uint32)) for url_id, blob in self._execute(
            "SELECT s.url_id, s.signature FROM page_signatures s WHERE s.url_id IN"
            f" (SELECT url_id FROM signature_bands WHERE band IN ({','.join('?' * len(bands))}))"
            " AND NOT EXISTS (SELECT 1 FROM near_duplicates n WHERE n.url_id = s.url_id)", tuple(bands))])

    def record(self, url_id: int, signature: np.ndarray, original: int | None, similarity: float) -> None:
        """A page a running crawl signed, its bands, and the earlier page it nearly repeats."""
        self._execute("INSERT INTO page_signatures (url_id, signature) VALUES (?, ?)"
                      " ON CONFLICT (url_id) DO UPDATE SET signature = excluded.signature", (url_id, signature.tobytes()))
        self._executemany("INSERT INTO signature_bands (band, url_id) VALUES (?, ?)",
                          [(band, url_id) for band in stored_bands(signature)])
        if original is not None:
            self._execute("INSERT INTO near_duplicates (url_id, original, similarity) VALUES (?, ?, ?) ON CONFLICT"
                          " (url_id) DO UPDATE SET original = excluded.original, similarity = excluded.similarity",
                          (url_id, original, similarity))


class NearDuplicateRecords(RunningRecords):
    """The whole of a crawl's near-duplicate records (SQLite: the crawl's own, or a shared crawl's copy)."""

    db: sqlite3.Connection

    def unsigned(self, limit: int = 1000) -> list[tuple[int, str]]:
        """(url id, text) of stored pages with text that have no signature yet, in fetch order."""
        return self.db.execute(
            "SELECT d.url_id, d.text FROM documents d WHERE d.text != '' AND d.duplicate_of IS NULL"
            " AND NOT EXISTS (SELECT 1 FROM page_signatures s WHERE s.url_id = d.url_id) ORDER BY d.fetch_id LIMIT ?",
            (limit,)).fetchall()

    def add_signatures(self, rows: list[tuple[int, np.ndarray]]) -> None:
        """Signatures of stored pages (an empty one for a page too short to sign), with their
        bands, so that a crawl resumed with ``store.near_duplicates`` finds them too."""
        self.db.executemany("INSERT OR REPLACE INTO page_signatures (url_id, signature) VALUES (?, ?)",
                            [(url_id, signature.tobytes()) for url_id, signature in rows])
        self.db.executemany("INSERT INTO signature_bands (band, url_id) VALUES (?, ?)",
                            [(band, url_id) for url_id, signature in rows if len(signature)
                             for band in stored_bands(signature)])

    def signatures(self) -> Iterator[tuple[int, np.ndarray]]:
        """Every page's signature, in fetch order (so a group's original comes first)."""
        for url_id, blob in self.db.execute("SELECT s.url_id, s.signature FROM page_signatures s"
                                            " JOIN documents d ON d.url_id = s.url_id ORDER BY d.fetch_id"):
            yield url_id, np.frombuffer(blob, dtype=np.uint32)

    def replace_groups(self, rows: list[tuple[int, int, float]]) -> None:
        """(page, its original, similarity) of every near-duplicate, replacing the last ones."""
        self.db.execute("DELETE FROM near_duplicates")
        self.db.executemany("INSERT INTO near_duplicates (url_id, original, similarity) VALUES (?, ?, ?)", rows)

    def originals(self, url_ids: list[int]) -> dict[int, int]:
        """The original of each of these pages that is a near-duplicate (none in a crawl whose
        near-duplicates were never looked for)."""
        try:
            return dict(rows_in(self.db, "SELECT url_id, original FROM near_duplicates WHERE url_id IN ({})", url_ids))
        except sqlite3.OperationalError:  # a crawl made before near-duplicates, opened read-only
            return {}

    def groups(self, limit: int = 20) -> list[tuple[str, int, list[str]]]:
        """The largest groups: (the original's URL, its near-duplicates, their URLs, at most 10)."""
        found = []
        for original, count in self.db.execute("SELECT original, COUNT(*) FROM near_duplicates GROUP BY original"
                                               " ORDER BY COUNT(*) DESC, original LIMIT ?", (limit,)).fetchall():
            urls = [url for (url,) in self.db.execute(
                "SELECT u.url FROM near_duplicates n JOIN urls u ON u.id = n.url_id WHERE n.original = ?"
                " ORDER BY n.url_id LIMIT 10", (original,))]
            found.append((self.db.execute("SELECT url FROM urls WHERE id = ?", (original,)).fetchone()[0], count, urls))
        return found

    def counts(self) -> tuple[int, int, int]:
        """(pages signed, near-duplicates, groups)."""
        return (self.db.execute("SELECT COUNT(*) FROM page_signatures").fetchone()[0],
                *self.db.execute("SELECT COUNT(*), COUNT(DISTINCT original) FROM near_duplicates").fetchone())
