"""The crawl's repository on PostgreSQL, for many workers crawling one crawl: each page's fetch,
document, links, host state and its URL's new state (the shared frontier, :mod:`.pg_frontier`,
on the same connection) in one transaction, in the crawl's schema. Each worker writes its own
WARC files (``worker-<id>-NNNNN.warc.gz``) and harvest log into the shared crawl directory.

A page is one transaction, committed asynchronously (``synchronous_commit = off``): a worker
killed loses nothing the server has received; a server crash may lose its last fraction of a
second of pages, whose URLs are then handed out again. There is no group commit: PostgreSQL's
commit is not SQLite's file sync.

Built so far: the page path of a crawl without the near-duplicate signatures or the search
index (the worker refuses configurations that need them), and what the learning steps (the
critic's and the apprentice's) read and write (one worker takes them: :meth:`PgRepository.leads`)."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TypeVar

import numpy as np
import psycopg

from focuscrawl.fetch.http import Response
from focuscrawl.store import pg_frontier
from focuscrawl.store.layout import CrawlDir
from focuscrawl.store.near_duplicates import PG_NEAR_DUPLICATES_SCHEMA, RunningRecords
from focuscrawl.store.pg_frontier import LIVE_WORKERS, PgFrontier
from focuscrawl.store.queries import FAILURE_ROWS, PortableQueries, failures_grouped, sample_with
from focuscrawl.store.link_instances import Links, NewInstances, blobs
from focuscrawl.store.repository import WarcArchive, lock_directory
from focuscrawl.store.schema import QUEUED, transaction, upgrade_schema
from focuscrawl.store.schema import connect as connect_sqlite

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key text PRIMARY KEY, value text);
CREATE TABLE IF NOT EXISTS fetches (
    id bigserial PRIMARY KEY,
    url_id bigint NOT NULL,
    url text NOT NULL,
    final_url text,
    status integer,
    error text,
    mime text,
    headers text,
    redirects text,
    depth integer,
    parent_id bigint,
    fetched_at double precision NOT NULL,
    seconds double precision,
    attempts integer,
    bytes bigint,
    warc_file text,
    refused boolean NOT NULL DEFAULT false,
    warc_end bigint,
    worker text NOT NULL
);
CREATE INDEX IF NOT EXISTS fetches_url ON fetches (url_id);
CREATE INDEX IF NOT EXISTS fetches_warc ON fetches (warc_file, id);
CREATE TABLE IF NOT EXISTS documents (
    url_id bigint PRIMARY KEY,
    fetch_id bigint NOT NULL,
    title text,
    text text,
    content_hash text NOT NULL,
    duplicate_of bigint,
    relevance double precision,
    canonical text,
    charset text,
    noindex boolean NOT NULL DEFAULT false,
    language_score integer,
    topic text,
    confidence double precision,
    preview text
);
CREATE INDEX IF NOT EXISTS documents_hash ON documents (content_hash) WHERE duplicate_of IS NULL;
CREATE TABLE IF NOT EXISTS links (
    source_id bigint NOT NULL,
    target_id bigint NOT NULL,
    anchor_text text,
    leaf_start integer,
    leaf_end integer,
    nofollow boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS links_source ON links (source_id);
CREATE INDEX IF NOT EXISTS links_target ON links (target_id);
CREATE TABLE IF NOT EXISTS sitemaps (origin text NOT NULL, url text NOT NULL, PRIMARY KEY (origin, url));
CREATE TABLE IF NOT EXISTS models (name text PRIMARY KEY, data bytea NOT NULL);
CREATE TABLE IF NOT EXISTS link_scores (
    topic text NOT NULL,
    url_id bigint NOT NULL,
    hub double precision NOT NULL,
    authority double precision NOT NULL,
    pagerank double precision NOT NULL,
    confidence_pagerank double precision NOT NULL,
    computed_at double precision NOT NULL,
    PRIMARY KEY (topic, url_id)
);
CREATE TABLE IF NOT EXISTS adaptations (
    id bigserial PRIMARY KEY,
    pages bigint NOT NULL,
    kind text NOT NULL,
    detail text NOT NULL,
    at double precision NOT NULL
);
CREATE TABLE IF NOT EXISTS link_features (  -- the apprentice's <term, offset> ids of every admissible link
    id bigserial PRIMARY KEY,
    source_id bigint NOT NULL,
    target_id bigint NOT NULL,
    features bytea NOT NULL,
    learnt boolean NOT NULL DEFAULT false,
    copies integer NOT NULL DEFAULT 1,
    parent_score double precision NOT NULL DEFAULT 0
);
-- md5: a link's features may outgrow a B-tree entry (about 2.7 kB)
CREATE UNIQUE INDEX IF NOT EXISTS link_features_distinct ON link_features (target_id, md5(features));
""" + PG_NEAR_DUPLICATES_SCHEMA
LAST_TABLE = "signature_bands"  # the schema's last: a crawl made by an older version gets what it lacks


