"""The repository of a crawl: SQLite (the truth), WARC (the archive), the harvest log. The
directory's files are named in :mod:`focuscrawl.store.layout`."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import io
import json
import logging
import os
import sqlite3
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import numpy as np
from isal import isal_zlib
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from focuscrawl.fetch.http import Response
from focuscrawl.frontier import Frontier
from focuscrawl.store.clusters import LINK_FACTOR
from focuscrawl.store.frontier import SqliteFrontier
from focuscrawl.store.inherited import not_inherited
from focuscrawl.store.layout import CrawlDir, CrawlDirError
from focuscrawl.store.near_duplicates import RunningRecords
from focuscrawl.store.queries import Queries, read_only
from focuscrawl.store.search_index import AnchorFollower, SearchIndex
from focuscrawl.store.link_instances import Links, LinkInstances, NewInstances
from focuscrawl.store.schema import IN_FLIGHT, QUEUED, SKIPPED, connect, transaction, upgrade_schema
from focuscrawl.store.sql import rows_in


log = logging.getLogger(__name__)


def content_hash(text: str) -> str:
    """BINGO!: exact duplicates are recognised by the MD5 of the text."""
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def open_existing(directory: Path) -> sqlite3.Connection:
    path = CrawlDir(directory).database
    if not path.is_file():
        raise CrawlDirError(f"{directory}: not a crawl directory (no crawl.db)")
    db = None
    try:
        db = connect(path)
        db.execute("SELECT 1 FROM meta LIMIT 1")
    except sqlite3.DatabaseError as err:
        if db is not None:
            db.close()
        raise CrawlDirError(f"{path}: not a focuscrawl database: {err}") from None
    return db


def cut_short(directory: Path) -> bool:
    """Whether the directory's crawl was killed while it was being created, before its seeds were
    stored: nothing was collected (a crawl records created_at with its seeds, in one transaction)."""
    path = CrawlDir(directory).database
    if not path.is_file():
        return False
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return db.execute("SELECT 1 FROM meta WHERE key = 'created_at'").fetchone() is None
    except sqlite3.OperationalError as error:  # killed before its tables were
        return "no such table" in str(error)
    except sqlite3.DatabaseError:  # not a database at all: not ours to remove
        return False


def remove_cut_short(directory: Path) -> None:
    """Start over in a directory whose crawl was cut short (the lock is held meanwhile)."""
    with closing(lock_directory(directory)):
        files = CrawlDir(directory)
        for path in (files.database, Path(f"{files.database}-wal"), Path(f"{files.database}-shm")):
            path.unlink(missing_ok=True)


def lock_directory(directory: Path):
    """One process per crawl directory; the kernel drops the lock when the process dies."""
    lock = open(CrawlDir(directory).lock, "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise CrawlDirError(f"{directory}: another focuscrawl process is crawling this directory") from None
    return not_inherited(lock, lambda held: held.close())


T = TypeVar("T")


class Repository(Protocol):
    """What the crawl asks of a repository: one transaction per page, the page's records, the
    models, the meta data. :class:`Store` is the SQLite one; a shared backend is another class
    of this shape (with its own :mod:`.queries`), not an edit of the crawl loop."""

    files: CrawlDir
    queries: Any  # the backend's queries (:class:`.queries.Queries` for SQLite)
    search: Any  # the backend's search index (:class:`.search_index.SearchIndex` for SQLite)
    near_duplicates: RunningRecords  # where a running crawl signs its pages (store.near_duplicates)

    def new_frontier(self, hosts, order: str, band: float, link_clusters: float | None,
                     host_clusters: float | None = None, relative_clusters: bool = False) -> Frontier: ...

    def transaction(self) -> AbstractContextManager: ...
    def run_unit(self, work: Callable[[], T]) -> T: ...
    def grouped(self, pages: int, seconds: float) -> AbstractContextManager: ...
    def commit_if_due(self) -> None: ...
    def get_meta(self, key: str, default: str | None = None) -> str | None: ...
    def set_meta(self, **values) -> None: ...
    def record_fetch(self, url_id: int, depth: int, parent_id: int | None, response: Response) -> int: ...
    def find_duplicate(self, digest: str) -> tuple[int, float | None] | None: ...
    def record_document(self, url_id: int, fetch_id: int, page, digest: str, duplicate_of: int | None,
                        relevance: float | None, language_score: int | None, judgement=None) -> None: ...
    def record_links(self, rows: list[tuple[int, int, str, int, int, int]]) -> None: ...
    def follow_anchors(self, seconds: float) -> None: ...
    def record_host(self, host, crawl_delay: float | None = None) -> None: ...
    def record_sitemaps(self, origin: str, urls: list[str]) -> None: ...
    def record_link_features(self, source_id: int, fetch_id: int, score: float, targets: list[int],
                             features: np.ndarray, bounds: np.ndarray) -> None: ...
    def track_instances(self) -> None: ...  # from now on, units let new_instances see whole pages
    def new_instances(self) -> NewInstances: ...
    def mark_learnt(self, instances: NewInstances) -> None: ...
    def instance_reader(self): ...  # the apprentice's reads in a thread beside the crawl (InstanceReader's)
    def queued_link_features(self, chunk: int = 50000) -> Iterator[Links]: ...
    def retarget_link_features(self, old_target: int, new_target: int) -> None: ...
    def rehash_link_features(self, convert: Callable[[bytes], bytes]) -> None: ...
    def set_priorities(self, rows: list[tuple[float, int]]) -> None: ...  # the strategy's: the clusters' factors apply
    def leads(self) -> bool: ...  # whether this process takes the crawl's learning steps (a shared crawl's workers elect one)
    def relevance_totals(self) -> tuple[float, int]: ...
    def topic_counts(self) -> Counter: ...
    def texts_of(self, url_ids: list[int]) -> dict[int, str]: ...
    def relevance_of(self, urls: list[str]) -> dict[str, float]: ...
    def urls_of(self, url_ids: list[int]) -> dict[int, str]: ...
    def save_model(self, name: str, data: bytes) -> None: ...
    def load_model(self, name: str) -> bytes | None: ...
    def log_harvest(self, entry: dict) -> None: ...
    def close(self) -> None: ...


class Store(LinkInstances):
    """Everything the crawl writes goes through here, one unit of work (:meth:`transaction`) per
    page; while the crawl runs, several units per SQLite commit (:meth:`grouped`)."""

    def __init__(self, directory: Path, warc: bool = True, warc_max_bytes: int = 1_000_000_000,
                 search_index: bool = False):
        self.directory = Path(directory)
        self.files = CrawlDir(self.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = lock_directory(self.directory)
        self.db = connect(self.files.database)
        # a unit is a savepoint in its group's transaction, for which SQLite copies each page it
        # changes first into a sub-journal, a temporary file past 64 kB: 160 kB in 78 writes a small-web
        # page, 0.14 ms of the crawl's process (system time, three pairs of crawls); in memory, none
        self.db.execute("PRAGMA temp_store=MEMORY")
        self.queries = Queries(self.db)
        upgrade_schema(self.db)
        self.warc = WarcArchive(self.files.warc, warc_max_bytes, self.queries.warc_end) if warc else None
        self.harvest_log = open(self.files.harvest_log, "a", encoding="utf-8")
        self.commit_pages, self.commit_seconds = 1, 1.0
        self._units, self._group_started, self._depth = 0, 0.0, 0
        self.search = SearchIndex(self.db)
        self.near_duplicates = self.search.near_duplicates
        self.anchor_follower = AnchorFollower(self.search, active=search_index)  # a crawl keeping it current

    def new_frontier(self, hosts, order: str, band: float, link_clusters: float | None,
                     host_clusters: float | None = None, relative_clusters: bool = False) -> SqliteFrontier:
        """The frontier of this crawl, on its database."""
        return SqliteFrontier(self.db, hosts, order, band, link_clusters, host_clusters, relative_clusters)

    def close(self) -> None:
        """Commit what is written and close; if that last commit fails (a full disk), its
        pages are still in flight on disk and fetched again on resume."""
        try:
            self.commit()
        except sqlite3.Error as error:
            log.warning("the last pages were not committed (%s); a resume fetches them again", error)
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
        finally:
            if self.warc:
                self.warc.close()
            self.harvest_log.close()
            self.db.close()
            self._lock.close()

    @contextmanager
    def grouped(self, pages: int, seconds: float):
        """Within this block, units are committed ``pages`` at a time, and at least every
        ``seconds`` (:meth:`commit_if_due`): a commit costs more than a page's rows. A unit whose
        group is not committed is lost at a kill as a whole, so a page's URL is still in flight
        on disk and fetched again on resume."""
        self.commit_pages, self.commit_seconds = pages, seconds
        try:
            yield
        finally:
            self.commit_pages = 1
            self.commit()

    def run_unit(self, work: Callable[[], T]) -> T:  # SQLite's writers never deadlock: it runs once
        with self.transaction():
            return work()

    @contextmanager
    def transaction(self):
        """One unit of work (a page, a learning step): all or nothing. Its own SQLite
        transaction, or within :meth:`grouped` a savepoint in the group's transaction."""
        if self.commit_pages == 1:
            with self.anchor_follower.forgetting(), transaction(self.db), self.search.waiting.forgetting():
                yield self.db
                self.search.waiting.index_all()
            return
        if not self.db.in_transaction:
            self.db.execute("BEGIN IMMEDIATE")  # the portal may write too: take the lock first
            self._units, self._group_started = 0, time.monotonic()
        self.db.execute("SAVEPOINT unit")
        self._depth += 1
        try:
            with self.anchor_follower.forgetting(), self.search.waiting.forgetting():
                yield self.db
                self.db.execute("RELEASE unit")
        except BaseException:
            if self.db.in_transaction:  # after some errors (a full disk) SQLite has rolled back the whole group
                self.db.execute("ROLLBACK TO unit")
                self.db.execute("RELEASE unit")
            raise
        finally:
            self._depth -= 1
        if self._depth:  # a unit within a unit is part of it
            return
        self._units += 1
        if self._units >= self.commit_pages:
            self.commit()
        else:
            self.commit_if_due()

    def commit_if_due(self) -> None:
        """Commit the open group if it is ``commit_seconds`` old (the crawl calls this when idle too)."""
        if self.db.in_transaction and not self._depth and time.monotonic() - self._group_started >= self.commit_seconds:
            self.commit()

    def commit(self) -> None:
        """Commit what is written: the open group, or the writes made outside any unit since."""
        if self.db.in_transaction:
            with self.anchor_follower.forgetting():
                self.search.waiting.index_all()
                self.db.execute("COMMIT")

    def instance_reader(self) -> InstanceReader:
        """The apprentice's reads for a thread beside the crawl, on a connection of their own;
        the open group is committed first, so they see every page stored until now."""
        self.commit()
        return InstanceReader(self.directory)

    # -- meta ---------------------------------------------------------------------------

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, **values) -> None:
        self.db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", [(k, str(v)) for k, v in values.items()])

    # -- one fetched page ---------------------------------------------------------------

    def record_fetch(self, url_id: int, depth: int, parent_id: int | None, response: Response) -> int:
        """Archive the exchanges, then insert the attempt; call inside :meth:`transaction`."""
        warc_file, warc_end = self.warc.write(response) if self.warc and response.exchanges else (None, None)
        cursor = self.db.execute(
            "INSERT INTO fetches (url_id, url, final_url, status, error, mime, headers, redirects, depth, parent_id,"
            " fetched_at, seconds, attempts, bytes, warc_file, refused, warc_end)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                url_id, response.url, response.final_url, response.status, response.error, response.mime or None,
                json.dumps(response.headers) if response.headers else None,
                json.dumps(response.redirects) if response.redirects else None,
                depth, parent_id, response.started_at, round(response.seconds, 4), response.attempts,
                len(response.body), warc_file, int(response.refused), warc_end,
            ),
        )
        return cursor.lastrowid

    def find_duplicate(self, digest: str) -> tuple[int, float | None] | None:
        row = self.db.execute(
            "SELECT url_id, relevance FROM documents WHERE content_hash = ? AND duplicate_of IS NULL LIMIT 1", (digest,)
        ).fetchone()
        return (row[0], row[1]) if row else None

    def record_document(self, url_id: int, fetch_id: int, page, digest: str, duplicate_of: int | None,
                        relevance: float | None, language_score: int | None, judgement=None) -> None:
        """Every parsed page gets a row (its score counts in the harvest rate); the text is kept
        only for pages that may be indexed and are not duplicates."""
        topic, confidence, preview = (judgement.topic, judgement.confidence, judgement.preview) if judgement else (None,) * 3
        self.db.execute(
            "INSERT OR REPLACE INTO documents (url_id, fetch_id, title, text, content_hash, duplicate_of, relevance,"
            " canonical, charset, noindex, language_score, topic, confidence, preview)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (url_id, fetch_id, page.title, None if duplicate_of or page.noindex else page.text, digest, duplicate_of,
             relevance, page.canonical, page.charset, int(page.noindex), language_score, topic, confidence, preview),
        )

    def follow_anchors(self, seconds: float) -> None:
        """New links' anchor texts into the search index (one unit of work): those of the links
        stored since the last call, and older ones for about ``seconds``."""
        if self.anchor_follower.active:
            with self.transaction():
                self.anchor_follower.follow(seconds)

    def topic_counts(self) -> Counter:
        return Counter(dict(self.db.execute("SELECT topic, COUNT(*) FROM documents WHERE topic IS NOT NULL GROUP BY topic")))

    def record_links(self, rows: list[tuple[int, int, str, int, int, int]]) -> None:
        self.db.executemany("INSERT INTO links (source_id, target_id, anchor_text, leaf_start, leaf_end, nofollow)"
                            " VALUES (?, ?, ?, ?, ?, ?)", rows)
        self.anchor_follower.found(rows)

    def record_host(self, host, crawl_delay: float | None = None) -> None:
        self.db.execute("INSERT OR REPLACE INTO hosts (host, failures, status, crawl_delay) VALUES (?, ?, ?, ?)",
                        (host.name, host.failures, host.status, crawl_delay))

    def relevance_totals(self) -> tuple[float, int]:
        """The sum of the critic's scores and the number of pages scored (the harvest rate's terms)."""
        return self.db.execute("SELECT TOTAL(relevance), COUNT(relevance) FROM documents").fetchone()

    def texts_of(self, url_ids: list[int]) -> dict[int, str]:
        """The stored text of those pages that have one."""
        return dict(rows_in(self.db, "SELECT url_id, text FROM documents WHERE text != '' AND url_id IN ({})", url_ids))

    def relevance_of(self, urls: list[str]) -> dict[str, float]:
        """The critic's score of those URLs already judged."""
        return dict(rows_in(self.db, "SELECT u.url, d.relevance FROM urls u JOIN documents d ON d.url_id = u.id"
                            " WHERE d.relevance IS NOT NULL AND u.url IN ({})", urls))

    def set_priorities(self, rows: list[tuple[float, int]]) -> None:
        """The strategy's new priorities of queued URLs, (priority, id), each times what its link
        cluster has learnt (its host's factor is the frontier's); a URL fetched meanwhile keeps its own."""
        self.db.executemany(f"UPDATE urls SET priority = ? * {LINK_FACTOR} WHERE id = ? AND state = {QUEUED}", rows)

    def leads(self) -> bool:
        return True  # the one crawl process

    def save_model(self, name: str, data: bytes) -> None:
        self.db.execute("INSERT OR REPLACE INTO models (name, data) VALUES (?, ?)", (name, data))

    def load_model(self, name: str) -> bytes | None:
        return self.queries.load_model(name)

    def record_sitemaps(self, origin: str, urls: list[str]) -> None:
        self.db.executemany("INSERT OR IGNORE INTO sitemaps (origin, url) VALUES (?, ?)", [(origin, u) for u in urls])

    def log_harvest(self, entry: dict) -> None:
        self.harvest_log.write(json.dumps(entry) + "\n")
        self.harvest_log.flush()


