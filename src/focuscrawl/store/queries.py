"""The SQL the crawl's learning loops, link analysis, evaluation and the benchmark run on a
crawl database, besides the page records of :class:`Store` and the frontier's own tables:
reads, and the updates those loops make (re-judged scores, link scores, the adaptation's log;
an earlier version's term table of the apprentice). During a crawl, ``store.queries``; afterwards,
``Queries(read_only(directory))``. A shared backend gives its own class of the same methods."""

from __future__ import annotations

import json
import os
import random
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path

import numpy as np

from focuscrawl.store.layout import CrawlDir, CrawlDirError
from focuscrawl.store.schema import QUEUED, SKIPPED
from focuscrawl.store.near_duplicates import NEAR_DUPLICATES_SCHEMA, NearDuplicateRecords
from focuscrawl.store.search_index import SEARCH_SCHEMA, SearchIndex
from focuscrawl.store.sql import rows_in

_VARYING = re.compile(r"[a-z][a-z0-9+.-]*://\S+|\d{4,}")  # URLs, sizes and ports in a reason (not statuses)


def _placeholder(match: re.Match) -> str:
    return "URL" if "://" in match.group() else "N"


FAILURE_ROWS = ("SELECT CASE WHEN error IS NOT NULL THEN error ELSE 'HTTP ' || status END, refused, COUNT(*) FROM fetches"
                " WHERE error IS NOT NULL OR status >= 400 GROUP BY 1, 2")  # one SQL for SQLite and PostgreSQL


def sample_with(rows: list[tuple[int, str]], count: int, seed: int, always: Iterable[str]) -> list[tuple[int, str]]:
    """A seeded sample of ``count`` (url id, url) rows, with those of the URLs ``always`` added, in id order."""
    wanted = set(always)
    return sorted(set(random.Random(seed).sample(rows, min(count, len(rows)))) | {r for r in rows if r[1] in wanted})


def failures_grouped(rows, limit: int) -> list[tuple[str, int]]:
    """(reason, refused, count) rows as one line per cause, commonest first: URLs and long
    numbers taken out, refusals marked so."""
    reasons = Counter()
    for reason, refused, count in rows:
        reasons[("refused: " if refused else "") + _VARYING.sub(_placeholder, reason)] += count
    return reasons.most_common(limit)


def pid_alive(pid: int) -> bool:
    if pid <= 0:  # none recorded (os.kill would signal our own process group)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_only(directory: Path, any_thread: bool = False) -> sqlite3.Connection:
    """A crawl database opened for reading only (a finished crawl, or one another process runs);
    ``any_thread``: used by one thread at a time, but not always the same (a streamed response)."""
    return sqlite3.connect(f"file:{CrawlDir(directory).database}?mode=ro", uri=True, check_same_thread=not any_thread)


def open_index(directory: Path, writable: bool = False) -> SearchIndex:
    """The search index of a crawl, read-only (a crawl may be running and writing it), or
    writable for users' feedback (waiting for the crawl's commits)."""
    if writable:
        return SearchIndex(_writing_beside_a_crawl(directory, SEARCH_SCHEMA))
    _existing(directory)
    db = read_only(directory)
    if db.execute("SELECT COUNT(*) FROM sqlite_master WHERE name IN ('search_index', 'late_anchor_index')").fetchone()[0] < 2:
        db.close()
        raise CrawlDirError(f"{directory}: this crawl has no search index yet: run focuscrawl index {directory}")
    return SearchIndex(db)


def open_near_duplicates(directory: Path) -> NearDuplicateRecords:
    """A crawl's near-duplicate records, writable (waiting for a running crawl's commits)."""
    return NearDuplicateRecords(_writing_beside_a_crawl(directory, NEAR_DUPLICATES_SCHEMA))


def _existing(directory: Path) -> CrawlDir:
    files = CrawlDir(directory)
    if not files.exists():
        raise CrawlDirError(f"{directory}: not a crawl directory (no crawl.db)")
    return files


def _writing_beside_a_crawl(directory: Path, schema: str) -> sqlite3.Connection:
    """A connection to a crawl's database that writes beside the crawl's own (waiting for its
    commits), with the tables of ``schema`` made if missing."""
    db = sqlite3.connect(_existing(directory).database, timeout=10.0)
    db.executescript(schema)
    return db


def meta_of(directory: Path) -> dict[str, str]:
    with closing(read_only(directory)) as db:
        return Queries(db).meta()