def published(dsn: str, crawl: str) -> dict[str, str] | None:
    """The meta data of a crawl published in the database (None: there is no such crawl), read
    without creating anything."""
    schema = pg_frontier.schema_of(crawl)
    with psycopg.connect(dsn, autocommit=True) as db:
        if db.execute("SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'meta'", (schema,)).fetchone():
            meta = dict(db.execute(f"SELECT key, value FROM {schema}.meta").fetchall())
            return meta if "config" in meta else None
    return None


def open_queries(dsn: str, crawl: str):
    """A connection to a shared crawl's tables and its :class:`PgQueries` (status, export)."""
    db = pg_frontier.connect(dsn, crawl)
    return db, PgQueries(db)


def forget(dsn: str, crawl: str) -> None:
    """Drop a crawl and everything it holds from the database (eval crawling the same again)."""
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(f"DROP SCHEMA IF EXISTS {pg_frontier.schema_of(crawl)} CASCADE")


def republish(dsn: str, crawl: str, config_json: str) -> None:
    """A published crawl's configuration changed (a new budget): workers starting now read it."""
    with closing(pg_frontier.connect(dsn, crawl)) as db:
        db.execute("UPDATE meta SET value = %s WHERE key = 'config'", (config_json,))


_SAME_LINK = ("ON CONFLICT (target_id, md5(features)) DO UPDATE SET copies = link_features.copies + EXCLUDED.copies,"
              " parent_score = GREATEST(link_features.parent_score, EXCLUDED.parent_score)")
T = TypeVar("T")
UNIT_ATTEMPTS = 5  # a page's unit that keeps deadlocking fails after this many runs
LEAD_RETRY = 5.0  # seconds between a worker's tries to take the learning steps over


class PgPlaceholders:
    """SQL written for both backends (``?`` placeholders) run on PostgreSQL."""

    db: psycopg.Connection

    def _execute(self, sql: str, arguments: tuple = ()):
        return self.db.execute(sql.replace("%", "%%").replace("?", "%s"), arguments)

    def _executemany(self, sql: str, rows) -> None:
        with self.db.cursor() as cursor:
            cursor.executemany(sql.replace("%", "%%").replace("?", "%s"), list(rows))


class PgNearDuplicateRecords(PgPlaceholders, RunningRecords):
    """A shared crawl's near-duplicate records, as a running crawl writes and reads them."""