class WarcArchive:
    """Request and response records in gzip WARC files that roll over at a size limit.
    ``committed_end(name)``: where the last record the crawl committed ends in that file (None
    if unknown); a kill may leave a record half written, or whole but not committed, after it."""

    def __init__(self, directory: Path, max_bytes: int, committed_end: Callable[[str], int | None] = lambda name: None,
                 prefix: str = "crawl"):
        """``prefix``: the files' names before their serial (a shared crawl's worker: ``worker-ID``)."""
        self.directory, self.prefix = directory, prefix
        directory.mkdir(exist_ok=True)
        self.max_bytes = max_bytes
        existing = sorted(directory.glob(f"{prefix}-[0-9][0-9][0-9][0-9][0-9].warc.gz"))
        self.serial = int(existing[-1].name[len(prefix) + 1:len(prefix) + 6]) if existing else 0
        self._file = None
        self._writer = None
        if existing:
            self._cut_back(existing[-1], committed_end(existing[-1].name))

    @staticmethod
    def _cut_back(path: Path, end: int | None) -> None:
        """Cut the last file back to its last committed record (or, not knowing it, to its last
        whole gzip member), so that what is appended next can be read: a reader stops at a tear."""
        end = whole_members_length(path) if end is None else end
        if path.stat().st_size > end:
            log.warning("%s: %d bytes after the last committed record cut off (a kill left them)",
                        path.name, path.stat().st_size - end)
            os.truncate(path, end)

    def _open(self) -> None:
        path = self.directory / f"{self.prefix}-{self.serial:05d}.warc.gz"
        if path.exists() and path.stat().st_size >= self.max_bytes:
            self.serial += 1
            path = self.directory / f"{self.prefix}-{self.serial:05d}.warc.gz"
        self._file = open(path, "ab")
        self._writer = WARCWriter(_GzipMembers(self._file), gzip=False)
        if self._file.tell() == 0:
            info = {"software": "focuscrawl", "format": "WARC File Format 1.1", "hostname": os.uname().nodename}
            self._writer.write_record(self._writer.create_warcinfo_record(path.name, info))

    def write(self, response: Response) -> tuple[str, int]:
        """Append the response's records; a write that fails (a full disk) leaves no part of them.
        Returns the file's name and where the records end in it."""
        if self._file is None or self._file.tell() >= self.max_bytes:
            self.close()
            self._open()
        path, start = self._file.name, self._file.tell()
        try:
            self._append(response)
        except BaseException:
            try:
                self._file.close()  # its buffer holds the tail being dropped: flushing it may fail again
            except OSError:
                pass
            self._file = None
            os.truncate(path, start)
            raise
        return Path(path).name, self._file.tell()

    def _append(self, response: Response) -> None:
        writer = self._writer
        for exchange in response.exchanges:
            if not exchange.status:
                continue
            target = urlsplit_path(exchange.url)
            request_headers = StatusAndHeaders(f"GET {target} HTTP/1.1", list(exchange.request_headers.items()), is_http_request=True)
            request = writer.create_warc_record(exchange.url, "request", http_headers=request_headers)
            headers = StatusAndHeaders(f"{exchange.status} {exchange.reason}", exchange.response_headers, protocol=exchange.http_version)
            body = exchange.raw_body
            headers.compute_headers_buffer(writer.header_filter)  # (as the writer will)
            warc_headers = {"WARC-Block-Digest": _sha1_digest(headers.headers_buff, body),
                            "WARC-Payload-Digest": _sha1_digest(body)}
            if exchange.truncated:
                warc_headers["WARC-Truncated"] = "length"
            record = writer.create_warc_record(exchange.url, "response", payload=io.BytesIO(body), length=len(body),
                                               http_headers=headers, warc_headers_dict=warc_headers)
            writer.write_record(record)
            request.rec_headers.replace_header("WARC-Concurrent-To", record.rec_headers.get_header("WARC-Record-ID"))
            writer.write_record(request)
        self._file.flush()

    def close(self) -> None:
        if self._file:
            self._file.close()
            self._file = None