class PortableQueries:
    """The queries both backends run with the same SQL: link analysis's (graph.py: the topics,
    their base sets, the scores) and the queued URLs with their parents. Part of ``Queries`` (and
    of a shared crawl's ``PgQueries``, whose ``_execute`` rewrites the placeholders)."""

    db: sqlite3.Connection

    def _execute(self, sql: str, arguments: tuple = ()):
        return self.db.execute(sql, arguments)

    def _executemany(self, sql: str, rows) -> None:
        self.db.executemany(sql, rows)

    _WITH_PARENTS = ("SELECT u.id, u.depth, u.url, d.relevance, p.priority FROM urls u LEFT JOIN urls p ON"
                     " p.id = u.parent_id LEFT JOIN documents d ON d.url_id = u.parent_id")

    def queued_with_parents(self, below: float) -> list[tuple]:
        """(id, depth, url, parent's relevance, parent's priority) of the queued URLs not reached by
        tunnelling whose priority is below ``below`` (not promoted to the head)."""
        return self._execute(f"{self._WITH_PARENTS} WHERE u.state = ? AND u.tunnel = 0 AND u.priority < ?",
                             (QUEUED, below)).fetchall()

    def skipped_with_parents(self, reason: str) -> list[tuple]:
        """As :func:`queued_with_parents`, of the URLs skipped for ``reason``."""
        return self._execute(f"{self._WITH_PARENTS} WHERE u.state = ? AND u.skip_reason = ?", (SKIPPED, reason)).fetchall()

    def median_relevance(self) -> float | None:
        """The median critic score of the pages judged so far (None before the first)."""
        count = self._execute("SELECT COUNT(relevance) FROM documents").fetchone()[0]
        if not count:
            return None
        return float(self._execute("SELECT relevance FROM documents WHERE relevance IS NOT NULL ORDER BY relevance"
                                   " LIMIT 1 OFFSET ?", (count // 2,)).fetchone()[0])

    def crawl_topics(self) -> list[str]:
        """The topics to analyse: a taxonomy crawl's topics that hold pages, or "" (the one topic)."""
        topics = [t for (t,) in self._execute("SELECT DISTINCT topic FROM documents WHERE topic IS NOT NULL ORDER BY topic")]
        return topics or [""]

    def base_set(self, topic: str, threshold: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, tuple[str, str, float | None]]]:
        """The base set of ``topic`` (a taxonomy path, or "" for a crawl's one topic): pages judged
        at least ``threshold`` (into the topic or one of its subtopics; the root set), their
        successors and their known predecessors. Returns (base set's URL ids, root set's, edges as
        (source, target) id pairs, id -> (url, host, relevance))."""
        where = "d.relevance >= ?" + (" AND (d.topic = ? OR substr(d.topic, 1, ?) = ?)" if topic else "")
        arguments = (threshold, topic, len(topic) + 1, topic + "/") if topic else (threshold,)
        for table in ("root_set", "base_set"):
            self._execute(f"CREATE TEMP TABLE IF NOT EXISTS {table} (id BIGINT PRIMARY KEY)")  # PostgreSQL: 64-bit
            self._execute(f"DELETE FROM {table}")
        self._execute(f"INSERT INTO root_set SELECT d.url_id FROM documents d WHERE {where}", arguments)
        self._execute("INSERT INTO base_set SELECT id FROM root_set"  # links come from fetched pages only
                      " UNION SELECT l.target_id FROM links l JOIN urls u ON u.id = l.target_id"
                      " WHERE l.source_id IN (SELECT id FROM root_set) AND u.url LIKE 'http%'"  # not mailto:, irc:, …
                      " UNION SELECT source_id FROM links WHERE target_id IN (SELECT id FROM root_set)")
        url_ids = np.array([i for (i,) in self._execute("SELECT id FROM base_set ORDER BY id")], dtype=np.int64)
        root = np.array([i for (i,) in self._execute("SELECT id FROM root_set ORDER BY id")], dtype=np.int64)
        pairs = np.array(self._execute(
            "SELECT DISTINCT l.source_id, l.target_id FROM base_set b JOIN links l ON l.source_id = b.id"
            " WHERE l.target_id IN (SELECT id FROM base_set) AND l.source_id != l.target_id").fetchall(),
            dtype=np.int64).reshape(-1, 2)
        info = {i: (url, host, relevance) for i, url, host, relevance in self._execute(
            "SELECT u.id, u.url, u.host, d.relevance FROM base_set b JOIN urls u ON u.id = b.id"
            " LEFT JOIN documents d ON d.url_id = u.id")}
        return url_ids, root, pairs, info

    def save_link_scores(self, topic: str, url_ids: list[int], columns: dict[str, list[float]]) -> None:
        """Replace the topic's stored scores; ``columns``: hub, authority, pagerank and
        confidence_pagerank, each per URL id (call inside a transaction)."""
        self._execute("DELETE FROM link_scores WHERE topic = ?", (topic,))
        now = time.time()
        self._executemany(
            "INSERT INTO link_scores (topic, url_id, hub, authority, pagerank, confidence_pagerank, computed_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            zip([topic] * len(url_ids), url_ids, columns["hub"], columns["authority"], columns["pagerank"],
                columns["confidence_pagerank"], [now] * len(url_ids)))


class Queries(PortableQueries):
    """The SQLite backend's queries on one crawl database. A crawl's parts reach them as
    ``store.queries``; tools open a database and wrap it (``Queries(read_only(directory))``)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def meta(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT key, value FROM meta"))

    # -- pages and their scores ---------------------------------------------------------------------

    def seed_urls(self) -> list[str]:
        """The URLs a crawl started from (crawls made before the seeds were kept in ``meta``)."""
        return [url for (url,) in self.db.execute("SELECT url FROM urls WHERE depth = 0 AND parent_id IS NULL")]

    def recent_relevance(self, count: int) -> list[float]:
        """The critic's scores of the last ``count`` pages judged, oldest first."""
        return [r for (r,) in self.db.execute(
            "SELECT relevance FROM (SELECT d.relevance, d.fetch_id FROM documents d WHERE d.relevance IS NOT NULL"
            " ORDER BY d.fetch_id DESC LIMIT ?) ORDER BY fetch_id", (count,))]

    def count_relevant(self, threshold: float) -> int:
        return self.db.execute("SELECT COUNT(*) FROM documents WHERE relevance >= ?", (threshold,)).fetchone()[0]

    def confident_pages(self, threshold: float, topic: str) -> dict[int, float]:
        """url id -> confidence of the pages accepted into ``topic`` ("" for a crawl's one topic):
        Pr(relevant) for a two-class critic, eq. 2.22's confidence for a taxonomy."""
        return dict(self.db.execute("SELECT url_id, CASE WHEN topic IS NULL THEN relevance ELSE confidence END FROM documents"
                               " WHERE relevance >= ? AND COALESCE(topic, '') = ?", (threshold, topic)))

    def accepted_pages(self) -> list[tuple[int, float, str]]:
        """(url id, the critic's score, text) of every accepted page with text, not a duplicate."""
        return self.db.execute("SELECT url_id, relevance, text FROM documents WHERE relevance >= 0.5 AND text != ''"
                               " AND duplicate_of IS NULL ORDER BY url_id").fetchall()

    def judged_topics(self) -> list[tuple[int, float, str | None, float | None]]:
        """(url id, the critic's score, topic, confidence) of every judged page."""
        return self.db.execute("SELECT url_id, relevance, topic, confidence FROM documents WHERE relevance IS NOT NULL").fetchall()

    def topic_pages(self, topic: str) -> list[tuple[int, str, str]]:
        """(url id, URL, text) of the pages with text accepted into ``topic`` ("" for a crawl's one
        topic), not duplicates."""
        return self.db.execute(
            "SELECT d.url_id, u.url, d.text FROM documents d JOIN urls u ON u.id = d.url_id WHERE d.relevance >= 0.5"
            " AND COALESCE(d.topic, '') = ? AND d.text != '' AND d.duplicate_of IS NULL ORDER BY d.url_id", (topic,)).fetchall()

    def texts_by_score(self, count: int, best: bool = False, below: float = 1.0) -> list[str]:
        """The texts of the ``count`` judged pages scored lowest (or highest), of those scored at most ``below``."""
        order = "DESC" if best else "ASC"
        return [t for (t,) in self.db.execute(
            "SELECT text FROM documents WHERE relevance IS NOT NULL AND relevance <= ? AND text != ''"
            f" ORDER BY relevance {order}, url_id LIMIT ?", (below, count))]

    def judged_texts(self, after: int = 0, through: int | None = None, limit: int = -1) -> list[tuple[int, str]]:
        """(url id, text) of the judged pages with text, in url id order: ``limit`` of them after
        ``after`` and up to ``through`` (a chunk at a time: texts are most of the database)."""
        return self.db.execute(
            "SELECT url_id, text FROM documents WHERE relevance IS NOT NULL AND text != '' AND url_id > ?"
            " AND url_id <= COALESCE(?, url_id) ORDER BY url_id LIMIT ?", (after, through, limit)).fetchall()

    def judged_extent(self) -> tuple[int, int]:
        """How many judged pages have text, and the last one's url id (0: none)."""
        count, last = self.db.execute(
            "SELECT COUNT(*), MAX(url_id) FROM documents WHERE relevance IS NOT NULL AND text != ''").fetchone()
        return count, last or 0

    def judged_pages(self, count: int, seed: int, always: list[str] = ()) -> list[tuple[str, str]]:
        """(url, text) of ``count`` judged pages with text, a seeded sample when there are more, and
        of those among ``always`` (URLs) too."""
        chosen = sample_with(self.db.execute(
            "SELECT d.url_id, u.url FROM documents d JOIN urls u ON u.id = d.url_id"
            " WHERE d.relevance IS NOT NULL AND d.text != '' ORDER BY d.url_id").fetchall(), count, seed, always)
        texts = dict(rows_in(self.db, "SELECT url_id, text FROM documents WHERE url_id IN ({})", [i for i, _ in chosen]))
        return [(url, texts[url_id]) for url_id, url in chosen]

    def set_judgements(self, rows: Iterable[tuple[float, str | None, float | None, int]]) -> None:
        """New judgements of stored pages, as (relevance, topic, confidence, url id); the search
        index ranks by them too."""
        rows = list(rows)
        self.db.executemany("UPDATE documents SET relevance = ?, topic = ?, confidence = ? WHERE url_id = ?", rows)
        self.db.executemany("UPDATE search_docs SET topic = ?, confidence = ? WHERE url_id = ?",
                            [(topic, relevance if confidence is None else confidence, url_id)
                             for relevance, topic, confidence, url_id in rows])

    def relevance_by_url(self) -> dict[str, float]:
        """The critic's score of every judged page, by the URL asked for and the URL a redirect ended at."""
        return dict(self.db.execute(
            "SELECT u.url, d.relevance FROM documents d JOIN urls u ON u.id = d.url_id WHERE d.relevance IS NOT NULL"
            " UNION ALL SELECT f.final_url, d.relevance FROM documents d JOIN fetches f ON f.id = d.fetch_id"
            " WHERE d.relevance IS NOT NULL"))

    def path_step(self, url_id: int) -> tuple[int | None, int, float | None, str | None]:
        """(parent id, depth, relevance, topic) of a URL: one step up the path that found it."""
        return self.db.execute("SELECT u.parent_id, u.depth, d.relevance, d.topic FROM urls u"
                          " LEFT JOIN documents d ON d.url_id = u.id WHERE u.id = ?", (url_id,)).fetchone()

    def fetched_documents(self) -> list[tuple[str, float | None, float, str | None]]:
        """(final URL, relevance, fetched at, text) of every stored page in fetch order."""
        return self.db.execute("SELECT f.final_url, d.relevance, f.fetched_at, d.text FROM fetches f"
                          " JOIN documents d ON d.fetch_id = f.id ORDER BY f.id").fetchall()

    def page_weight(self) -> tuple[int, float, int]:
        """(stored pages, their bodies' bytes, their links' rows: a page and target each, every
        link in crawls of versions before link_rows.py): what a crawl's pages weighed."""
        pages, size = self.db.execute("SELECT COUNT(*), TOTAL(f.bytes) FROM documents d JOIN fetches f"
                                      " ON f.id = d.fetch_id").fetchone()
        return pages, size, self.db.execute("SELECT COUNT(*) FROM links").fetchone()[0]

    def judged_originals(self) -> list[tuple[str, str | None, float]]:
        """(final URL, text, relevance) of every judged page that is not a duplicate."""
        return self.db.execute("SELECT f.final_url, d.text, d.relevance FROM documents d JOIN fetches f ON f.id = d.fetch_id"
                          " WHERE d.relevance IS NOT NULL AND d.duplicate_of IS NULL").fetchall()

    def visited_urls(self) -> set[str]:
        """Every URL the crawl asked for (refused ones included), as asked for and as a redirect ended."""
        return {url for (url,) in self.db.execute(
            "SELECT u.url FROM fetches f JOIN urls u ON u.id = f.url_id UNION SELECT final_url FROM fetches")}

    def fetch_counts(self) -> tuple[int, int, int, int]:
        """Responses received, errors, URLs refused by our own rules (neither of the first two: not
        fetches), and attempts in all."""
        fetched, errors, refused, attempts = self.db.execute(
            "SELECT COUNT(CASE WHEN NOT refused THEN status END), COUNT(CASE WHEN NOT refused THEN error END),"
            " TOTAL(refused), COUNT(*) FROM fetches").fetchone()
        return fetched, errors, int(refused), attempts

    def warc_end(self, name: str) -> int | None:
        """Where the last committed record in WARC file ``name`` ends (None: no record, or one
        stored before offsets were)."""
        row = self.db.execute("SELECT warc_end FROM fetches WHERE warc_file = ? ORDER BY id DESC LIMIT 1", (name,)).fetchone()
        return row[0] if row else None

    def failures_by_reason(self, limit: int = 12) -> list[tuple[str, int]]:
        """What went wrong, commonest first: errors, refusals (marked so) and HTTP error statuses,
        with URLs and long numbers taken out so that one cause is one line."""
        return failures_grouped(self.db.execute(FAILURE_ROWS), limit)

    def crawl_state(self, meta: dict[str, str]) -> str:
        """The crawl's state; a 'running' crawl whose process is gone was stopped."""
        state = meta.get("state", "new")
        return "stopped" if state in ("running", "paused") and not pid_alive(int(meta.get("pid", 0) or 0)) else state

    def search_index(self) -> SearchIndex | None:
        """The crawl's search index, if it has one."""
        indexed = self.db.execute("SELECT COUNT(*) FROM sqlite_master WHERE name IN ('search_docs', 'late_anchors')")
        return SearchIndex(self.db) if indexed.fetchone()[0] == 2 else None

    def hosts_by_pages(self, limit: int = 12) -> list[tuple[str, int, int, str | None]]:
        """The hosts with the most pages fetched: (host, fetched, queued, status if recorded)."""
        return self.db.execute(
            "SELECT u.host, COUNT(CASE WHEN u.state = 2 THEN 1 END), COUNT(CASE WHEN u.state IN (0, 1) THEN 1 END),"
            " h.status FROM urls u LEFT JOIN hosts h ON h.host = u.host GROUP BY u.host"
            " ORDER BY COUNT(CASE WHEN u.state = 2 THEN 1 END) DESC LIMIT ?", (limit,)).fetchall()

    def fetch_summary(self) -> tuple[list[str], float, float, int]:
        """(URLs answered 200, first fetch start, last fetch end, fetches) for the benchmark."""
        urls = [url for (url,) in self.db.execute("SELECT final_url FROM fetches WHERE status = 200")]
        first, last, fetched = self.db.execute("SELECT MIN(fetched_at), MAX(fetched_at + seconds), COUNT(*) FROM fetches").fetchone()
        return urls, first, last, fetched

    # -- the frontier seen from its parents ---------------------------------------------------------

    def queued_parent_scores(self) -> list[float]:
        """The critic's score of the page each queued URL was found on."""
        return [p for (p,) in self.db.execute(
            "SELECT d.relevance FROM urls u JOIN documents d ON d.url_id = u.parent_id WHERE u.state = ?", (QUEUED,))]

    def followed_links(self, source_id: int) -> list[int]:
        """The URL ids a page links to, nofollow links left out."""
        return [target for (target,) in self.db.execute("SELECT target_id FROM links WHERE source_id = ? AND nofollow = 0",
                                                   (source_id,))]

    def load_model(self, name: str) -> bytes | None:
        """A learner saved with the crawl (the critic, the apprentice); None if there is none,
        also in a crawl made before the table existed."""
        if not self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'models'").fetchone():
            return None
        row = self.db.execute("SELECT data FROM models WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    # -- an earlier version's apprentice vocabulary ------------------------------------------------

    def apprentice_terms(self) -> dict[str, int]:
        """A crawl begun by a version that numbered the apprentice's terms in a table: term -> id."""
        if not self.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'apprentice_terms'").fetchone():
            return {}
        return dict(self.db.execute("SELECT term, id FROM apprentice_terms"))

    def drop_apprentice_terms(self) -> None:
        self.db.execute("DROP TABLE IF EXISTS apprentice_terms")

    # -- adaptation's log ---------------------------------------------------------------------------

    def log_adaptation(self, pages: int, kind: str, detail: dict) -> int:
        """Record a step of the adaptation (inside a transaction); returns its id."""
        return self.db.execute("INSERT INTO adaptations (pages, kind, detail, at) VALUES (?, ?, ?, ?)",
                          (pages, kind, json.dumps(detail), time.time())).lastrowid

    def add_to_adaptation(self, step: int, **detail) -> None:
        """Add to a recorded step's detail (the harvest rate measured after it)."""
        (stored,) = self.db.execute("SELECT detail FROM adaptations WHERE id = ?", (step,)).fetchone()
        self.db.execute("UPDATE adaptations SET detail = ? WHERE id = ?", (json.dumps({**json.loads(stored), **detail}), step))