class PgQueries(PgPlaceholders, PortableQueries):
    """The read views the page path and the learning steps ask for (the SQLite crawl's are
    :class:`.queries.Queries`); link analysis runs the SQLite crawl's SQL."""

    def __init__(self, db: psycopg.Connection):
        self.db = db

    def fetch_counts(self) -> tuple[int, int, int, int]:
        """Responses received, errors, URLs refused by our own rules, and attempts in all (every worker's)."""
        return self.db.execute(
            "SELECT COUNT(status) FILTER (WHERE NOT refused), COUNT(error) FILTER (WHERE NOT refused),"
            " COUNT(*) FILTER (WHERE refused), COUNT(*) FROM fetches").fetchone()

    def seed_urls(self) -> list[str]:
        return [url for (url,) in self.db.execute("SELECT url FROM urls WHERE depth = 0 AND parent_id IS NULL")]

    def warc_end(self, name: str) -> int | None:
        """Where the last committed record in WARC file ``name`` ends."""
        row = self.db.execute("SELECT warc_end FROM fetches WHERE warc_file = %s ORDER BY id DESC LIMIT 1",
                              (name,)).fetchone()
        return row[0] if row else None

    def load_model(self, name: str) -> bytes | None:
        row = self.db.execute("SELECT data FROM models WHERE name = %s", (name,)).fetchone()
        return bytes(row[0]) if row else None

    def failures_by_reason(self, limit: int = 12) -> list[tuple[str, int]]:
        return failures_grouped(self.db.execute(FAILURE_ROWS), limit)

    def crawl_state(self, meta: dict[str, str]) -> str:
        """Running while a worker runs (one unseen for two minutes was killed); then what the last
        worker to stop said, or 'stopped' if none could say."""
        if self.db.execute(f"SELECT 1 FROM {LIVE_WORKERS} LIMIT 1").fetchone():
            return "running"
        state = meta.get("state", "new")
        return "stopped" if state in ("running", "paused") else state

    def search_index(self) -> None:
        return None  # the portal's index is built from the database into the crawl directory

    # -- what the learning steps read and write (the elected worker's: PgRepository.leads) --

    def recent_relevance(self, count: int) -> list[float]:
        return [r for (r,) in self.db.execute(
            "SELECT relevance FROM (SELECT relevance, fetch_id FROM documents WHERE relevance IS NOT NULL"
            " ORDER BY fetch_id DESC LIMIT %s) AS recent ORDER BY fetch_id", (count,))]

    def count_relevant(self, threshold: float) -> int:
        return self.db.execute("SELECT COUNT(*) FROM documents WHERE relevance >= %s", (threshold,)).fetchone()[0]

    def texts_by_score(self, count: int, best: bool = False, below: float = 1.0) -> list[str]:
        return [t for (t,) in self.db.execute(
            "SELECT text FROM documents WHERE relevance IS NOT NULL AND relevance <= %s AND text <> ''"
            f" ORDER BY relevance {'DESC' if best else 'ASC'}, url_id LIMIT %s", (below, count))]

    def judged_pages(self, count: int, seed: int, always: list[str] = ()) -> list[tuple[str, str]]:
        chosen = sample_with(self.db.execute(
            "SELECT d.url_id, u.url FROM documents d JOIN urls u ON u.id = d.url_id"
            " WHERE d.relevance IS NOT NULL AND d.text <> '' ORDER BY d.url_id").fetchall(), count, seed, always)
        texts = dict(self.db.execute("SELECT url_id, text FROM documents WHERE url_id = ANY(%s)",
                                     ([i for i, _ in chosen],)).fetchall())
        return [(url, texts[url_id]) for url_id, url in chosen]

    def judged_texts(self, after: int = 0, through: int | None = None, limit: int = -1) -> list[tuple[int, str]]:
        return self.db.execute(
            "SELECT url_id, text FROM documents WHERE relevance IS NOT NULL AND text <> '' AND url_id > %s"
            " AND url_id <= COALESCE(%s::bigint, url_id) ORDER BY url_id LIMIT %s",
            (after, through, None if limit < 0 else limit)).fetchall()

    def judged_extent(self) -> tuple[int, int]:
        count, last = self.db.execute(
            "SELECT COUNT(*), MAX(url_id) FROM documents WHERE relevance IS NOT NULL AND text <> ''").fetchone()
        return count, last or 0

    def set_judgements(self, rows) -> None:
        with self.db.cursor() as cursor:
            cursor.executemany("UPDATE documents SET relevance = %s, topic = %s, confidence = %s WHERE url_id = %s",
                               list(rows))

    def confident_pages(self, threshold: float, topic: str) -> dict[int, float]:
        return dict(self.db.execute(
            "SELECT url_id, CASE WHEN topic IS NULL THEN relevance ELSE confidence END FROM documents"
            " WHERE relevance >= %s AND COALESCE(topic, '') = %s", (threshold, topic)).fetchall())

    def path_step(self, url_id: int) -> tuple[int | None, int, float | None, str | None]:
        """(parent id, depth, relevance, topic) of a URL (sharp focusing walks its path)."""
        return self.db.execute("SELECT u.parent_id, u.depth, d.relevance, d.topic FROM urls u"
                               " LEFT JOIN documents d ON d.url_id = u.id WHERE u.id = %s", (url_id,)).fetchone()

    def followed_links(self, source_id: int) -> list[int]:
        return [t for (t,) in self.db.execute("SELECT target_id FROM links WHERE source_id = %s AND NOT nofollow",
                                              (source_id,))]

    def apprentice_terms(self) -> dict[str, int]:
        """A crawl begun by a version that numbered the apprentice's terms in a table: term -> id
        (the unit that reads them holds them: another worker's waits, then finds none)."""
        self.db.execute("SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':apprentice terms'))")
        if self.db.execute("SELECT to_regclass('apprentice_terms')").fetchone()[0] is None:
            return {}
        return dict(self.db.execute("SELECT term, id FROM apprentice_terms").fetchall())

    def drop_apprentice_terms(self) -> None:
        self.db.execute("DROP TABLE IF EXISTS apprentice_terms")

    def log_adaptation(self, pages: int, kind: str, detail: dict) -> int:
        return self.db.execute("INSERT INTO adaptations (pages, kind, detail, at) VALUES (%s, %s, %s, %s) RETURNING id",
                               (pages, kind, json.dumps(detail), time.time())).fetchone()[0]

    def add_to_adaptation(self, step: int, **detail) -> None:
        (stored,) = self.db.execute("SELECT detail FROM adaptations WHERE id = %s", (step,)).fetchone()
        self.db.execute("UPDATE adaptations SET detail = %s WHERE id = %s", (json.dumps({**json.loads(stored), **detail}),
                                                                            step))