def _sha1_digest(*parts: bytes) -> str:
    """A WARC digest of the bytes ``parts`` make, as warcio writes it. Given with the record's
    length, warcio neither copies the body to a temporary file nor digests it again in 16 kB
    reads (0.37 ms of the crawl's process a small-web page)."""
    digest = hashlib.sha1()
    for part in parts:
        digest.update(part)
    return "sha1:" + base64.b32encode(digest.digest()).decode("ascii")


class _GzipMembers:
    """The stream warcio writes a record to: each record one gzip member (as WARC readers
    expect), deflated by ISA-L at its default level. warcio's own gzip is zlib at level 9:
    0.49 ms per average test-web page against 0.035 ms, for files about 18 % larger."""

    def __init__(self, file):
        self.file = file
        self._deflate = None

    def write(self, data: bytes) -> None:
        if self._deflate is None:
            self._deflate = isal_zlib.compressobj(isal_zlib.ISAL_DEFAULT_COMPRESSION, isal_zlib.DEFLATED,
                                                  isal_zlib.MAX_WBITS + 16)
        self.file.write(self._deflate.compress(data))

    def flush(self) -> None:
        """The end of a record (warcio flushes once per record): close its member."""
        if self._deflate is not None:
            self.file.write(self._deflate.flush())
            self._deflate = None


