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
WAL_CHECKPOINT_PAGES = 10_000  # SQLite's default: 1 000 (of 4 KiB)
LEARNT_THROUGH = "apprentice_learnt_through"  # meta: the newest fetch of the apprentice's last batch learnt


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
    content_hash TEXT NOT NULL,
    duplicate_of INTEGER,
    relevance REAL,
    canonical TEXT,
    charset TEXT,
    noindex INTEGER NOT NULL DEFAULT 0,
    language_score INTEGER,
    topic TEXT,  -- with a taxonomy: the deepest topic that accepted the page
    confidence REAL,  -- BINGO! eq. 2.22 at that topic
    preview TEXT,  -- the topic-specific summary (thesis §2.3.3)
    text TEXT  -- last: SQLite reads a row's columns in order, and a column after a text of a few kB
    -- is read through the text's overflow pages (the scores' median, read by every batch of the
    -- apprentice's learning: 6 ms at 2 000 pages, 1.2 ms with the text last; crawls made before keep theirs)
);
CREATE INDEX IF NOT EXISTS documents_hash ON documents (content_hash);
CREATE TABLE IF NOT EXISTS links (  -- a row per page and target it links to (link_rows.py)
    source_id INTEGER NOT NULL,
    target_id INTEGER NOT NULL,
    anchor_text TEXT,  -- the distinct anchor texts of the page's links to the target, a line each
    leaf_start INTEGER,  -- the leaf span of the page's first link to the target
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
CREATE TABLE IF NOT EXISTS link_instances (  -- the apprentice's: a page's admissible links in one row (link_instances.py)
    source_id INTEGER NOT NULL,
    fetch_id INTEGER NOT NULL,  -- the page's fetch: its place in the crawl's order
    parent_score REAL NOT NULL,  -- the page's critic score then (best-first's priority of its links)
    targets BLOB NOT NULL,  -- int64 URL ids
    ends BLOB NOT NULL,  -- int32: link i's <term, offset> ids end at features[ends[i]], start at link i-1's end
    features BLOB NOT NULL  -- uint32 <term, offset> ids, link after link
);
CREATE INDEX IF NOT EXISTS link_instances_fetch ON link_instances (fetch_id);
CREATE INDEX IF NOT EXISTS link_instances_source ON link_instances (source_id);
CREATE TABLE IF NOT EXISTS link_redirects (  -- for the apprentice, links to a page that only redirects lead on
    old_target INTEGER PRIMARY KEY,
    new_target INTEGER NOT NULL,
    fetch_id INTEGER NOT NULL  -- the newest fetch when the redirect was found
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
CREATE TABLE IF NOT EXISTS host_clusters (  -- the URLs of one host: how those fetched turned out (frontier.py)
    host TEXT PRIMARY KEY,
    pages INTEGER NOT NULL,
    relevance REAL NOT NULL,
    predicted REAL NOT NULL,  -- the sum of their priorities before the host's factor
    factor REAL NOT NULL
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
    # a checkpoint copies each page changed since the last one once, however often it changed: the
    # index pages of `links` and the search index change with every page, so checkpoints every
    # 40 MB of WAL instead of SQLite's 4 MB cost the crawl's process 3-9 % less CPU (bench, three pairs)
    db.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
    return db


def upgrade_schema(db: sqlite3.Connection) -> None:
    """Create what is missing: a new crawl's tables, or what an earlier version did not have."""
    db.executescript(SCHEMA)
    db.executescript(SEARCH_SCHEMA)
    db.executescript(NEAR_DUPLICATES_SCHEMA)
    _add_missing_columns(db, "documents", {"topic": "TEXT", "confidence": "REAL", "preview": "TEXT"})
    _add_missing_columns(db, "fetches", {"refused": "INTEGER NOT NULL DEFAULT 0", "warc_end": "INTEGER"})
    _add_missing_columns(db, "urls", {"tunnel": "INTEGER NOT NULL DEFAULT 0", "queue": "TEXT NOT NULL DEFAULT ''"})
    db.execute("DROP INDEX IF EXISTS urls_frontier")  # the index before sub-queues
    db.execute("CREATE INDEX IF NOT EXISTS urls_queue ON urls (queue, host, priority DESC, id) WHERE state = 0")
    db.execute("CREATE INDEX IF NOT EXISTS urls_parent ON urls (parent_id) WHERE state = 0")  # a link cluster's queued URLs
    _stage_link_features(db)


def _add_missing_columns(db: sqlite3.Connection, table: str, columns: dict[str, str]) -> list[str]:
    """Crawl databases made by an earlier version gain the columns added since (returned)."""
    present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
    added = [name for name in columns if name not in present]
    for name in added:
        db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {columns[name]}")
    db.commit()
    return added


def _stage_link_features(db: sqlite3.Connection) -> None:
    """A crawl made by an earlier version kept a row per distinct link (``link_features``, maybe
    without copies or scores): each one not learnt yet becomes a row of ``link_instances`` (the
    link as many times as it was seen), placed just after the last batch learnt, so the next
    batch takes those whose targets are judged by then and later ones the others (a link that a
    redirect had moved to its target gets that edge in ``links``); learnt ones go (their targets
    are judged), and so does the table."""
    if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'link_features'").fetchone():
        return
    present = {row[1] for row in db.execute("PRAGMA table_info(link_features)")}
    copies = "copies" if "copies" in present else "1"
    score = "parent_score" if "parent_score" in present else \
        "COALESCE((SELECT relevance FROM documents WHERE url_id = source_id), 0.0)"
    learnt = "learnt" if "learnt" in present else "0"
    after = int((db.execute("SELECT value FROM meta WHERE key = 'apprentice_fetches_learnt'").fetchone() or ("0",))[0])
    db.execute("BEGIN")
    rowid = 0
    while rows := db.execute(f"SELECT rowid, source_id, target_id, features, {copies}, {score} FROM link_features"
                             f" WHERE rowid > ? AND NOT {learnt} ORDER BY rowid LIMIT 20000", (rowid,)).fetchall():
        db.executemany("INSERT INTO link_instances (source_id, fetch_id, parent_score, targets, ends, features)"
                       " VALUES (?, ?, ?, ?, ?, ?)",
                       [(source, after + 1, parent, np.full(seen, target, dtype=np.int64).tobytes(),
                         (np.arange(1, seen + 1, dtype=np.int32) * (len(features) // 4)).tobytes(), features * seen)
                        for _, source, target, features, seen, parent in rows])
        rowid = rows[-1][0]
    db.execute(  # a link a redirect had moved is found from its target, as the crawl's redirects are
        f"INSERT INTO links (source_id, target_id) SELECT DISTINCT source_id, target_id FROM link_features lf WHERE NOT"
        f" {learnt} AND NOT EXISTS (SELECT 1 FROM links l WHERE l.source_id = lf.source_id AND l.target_id = lf.target_id)")
    db.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (LEARNT_THROUGH, str(after)))
    db.execute("DELETE FROM meta WHERE key IN ('apprentice_fetches_learnt', 'apprentice_links_learnt')")
    db.execute("DROP TABLE link_features")
    db.execute("COMMIT")