class PgApprenticeInstances:
    """The apprentice's instances in a shared crawl (part of :class:`PgRepository`): recorded by
    every worker, taken by the elected one."""

    db: psycopg.Connection
    _instances_key: int | None = None  # the advisory lock that keeps them whole, once tracked

    def record_link_features(self, source_id: int, fetch_id: int, score: float, targets: list[int],
                             features: np.ndarray, bounds: np.ndarray) -> None:
        """A page's admissible links (as :meth:`LinkInstances.record_link_features` takes them), a
        row per distinct link of the crawl: a link the same as one stored counts as a copy of it
        (and keeps the better source's score). The fetch places nothing here: rows are learnt by
        their ids (:meth:`new_instances`)."""
        distinct: dict[tuple[int, bytes], list] = {}
        for target, features in zip(targets, blobs(features, bounds)):  # one statement may not update a row twice
            distinct.setdefault((target, features), [source_id, target, features, score, 0])[4] += 1
        if distinct:
            columns = list(zip(*(distinct[key] for key in sorted(distinct))))  # two pages lock shared targets in one order
            self.db.execute("INSERT INTO link_features (source_id, target_id, features, parent_score, copies) SELECT *"
                            " FROM unnest(%s::bigint[], %s::bigint[], %s::bytea[], %s::float8[], %s::int[])"
                            f" {_SAME_LINK}", [list(column) for column in columns])

    def track_instances(self) -> None:
        self._instances_key = self.db.execute("SELECT hashtext(current_schema() || ':instances')").fetchone()[0]

    def new_instances(self) -> NewInstances:
        """The SQLite crawl's :meth:`~.repository.Store.new_instances`, whose two watermarks are
        ids: a worker's unit may take an id and commit after another's larger one. So every unit
        takes the instances' lock shared from its first row on (:meth:`track_instances`), and the
        newest ids are read under the lock taken alone: with every unit that took one of them
        committed."""
        after = (int(self.get_meta("apprentice_fetches_learnt", "0")), int(self.get_meta("apprentice_links_learnt", "0")))
        self.db.execute("SELECT pg_advisory_lock(%s)", (self._instances_key,))
        try:
            with self.db.transaction():  # a savepoint: should the read fail, the unlock below still runs
                newest = self.db.execute("SELECT (SELECT COALESCE(MAX(id), 0) FROM fetches),"
                                         " (SELECT COALESCE(MAX(id), 0) FROM link_features)").fetchone()
        finally:
            self.db.execute("SELECT pg_advisory_unlock(%s)", (self._instances_key,))
        rows = self.db.execute(
            "SELECT lf.id, lf.features, d.relevance, lf.copies, lf.parent_score, lf.target_id FROM fetches f"
            " JOIN documents d ON d.url_id = f.url_id AND d.fetch_id = f.id JOIN link_features lf ON lf.target_id = d.url_id"
            " WHERE f.id > %s AND f.id <= %s AND d.relevance IS NOT NULL AND NOT lf.learnt"
            " UNION SELECT lf.id, lf.features, d.relevance, lf.copies, lf.parent_score, lf.target_id FROM link_features lf"
            " JOIN documents d ON d.url_id = lf.target_id"
            " WHERE lf.id > %s AND lf.id <= %s AND d.relevance IS NOT NULL AND NOT lf.learnt ORDER BY 1",
            (after[0], newest[0], after[1], newest[1])).fetchall()
        return NewInstances([row[1:] for row in rows], [row[0] for row in rows], tuple(newest))

    def urls_of(self, url_ids: list[int]) -> dict[int, str]:
        """The URL of each id (the truth-labelled apprentice's instance targets)."""
        return dict(self.db.execute("SELECT id, url FROM urls WHERE id = ANY(%s)", (url_ids,)).fetchall())

    def mark_learnt(self, instances: NewInstances) -> None:
        """``instances`` are in the apprentice now (call in the unit that saves it)."""
        self.db.execute("UPDATE link_features SET learnt = true WHERE id = ANY(%s)", (instances.ids,))
        fetches, links = instances.newest
        self.set_meta(apprentice_fetches_learnt=fetches, apprentice_links_learnt=links)

    def queued_link_features(self, chunk: int = 50000) -> Iterator[Links]:
        """The distinct links to queued URLs, ``chunk`` at a time, read through a cursor on the
        server (call inside :meth:`transaction`)."""
        cursor = self.db.cursor(name="queued_link_features")  # closed with the transaction
        cursor.execute(f"SELECT u.id, lf.features, lf.parent_score FROM urls u JOIN link_features lf ON"
                       f" lf.target_id = u.id WHERE u.state = {QUEUED}")
        while block := cursor.fetchmany(chunk):
            targets, blobs, parents = zip(*block)
            lengths = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs)) // 4
            yield Links(np.array(targets, dtype=np.int64), np.array(parents, dtype=float),
                        np.frombuffer(b"".join(blobs), dtype=np.uint32), np.r_[0, np.cumsum(lengths)],
                        np.zeros(len(targets), dtype=np.int64))

    def rehash_link_features(self, convert: Callable[[bytes], bytes]) -> None:
        """Every stored link's features given new ids (a crawl begun with a term table's), once;
        two links of a target whose features become the same are one, with both's copies."""
        after = 0
        while rows := self.db.execute("SELECT id, source_id, target_id, features, learnt, copies, parent_score"
                                      " FROM link_features WHERE id > %s ORDER BY id LIMIT 20000", (after,)).fetchall():
            merged: dict[tuple[int, bytes], list] = {}  # one statement may not update a row twice
            for row_id, source, target, features, learnt, copies, score in rows:
                new = convert(features)
                row = merged.setdefault((target, new), [row_id, source, target, new, learnt, 0, score])
                row[4], row[5], row[6] = row[4] or learnt, row[5] + copies, max(row[6], score)
            self.db.execute("DELETE FROM link_features WHERE id = ANY(%s)", ([row[0] for row in rows],))
            self.db.execute("INSERT INTO link_features (id, source_id, target_id, features, learnt, copies, parent_score)"
                            " SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bytea[], %s::bool[],"
                            f" %s::int[], %s::float8[]) {_SAME_LINK}, learnt = link_features.learnt OR EXCLUDED.learnt",
                            [list(column) for column in zip(*merged.values())])
            after = rows[-1][0]

    def retarget_link_features(self, old_target: int, new_target: int) -> None:
        """Links to a page that only redirects lead, for the apprentice, to where it redirects."""
        self.db.execute("INSERT INTO link_features (source_id, target_id, features, learnt, copies, parent_score)"
                        " SELECT source_id, %s, features, learnt, copies, parent_score FROM link_features"
                        f" WHERE target_id = %s ORDER BY md5(features) {_SAME_LINK}", (new_target, old_target))
        self.db.execute("DELETE FROM link_features WHERE target_id = %s", (old_target,))