def whole_members_length(path: Path) -> int:
    """Bytes up to the end of the file's last whole gzip member (each WARC record is one)."""
    good = position = 0
    inflater = zlib.decompressobj(31)
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            data = chunk
            while data:
                try:
                    inflater.decompress(data, 1 << 20)
                except zlib.error:
                    return good
                if inflater.eof:
                    rest = inflater.unused_data
                    position += len(data) - len(rest)
                    good, data, inflater = position, rest, zlib.decompressobj(31)
                else:
                    position += len(data) - len(inflater.unconsumed_tail)
                    data = inflater.unconsumed_tail
    return good


def urlsplit_path(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


# -- read-only views over a crawl directory (status, export) --------------------------------

def crawl_status(db, queries=None) -> dict:
    """The figures ``focuscrawl status`` prints, of an SQLite crawl (``db``) or of a shared one
    (its PostgreSQL connection and :class:`.pg_repository.PgQueries`): portable SQL here, the
    rest asked of the backend's queries."""
    queries = queries or Queries(db)
    meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    state = queries.crawl_state(meta)
    fetched, errors, refused, attempts = queries.fetch_counts()
    stored, harvest, relevant, duplicates = db.execute(
        "SELECT COUNT(*), AVG(relevance), COUNT(CASE WHEN relevance >= 0.5 THEN 1 END), COUNT(duplicate_of) FROM documents"
    ).fetchone()
    counts = dict(db.execute("SELECT state, COUNT(*) FROM urls GROUP BY state").fetchall())
    index = queries.search_index()
    return {
        "state": state,
        "pages_fetched": fetched,
        "pages_stored": stored,
        "fetch_attempts": attempts,
        "errors": errors,
        "refused": refused,  # robots.txt, policy, MIME type, size: not fetches, not in the budget
        "frontier_size": counts.get(QUEUED, 0) + counts.get(IN_FLIGHT, 0),
        "urls_seen": sum(counts.values()),
        "urls_skipped": counts.get(SKIPPED, 0),
        "harvest_rate": harvest,
        "relevant_pages": relevant,
        "duplicates": duplicates,
        "bad_hosts": db.execute("SELECT COUNT(*) FROM hosts WHERE status = 'bad'").fetchone()[0],
        "failures": dict(queries.failures_by_reason(50)),  # errors, refusals and HTTP error statuses, by reason
        "stop_reason": meta.get("stop_reason"),
        "pages_indexed": index.size() if index else None,  # in the search index
        "index_links_behind": index.anchors_behind() if index else None,  # rows of links whose anchors it has not read yet
        "topics": dict(db.execute("SELECT topic, COUNT(*) FROM documents WHERE topic IS NOT NULL GROUP BY topic"
                                  " ORDER BY topic").fetchall()),
    }


EXPORT_FIELDS = ("url", "final_url", "status", "error", "depth", "relevance", "title", "fetched_at")


def export_rows(db: sqlite3.Connection):
    """One record per fetch attempt, in fetch order."""
    query = (
        "SELECT f.url, f.final_url, f.status, f.error, f.depth, d.relevance, d.title, f.fetched_at"
        " FROM fetches f LEFT JOIN documents d ON d.fetch_id = f.id ORDER BY f.id"
    )
    for row in db.execute(query):
        yield dict(zip(EXPORT_FIELDS, row))


class InstanceReader(LinkInstances):
    """The apprentice's instances and queued links read from a snapshot of the crawl, in a thread
    or a process beside the crawl while it goes on writing (SQLite's WAL lets one writer and
    readers work at once). It holds only the directory until :meth:`snapshot`, so it can be
    sent to another process."""

    get_meta = Store.get_meta

    def __init__(self, directory: Path):
        self.directory = directory

    @contextmanager
    def snapshot(self):
        """All reads inside see the same committed state, on a connection opened here and closed after."""
        self.db = read_only(self.directory, any_thread=True)
        self.queries = Queries(self.db)
        with closing(self.db):
            if not self.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'link_instances'").fetchone():
                raise CrawlDirError(f"{self.directory}: made by an earlier version of focuscrawl (resume it once to"
                                    " convert it)")
            self.db.execute("BEGIN")
            try:
                yield self
            finally:
                self.db.execute("COMMIT")
