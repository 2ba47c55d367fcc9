"""The crawl database's tables, URL states, connection settings and upgrades of databases made
by earlier versions."""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from focuscrawl.store.near_duplicates import NEAR_DUPLICATES_SCHEMA
from focuscrawl.store.search_index import SEARCH_SCHEMA

QUEUED, IN_FLIGHT, DONE, SKIPPED = 0, 1, 2, 3


SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS urls (
    id INTEGER PRIMARY KEY,
    url TEXT NOT NULL UNIQUE,
    host TEXT NOT NULL,
    depth INTEGER NOT NULL,
    parent_id INTEGER,
    priority REAL NOT NULL,
    state INTEGER NOT NULL DEFAULT 0,      -- 0 queued, 1 in flight, 2 done, 3 skipped
    skip_reason TEXT,
    discovered_at REAL NOT NULL,
    tunnel INTEGER NOT NULL DEFAULT 0,  -- pages not accepted on the path since the last accepted one (BINGO! tunnelling)
    queue TEXT NOT NULL DEFAULT ''  -- the frontier's sub-queue: '' or, with per-topic queues, the source's topic
);
CREATE TABLE IF NOT EXISTS fetches (
    id INTEGER PRIMARY KEY,
    url_id INTEGER NOT NULL REFERENCES urls(id),
    url TEXT NOT NULL,
    final_url TEXT,
    status INTEGER,
    error TEXT,
    mime TEXT,
    headers TEXT,
    redirects TEXT,
    depth INTEGER,
    parent_id INTEGER,
    fetched_at REAL NOT NULL,
    seconds REAL,
    attempts INTEGER,
    bytes INTEGER,
    warc_file TEXT,
    refused INTEGER NOT NULL DEFAULT 0  -- not fetched by our own rules (robots.txt, policy, MIME, size): not a page
);
CREATE INDEX IF NOT EXISTS fetches_url ON fetches (url_id);
CREATE TABLE IF NOT EXISTS documents (
    url_id INTEGER PRIMARY KEY REFERENCES urls(id),
    fetch_id INTEGER NOT NULL REFERENCES fetches(id),
    title TEXT,
    text TEXT,
    content_hash TEXT NOT NULL,
    duplicate_of INTEGER,
    relevance REAL,
    canonical TEXT,
    charset TEXT,
    noindex INTEGER NOT NULL DEFAULT 0,
    language_score INTEGER,
    topic TEXT,  -- with a taxonomy: the deepest topic that accepted the page
    confidence REAL,  -- BINGO! eq. 2.22 at that topic
    preview TEXT  -- the topic-specific summary (thesis §2.3.3)
);
CREATE INDEX IF NOT EXISTS documents_hash ON documents (content_hash);
CREATE TABLE IF NOT EXISTS links (
    source_id INTEGER NOT NULL,
    target_id INTEGER NOT NULL,
    anchor_text TEXT,
    leaf_start INTEGER,
    leaf_end INTEGER,
    nofollow INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS links_source ON links (source_id);
CREATE INDEX IF NOT EXISTS links_target ON links (target_id);
CREATE TABLE IF NOT EXISTS hosts (
    host TEXT PRIMARY KEY,
    failures INTEGER NOT NULL,
    status TEXT NOT NULL,
    crawl_delay REAL
);
CREATE TABLE IF NOT EXISTS link_features (  -- the apprentice's <term, offset> ids of every admissible link
    source_id INTEGER NOT NULL,  -- the first page seen with it
    target_id INTEGER NOT NULL,
    features BLOB NOT NULL,  -- uint32 ids
    features_key INTEGER NOT NULL DEFAULT 0,  -- features_keys: what the index of distinct links holds
    learnt INTEGER NOT NULL DEFAULT 0,
    copies INTEGER NOT NULL DEFAULT 1,  -- links to the target with these very features (a menu on many pages)
    parent_score REAL NOT NULL DEFAULT 0.0  -- the best critic score of a page with them (best-first's priority)
);
CREATE TABLE IF NOT EXISTS models (name TEXT PRIMARY KEY, data BLOB NOT NULL);  -- pickled: the critic, the apprentice
CREATE TABLE IF NOT EXISTS adaptations (  -- BINGO! retrainings, phase switches, link analyses (focus.py)
    id INTEGER PRIMARY KEY,
    pages INTEGER NOT NULL,  -- URLs handled when it happened
    kind TEXT NOT NULL,
    detail TEXT NOT NULL,  -- JSON
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS link_scores (  -- the latest link analysis of each topic's base set (graph.py)
    topic TEXT NOT NULL,  -- a taxonomy path, or '' for a crawl's one topic
    url_id INTEGER NOT NULL,
    hub REAL NOT NULL,
    authority REAL NOT NULL,
    pagerank REAL NOT NULL,
    confidence_pagerank REAL NOT NULL,
    computed_at REAL NOT NULL,
    PRIMARY KEY (topic, url_id)
);
CREATE TABLE IF NOT EXISTS link_clusters (  -- the out-links of one page: how those fetched turned out (frontier.py)
    parent_id INTEGER PRIMARY KEY,
    pages INTEGER NOT NULL,  -- fetched and judged
    relevance REAL NOT NULL,  -- the sum of their critic scores
    predicted REAL NOT NULL,  -- the sum of their priorities before the factor
    factor REAL NOT NULL  -- what the queued ones' priorities are multiplied by now
);
CREATE TABLE IF NOT EXISTS sitemaps (origin TEXT NOT NULL, url TEXT NOT NULL, PRIMARY KEY (origin, url));
"""


@contextmanager
def transaction(db: sqlite3.Connection):
    """One transaction: committed if the block ends, rolled back if it raises. It takes the write
    lock first: a transaction that read first could not write after another connection's commit
    (the portal writes users' marks into a running crawl)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:  # after some errors (a full disk) SQLite has rolled back by itself
            db.execute("ROLLBACK")
        raise


def connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")  # WAL: a committed row survives kill -9
    db.execute("PRAGMA foreign_keys=OFF")
    db.execute("PRAGMA cache_size=-65536")  # 64 MiB of page cache; the frontier itself stays on disk
    return db


def upgrade_schema(db: sqlite3.Connection) -> None:
    """Create what is missing: a new crawl's tables, or what an earlier version did not have."""
    db.executescript(SCHEMA)
    db.executescript(SEARCH_SCHEMA)
    db.executescript(NEAR_DUPLICATES_SCHEMA)
    _add_missing_columns(db, "documents", {"topic": "TEXT", "confidence": "REAL", "preview": "TEXT"})
    added = _add_missing_columns(db, "link_features", {"copies": "INTEGER NOT NULL DEFAULT 1",
                                                       "parent_score": "REAL NOT NULL DEFAULT 0.0"})
    if "parent_score" in added:  # the first page seen with the link stands for its best source
        db.execute("UPDATE link_features SET parent_score = COALESCE("
                   "(SELECT relevance FROM documents WHERE url_id = source_id), 0.0)")
        db.commit()
    _add_missing_columns(db, "fetches", {"refused": "INTEGER NOT NULL DEFAULT 0", "warc_end": "INTEGER"})
    _add_missing_columns(db, "urls", {"tunnel": "INTEGER NOT NULL DEFAULT 0", "queue": "TEXT NOT NULL DEFAULT ''"})
    db.execute("DROP INDEX IF EXISTS urls_frontier")  # the index before sub-queues
    db.execute("DROP INDEX IF EXISTS link_features_unlearnt")  # new instances are found from a watermark
    db.execute("CREATE INDEX IF NOT EXISTS urls_queue ON urls (queue, host, priority DESC, id) WHERE state = 0")
    db.execute("CREATE INDEX IF NOT EXISTS urls_parent ON urls (parent_id) WHERE state = 0")  # a link cluster's queued URLs
    _index_distinct_links(db)


def _add_missing_columns(db: sqlite3.Connection, table: str, columns: dict[str, str]) -> list[str]:
    """Crawl databases made by an earlier version gain the columns added since (returned)."""
    present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
    added = [name for name in columns if name not in present]
    for name in added:
        db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {columns[name]}")
    db.commit()
    return added


_SPLITMIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment: a bag's size is not mixed like an id


def _mixed(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (Steele, Lea & Flood 2014) on uint64s: every bit of a value moves
    about half the bits of its result."""
    values = (values ^ (values >> np.uint64(30))) * _SPLITMIX[0]
    values = (values ^ (values >> np.uint64(27))) * _SPLITMIX[1]
    return values ^ (values >> np.uint64(31))


def features_keys(blobs: list[bytes]) -> list[int]:
    """Each link's features (uint32 ids, as stored) as a signed 64-bit key, a page's links at once
    (a hash per link in Python cost a third of the apprentice's recording; indexing the features
    themselves, a millisecond a page). The key sums the ids' mixed values, so it is that of the
    bag of ids: the apprentice reads a link's ids as a bag, and the same ids in another order are
    the same instance."""
    lengths = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs)) // 4
    ids = np.frombuffer(b"".join(blobs), dtype=np.uint32).astype(np.uint64)
    sums = np.concatenate([np.zeros(1, dtype=np.uint64), np.cumsum(_mixed(ids + np.uint64(1)), dtype=np.uint64)])
    ends = np.cumsum(lengths)
    keys = _mixed((sums[ends] - sums[ends - lengths]) ^ _mixed(lengths.astype(np.uint64) + _GOLDEN))
    return keys.view(np.int64).tolist()


def _index_distinct_links(db: sqlite3.Connection) -> None:
    """One row per target and features, the others counted as its copies (re-scoring reads each
    distinct link once), found by ``features_keys``. A crawl made before kept a row per link,
    indexed the features themselves, or keyed them with another hash: converted here once."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'link_features_by_key'").fetchone():
        return
    _add_missing_columns(db, "link_features", {"features_key": "INTEGER NOT NULL DEFAULT 0"})
    db.execute("BEGIN")
    db.execute("DROP INDEX IF EXISTS link_features_target")
    db.execute("DROP INDEX IF EXISTS link_features_distinct")
    db.execute("DROP INDEX IF EXISTS link_features_same")
    after = 0
    while rows := db.execute("SELECT rowid, features FROM link_features WHERE rowid > ? ORDER BY rowid LIMIT 20000",
                             (after,)).fetchall():
        db.executemany("UPDATE link_features SET features_key = ? WHERE rowid = ?",
                       zip(features_keys([features for _, features in rows]), [row_id for row_id, _ in rows]))
        after = rows[-1][0]
    db.execute("CREATE TEMP TABLE merged (kept INTEGER PRIMARY KEY, copies INTEGER, learnt INTEGER, parent_score REAL)")
    db.execute("INSERT INTO merged SELECT MIN(rowid), SUM(copies), MAX(learnt), MAX(parent_score) FROM link_features"
               " GROUP BY target_id, features_key")
    db.execute("DELETE FROM link_features WHERE rowid NOT IN (SELECT kept FROM merged)")
    db.execute("UPDATE link_features SET (copies, learnt, parent_score) ="
               " (SELECT copies, learnt, parent_score FROM merged WHERE kept = link_features.rowid)")
    db.execute("DROP TABLE merged")
    db.execute("CREATE UNIQUE INDEX link_features_by_key ON link_features (target_id, features_key)")
    db.execute("COMMIT")