class PgRepository(PgApprenticeInstances):
    """One worker's side of a crawl on PostgreSQL (the crawl's :class:`~.repository.Repository`
    protocol): ``dsn`` names the server, ``crawl`` the crawl (its schema), ``directory`` the
    shared crawl directory, ``worker`` this worker's id (in its WARC files' names)."""

    search = None  # the portal's search index is built from the database by ``index``/``serve``

    def __init__(self, dsn: str, crawl: str, directory: Path, worker: str, warc: bool = True,
                 warc_max_bytes: int = 1_000_000_000, lease_seconds: float = 30.0):
        if not worker.replace("-", "").isalnum():
            raise ValueError(f"worker id {worker!r}: use letters, digits and -")
        self.worker, self.lease_seconds = worker, lease_seconds
        self.dsn, self.crawl = dsn, crawl
        self.directory = Path(directory)
        self.files = CrawlDir(self.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.db = pg_frontier.connect(dsn, crawl)
        self.db.execute("SET synchronous_commit = off")
        pg_frontier.create_tables(self.db, pg_frontier.schema_of(crawl), LAST_TABLE, SCHEMA)
        self.queries = PgQueries(self.db)
        self.near_duplicates = PgNearDuplicateRecords(self.db)
        self.warc = WarcArchive(self.files.warc, warc_max_bytes, self.queries.warc_end,
                                prefix=f"worker-{worker}") if warc else None
        self.harvest_log = None  # opened by the first entry: the publisher writes none
        self.frontier: PgFrontier | None = None
        self._archived: tuple[Response | None, tuple] = (None, (None, None))  # the last response archived, where
        self._leading, self._lead_retry = False, 0.0

    def new_frontier(self, hosts, order: str, band: float, link_clusters: float | None,
                     host_clusters: float | None = None, relative_clusters: bool = False) -> PgFrontier:
        """The shared frontier (hosts leased in priority order, URLs handed out in ``order``
        within ``band`` and link and host clusters learnt as the SQLite frontier's)."""
        self.frontier = PgFrontier(self.db, self.worker, hosts, lease_seconds=self.lease_seconds, order=order, band=band,
                                   link_clusters=link_clusters, host_clusters=host_clusters,
                                   relative_clusters=relative_clusters)
        return self.frontier

    def close(self) -> None:
        """Give back the frontier's leases (URLs taken and not fetched are queued again), close the files."""
        if self.frontier is not None:
            self.frontier.close()
        if self.warc:
            self.warc.close()
        if self.harvest_log:
            self.harvest_log.close()
        self.db.close()

    @contextmanager
    def transaction(self):
        """One unit of work, all or nothing (within another, a savepoint)."""
        with self.db.transaction():
            yield self.db

    @contextmanager
    def publishing(self):
        """The transaction that publishes a crawl: one publisher at a time."""
        with self.db.transaction():
            self.db.execute("SELECT pg_advisory_xact_lock(hashtext('publish'))")
            yield

    def run_unit(self, work: Callable[[], T]) -> T:
        """``work()`` as one transaction, run again when PostgreSQL broke a deadlock with another
        worker by rolling this one back (two pages queueing the same new URLs and hosts)."""
        for attempt in range(UNIT_ATTEMPTS):
            try:
                with self.db.transaction():
                    return work()
            except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
                if attempt == UNIT_ATTEMPTS - 1:
                    raise
                time.sleep(random.uniform(0, 0.01 * 2 ** attempt))
        raise AssertionError("unreachable")

    @contextmanager
    def grouped(self, pages: int, seconds: float):
        """No group commit on PostgreSQL: each unit commits (asynchronously)."""
        yield

    def commit_if_due(self) -> None:
        pass

    # -- meta ---------------------------------------------------------------------------

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = %s", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, **values) -> None:
        with self.db.cursor() as cursor:
            cursor.executemany("INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE"
                               " SET value = EXCLUDED.value", [(k, str(v)) for k, v in values.items()])

    # -- one fetched page ---------------------------------------------------------------

    def record_fetch(self, url_id: int, depth: int, parent_id: int | None, response: Response) -> int:
        """Archive the exchanges in this worker's WARC file (once, should the unit run again),
        then insert the attempt (its unit first takes the instances' lock shared: see
        :meth:`new_instances`)."""
        if self._instances_key is not None:
            self.db.execute("SELECT pg_advisory_xact_lock_shared(%s)", (self._instances_key,))
        if self._archived[0] is not response:
            self._archived = (response, self.warc.write(response) if self.warc and response.exchanges else (None, None))
        warc_file, warc_end = self._archived[1]
        return self.db.execute(
            "INSERT INTO fetches (url_id, url, final_url, status, error, mime, headers, redirects, depth, parent_id,"
            " fetched_at, seconds, attempts, bytes, warc_file, refused, warc_end, worker)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (url_id, response.url, response.final_url, response.status, response.error, response.mime or None,
             json.dumps(response.headers) if response.headers else None,
             json.dumps(response.redirects) if response.redirects else None,
             depth, parent_id, response.started_at, round(response.seconds, 4), response.attempts,
             len(response.body), warc_file, response.refused, warc_end, self.worker)).fetchone()[0]

    def find_duplicate(self, digest: str) -> tuple[int, float | None] | None:
        row = self.db.execute("SELECT url_id, relevance FROM documents WHERE content_hash = %s AND duplicate_of IS NULL"
                              " LIMIT 1", (digest,)).fetchone()
        return (row[0], row[1]) if row else None

    def record_document(self, url_id: int, fetch_id: int, page, digest: str, duplicate_of: int | None,
                        relevance: float | None, language_score: int | None, judgement=None) -> None:
        topic, confidence, preview = (judgement.topic, judgement.confidence, judgement.preview) if judgement else (None,) * 3
        self.db.execute(
            "INSERT INTO documents (url_id, fetch_id, title, text, content_hash, duplicate_of, relevance, canonical,"
            " charset, noindex, language_score, topic, confidence, preview)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (url_id) DO UPDATE SET"
            " fetch_id = EXCLUDED.fetch_id, title = EXCLUDED.title, text = EXCLUDED.text,"
            " content_hash = EXCLUDED.content_hash, duplicate_of = EXCLUDED.duplicate_of, relevance = EXCLUDED.relevance,"
            " canonical = EXCLUDED.canonical, charset = EXCLUDED.charset, noindex = EXCLUDED.noindex,"
            " language_score = EXCLUDED.language_score, topic = EXCLUDED.topic, confidence = EXCLUDED.confidence,"
            " preview = EXCLUDED.preview",
            (url_id, fetch_id, page.title, None if duplicate_of or page.noindex else page.text, digest, duplicate_of,
             relevance, page.canonical, page.charset, page.noindex, language_score, topic, confidence, preview))

    def follow_anchors(self, seconds: float) -> None:
        pass  # no search index kept while crawling

    def record_links(self, rows: list[tuple[int, int, str, int, int, int]]) -> None:
        if rows:
            with self.db.cursor() as cursor, cursor.copy("COPY links (source_id, target_id, anchor_text, leaf_start,"
                                                         " leaf_end, nofollow) FROM STDIN") as copy:
                for source, target, anchor, start, end, nofollow in rows:
                    copy.write_row((source, target, anchor, start, end, bool(nofollow)))

    def record_host(self, host, crawl_delay: float | None = None) -> None:
        self.db.execute("INSERT INTO hosts (host, failures, status, crawl_delay) VALUES (%s, %s, %s, %s)"
                        " ON CONFLICT (host) DO UPDATE SET failures = EXCLUDED.failures, status = EXCLUDED.status,"
                        " crawl_delay = EXCLUDED.crawl_delay", (host.name, host.failures, host.status, crawl_delay))

    def record_sitemaps(self, origin: str, urls: list[str]) -> None:
        with self.db.cursor() as cursor:
            cursor.executemany("INSERT INTO sitemaps (origin, url) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                               [(origin, url) for url in urls])

    def topic_counts(self) -> Counter:
        return Counter(dict(self.db.execute("SELECT topic, COUNT(*) FROM documents WHERE topic IS NOT NULL"
                                            " GROUP BY topic").fetchall()))

    def relevance_totals(self) -> tuple[float, int]:
        return self.db.execute("SELECT COALESCE(SUM(relevance), 0), COUNT(relevance) FROM documents").fetchone()

    def texts_of(self, url_ids: list[int]) -> dict[int, str]:
        return dict(self.db.execute("SELECT url_id, text FROM documents WHERE text <> '' AND url_id = ANY(%s)",
                                    (url_ids,)).fetchall())

    def relevance_of(self, urls: list[str]) -> dict[str, float]:
        return dict(self.db.execute("SELECT u.url, d.relevance FROM urls u JOIN documents d ON d.url_id = u.id WHERE"
                                    " d.relevance IS NOT NULL AND u.url_hash = ANY(%s)",
                                    ([pg_frontier.url_hash(url) for url in urls],)).fetchall())

    def set_priorities(self, rows: list[tuple[float, int]]) -> None:
        """The strategy's new priorities of queued URLs, (priority, id), times what their clusters
        have learnt; and their hosts' best."""
        hosts = {host for (host,) in self.db.execute(
            f"UPDATE urls SET priority = t.p * {pg_frontier.CLUSTERS_LEARNT} FROM unnest(%s::float8[], %s::bigint[])"
            f" AS t(p, id) WHERE urls.id = t.id"
            f" AND urls.state = {QUEUED} RETURNING urls.host", ([p for p, _ in rows], [i for _, i in rows]))}
        pg_frontier.recount_best(self.db, hosts)

    def instance_reader(self) -> PgInstanceReader:
        """The apprentice's reads for a thread beside the crawl, on a connection of their own."""
        return PgInstanceReader(self.dsn, self.crawl)

    def leads(self) -> bool:
        """Whether this worker takes the crawl's learning steps: one worker at a time, elected by a
        session advisory lock that its end (or death) releases; a worker not elected tries again
        every ``LEAD_RETRY`` seconds."""
        if not self._leading and time.monotonic() >= self._lead_retry:
            self._leading = self.db.execute("SELECT pg_try_advisory_lock(hashtext(current_schema() || ':learning'))"
                                            ).fetchone()[0]
            self._lead_retry = time.monotonic() + LEAD_RETRY
        return self._leading

    def save_model(self, name: str, data: bytes) -> None:
        self.db.execute("INSERT INTO models (name, data) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE"
                        " SET data = EXCLUDED.data", (name, data))

    def load_model(self, name: str) -> bytes | None:
        return self.queries.load_model(name)

    def log_harvest(self, entry: dict) -> None:
        if self.harvest_log is None:
            self.harvest_log = open(self.directory / f"harvest-{self.worker}.jsonl", "a", encoding="utf-8")
        self.harvest_log.write(json.dumps({**entry, "worker": self.worker}) + "\n")
        self.harvest_log.flush()


class PgInstanceReader(PgApprenticeInstances):
    """The apprentice's instances and queued links read in a thread beside the elected worker's
    crawl (the SQLite crawl's :class:`~.repository.InstanceReader`)."""

    get_meta = PgRepository.get_meta

    def __init__(self, dsn: str, crawl: str):
        self.dsn, self.crawl = dsn, crawl

    @contextmanager
    def snapshot(self):
        """The reads inside, as one transaction (each sees what was committed when it began: the
        instances' watermarks need no more, see :meth:`new_instances`), on a connection opened
        here, in the thread, and closed after."""
        with closing(pg_frontier.connect(self.dsn, self.crawl)) as self.db, self.db.transaction():
            self.queries = PgQueries(self.db)
            self.track_instances()
            yield self


SNAPSHOT_TABLES = ("meta", "urls", "fetches", "documents", "links", "hosts", "models", "sitemaps", "adaptations",
                   "link_scores", "page_signatures", "near_duplicates", "signature_bands")


def snapshot(dsn: str, crawl: str, directory: Path, rows_per_batch: int = 10_000) -> dict[str, int]:
    """Copy a shared crawl into its directory's ``crawl.db`` (the columns both schemas have), so
    that the tools of an SQLite crawl (the search index, the portal, link analysis, organising)
    read it; what the portal keeps of its own (feedback, marks) stays. Rows copied per table."""
    schema = pg_frontier.schema_of(crawl)
    files = CrawlDir(directory)
    lock = lock_directory(directory)
    copied = {}
    try:
        with closing(connect_sqlite(files.database)) as target, psycopg.connect(dsn) as source:
            upgrade_schema(target)
            with transaction(target):
                for table in SNAPSHOT_TABLES:
                    ours = [row[1] for row in target.execute(f"PRAGMA table_info({table})")]
                    theirs = {name for (name,) in source.execute(
                        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s",
                        (schema, table))}
                    columns = ", ".join(column for column in ours if column in theirs)
                    if not columns:  # a table the crawl's version did not have yet
                        continue
                    target.execute(f"DELETE FROM {table}")
                    copied[table] = 0
                    with source.cursor(name=f"snapshot_{table}") as rows:  # streamed, not all in memory
                        rows.execute(f"SELECT {columns} FROM {schema}.{table}")
                        while batch := rows.fetchmany(rows_per_batch):
                            target.executemany(f"INSERT INTO {table} ({columns}) VALUES ({', '.join('?' * len(batch[0]))})",
                                               batch)
                            copied[table] += len(batch)
                target.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('snapshot_at', ?)", (str(time.time()),))
    finally:
        lock.close()
    return copied
