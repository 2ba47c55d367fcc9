"""The crawl's search index (SQLite FTS5) and the reads of the portal's search engine.

The index is *contentless*: the text stays once, in ``documents``. Each stored page (not a
duplicate, not ``noindex``) is indexed by its title, text, the words of its URL and the
distinct anchor texts of the links to it known then, in the page's transaction (in a crawl's
group of pages, just before the group commits: FTS5 writes its pending terms out at every
savepoint, which made a segment of every page and cost more than the inserts themselves);
``search_docs`` keeps what was indexed beyond the document (the anchors, the Last-Modified
date), which FTS5 needs to take a row out again, and what ranks the page.

Links found after their target was indexed bring anchor texts the page's row lacks. Putting
them in would mean tokenizing the page's text twice again (out, then in), which a fast crawl
cannot afford; they go instead, only the new texts, into a small second index,
``late_anchor_index`` (:class:`LateAnchors`), which a crawl keeps current every second
(:meth:`SearchIndex.refresh_anchors`) and a search reads beside the first. ``focuscrawl
index`` and ``serve`` fold them into the pages' rows on a crawl that is not running
(:meth:`SearchIndex.follow`), and :meth:`SearchIndex.rebuild` starts again from the store.
Tokens are Porter stems of Unicode words: a surface-word search is filtered afterwards
(``focuscrawl.search``)."""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import contextmanager
from email.utils import parsedate_to_datetime

from focuscrawl.store.link_rows import anchor_texts
from focuscrawl.store.near_duplicates import NearDuplicateRecords
from focuscrawl.store.sql import rows_in

SEARCH_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS search_index USING fts5(
    title, body, url_words, anchors, content='', prefix='3', tokenize='porter unicode61 remove_diacritics 2');
CREATE TABLE IF NOT EXISTS search_docs (  -- per indexed page: what the index needs beside the text, and what ranks it
    url_id INTEGER PRIMARY KEY,
    fetch_id INTEGER NOT NULL,  -- the fetch whose document was indexed
    anchors TEXT NOT NULL,  -- as indexed
    modified_at REAL,  -- Last-Modified, else when it was fetched
    topic TEXT,  -- the document's, copied (reading it there walks past the text's overflow pages)
    confidence REAL  -- the classifier's: BINGO!'s confidence with a taxonomy, else the critic's score
);
CREATE TABLE IF NOT EXISTS late_anchors (  -- anchor texts of links found after their target was indexed
    id INTEGER PRIMARY KEY,
    url_id INTEGER NOT NULL,
    anchors TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS late_anchors_url ON late_anchors (url_id);
CREATE VIRTUAL TABLE IF NOT EXISTS late_anchor_index USING fts5(
    anchors, content='late_anchors', content_rowid='id', prefix='3', tokenize='porter unicode61 remove_diacritics 2');
CREATE TABLE IF NOT EXISTS search_feedback (  -- BINGO! thesis §4.1.1: users' marks on results
    id INTEGER PRIMARY KEY,
    user TEXT NOT NULL,
    query TEXT NOT NULL,
    url_id INTEGER NOT NULL,
    relevant INTEGER NOT NULL,  -- 1: marked relevant, 0: not relevant
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS search_feedback_user ON search_feedback (user, query);
CREATE TABLE IF NOT EXISTS excluded_terms (term TEXT PRIMARY KEY, user TEXT NOT NULL, at REAL NOT NULL);  -- the reviser's
CREATE TABLE IF NOT EXISTS indicator_terms (  -- the reviser's: terms a topic's pages must hold (BINGO! §2.3.2)
    topic TEXT NOT NULL,  -- a topic path, '' in a one-topic crawl
    term TEXT NOT NULL,
    user TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (topic, term)
);
CREATE TABLE IF NOT EXISTS labels (  -- BINGO! reviser (§2.4.13): a reviewed page's true topic
    url_id INTEGER PRIMARY KEY,
    label TEXT NOT NULL,  -- a topic path, 'relevant' (one-topic crawl), or '' (not relevant: the taxonomy's root)
    user TEXT NOT NULL,
    at REAL NOT NULL
);
"""
# BM25 weights of the columns: a word in the title or in the anchors of links to the page says
# more about it than one in the body (the classic weighting of web search since Brin & Page)
COLUMN_WEIGHTS = (4.0, 1.0, 2.0, 2.0)
MAX_ANCHORS = 200  # distinct anchor texts indexed per page (a home page may have thousands)
LINK_BATCH = 200_000  # rows of ``links`` (a page and target each) read at a time when refreshing anchors
CRAWL_LINK_BATCH = 1_000  # the same during a crawl, which gives it a time budget (a batch takes about 1 ms)
ANCHOR_SEPARATOR = " \u2029 "  # between anchor texts: no phrase runs from one into the next


class SearchIndex:
    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self.marks = UserMarks(db)
        self.late = LateAnchors(db)
        self.near_duplicates = NearDuplicateRecords(db)
        self.waiting = WaitingPages(self)

    # -- keeping it current ---------------------------------------------------------------

    def _watermark(self, key: str) -> int:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def _set_watermark(self, key: str, value: int) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, str(value)))

    def index(self, url_id: int) -> bool:
        """Index a page just stored (in its transaction), unless it has no text to index."""
        row = self.db.execute(
            "SELECT d.fetch_id, d.title, d.text, u.url, f.headers, f.fetched_at, d.topic, COALESCE(d.confidence, d.relevance)"
            " FROM documents d JOIN urls u ON u.id = d.url_id JOIN fetches f ON f.id = d.fetch_id WHERE d.url_id = ?",
            (url_id,)).fetchone()
        if row is None or row[2] is None:
            return False
        fetch_id, title, text, url, headers, fetched_at, topic, confidence = row
        self._remove(url_id)
        self._insert(url_id, fetch_id, title, text, url, _modified_at(headers, fetched_at), topic, confidence)
        return True

    def follow(self, limit: int = 2000) -> int:
        """Index up to ``limit`` stored pages the index has not seen (stored before it existed,
        or after a :meth:`rebuild`), take in the anchors of links stored since the last call,
        and fold up to ``limit`` pages' late anchors into their rows; call inside a transaction,
        on a crawl no process is running. Returns how many pages were (re)indexed or given anchors."""
        last_fetch = self._watermark("search_fetches_indexed")
        rows = self.db.execute(
            "SELECT d.url_id, d.fetch_id FROM documents d WHERE d.fetch_id > ? AND d.text IS NOT NULL"
            " AND NOT EXISTS (SELECT 1 FROM search_docs s WHERE s.url_id = d.url_id AND s.fetch_id = d.fetch_id)"
            " ORDER BY d.fetch_id LIMIT ?", (last_fetch, limit)).fetchall()
        changed = sum(self.index(url_id) for url_id, _ in rows)
        if len(rows) < limit:  # caught up: what is stored from now on is indexed with its page
            self._set_watermark("search_fetches_indexed", self.db.execute("SELECT MAX(id) FROM fetches").fetchone()[0] or 0)
        elif rows:
            self._set_watermark("search_fetches_indexed", rows[-1][1])
        changed += self.refresh_anchors(limit)
        return changed + sum(self._reindex(url_id) for url_id in self.late.pages(limit))

    def refresh_anchors(self, limit: int, seconds: float | None = None, batch: int = LINK_BATCH,
                        upto: int | None = None) -> int:
        """Give pages already indexed the anchor texts of links stored since the last call (up
        to the link ``upto``) that they were not indexed with, for up to about ``limit`` pages
        or ``seconds`` (a batch begun is finished: it always advances). Links are read in
        batches of distinct (target, anchor texts) pairs: a menu repeated on every page brings none.
        Call inside a transaction."""
        deadline = time.monotonic() + seconds if seconds is not None else None
        last = self._watermark("search_links_seen")
        newest = self.newest_link() if upto is None else upto
        changed = 0
        while last < newest and changed < limit and (deadline is None or time.monotonic() < deadline):
            end = min(newest, last + batch)
            found: dict[int, set[str]] = {}
            for target, anchors in self.db.execute(
                    "SELECT DISTINCT l.target_id, l.anchor_text FROM links l JOIN search_docs s ON s.url_id = l.target_id"
                    " WHERE l.rowid > ? AND l.rowid <= ? AND l.anchor_text != '' AND l.source_id != l.target_id",
                    (last, end)):
                found.setdefault(target, set()).update(anchor_texts(anchors))
            changed += self.take_anchors(found)
            last = end
            self._set_watermark("search_links_seen", last)
        return changed

    def take_anchors(self, found: dict[int, set[str]]) -> int:
        """Anchor texts of links to pages: those an indexed page lacks go into
        :class:`LateAnchors` (a page not indexed reads its anchors when it is). Returns how
        many pages got some."""
        changed = 0
        indexed = list(rows_in(self.db, "SELECT url_id, anchors FROM search_docs WHERE url_id IN ({})", list(found)))
        late = self.late.known([target for target, _ in indexed])
        for target, anchors in indexed:
            known = (set(anchors.split(ANCHOR_SEPARATOR)) if anchors else set()) | late.get(target, set())
            unknown = sorted(found[target] - known)[:max(0, MAX_ANCHORS - len(known))]
            if unknown:
                self.late.add(target, ANCHOR_SEPARATOR.join(unknown))
                changed += 1
        return changed

    def newest_link(self) -> int:
        return self.db.execute("SELECT MAX(rowid) FROM links").fetchone()[0] or 0

    def anchors_behind(self) -> int:
        """Rows of ``links`` stored that :meth:`refresh_anchors` has not read yet."""
        return max(0, self.newest_link() - self._watermark("search_links_seen"))

    def caught_up(self, since: int) -> bool:
        """Whether every link up to ``since`` has been read; if so, the links after it count
        as read too (a running crawl's :class:`AnchorFollower` has taken them)."""
        if self._watermark("search_links_seen") < since:
            return False
        self._set_watermark("search_links_seen", self.newest_link())
        return True

    def _reindex(self, url_id: int) -> bool:
        """The page again, with the anchors of every link to it known now (its late ones folded in)."""
        indexed = self.db.execute(
            "SELECT d.title, d.text, u.url, s.fetch_id, s.modified_at, s.topic, s.confidence FROM search_docs s"
            " JOIN documents d ON d.url_id = s.url_id AND d.fetch_id = s.fetch_id JOIN urls u ON u.id = s.url_id"
            " WHERE s.url_id = ?", (url_id,)).fetchone()
        if indexed is None:
            self.late.remove(url_id)
            return False
        title, text, url, fetch_id, modified_at, topic, confidence = indexed
        self._remove(url_id)
        self._insert(url_id, fetch_id, title, text, url, modified_at, topic, confidence)
        return True

    def _anchors(self, url_id: int) -> str:
        """The first ``MAX_ANCHORS`` distinct anchor texts of the links to the page, in sorted order."""
        found = {anchor for (anchors,) in self.db.execute(
            "SELECT DISTINCT anchor_text FROM links WHERE target_id = ? AND source_id != target_id AND anchor_text != ''",
            (url_id,)) for anchor in anchor_texts(anchors)}
        return ANCHOR_SEPARATOR.join(sorted(found)[:MAX_ANCHORS])

    def _insert(self, url_id: int, fetch_id: int, title: str | None, text: str, url: str,
                modified_at: float | None, topic: str | None, confidence: float | None) -> None:
        anchors = self._anchors(url_id)
        self.db.execute("INSERT INTO search_index (rowid, title, body, url_words, anchors) VALUES (?, ?, ?, ?, ?)",
                        (url_id, title or "", text, _url_words(url), anchors))
        self.db.execute("INSERT INTO search_docs (url_id, fetch_id, anchors, modified_at, topic, confidence)"
                        " VALUES (?, ?, ?, ?, ?, ?)", (url_id, fetch_id, anchors, modified_at, topic, confidence))

    def _remove(self, url_id: int) -> None:
        """Take a page out with the very values it was indexed with (a contentless index
        cannot look them up itself); the document must still be the one indexed."""
        indexed = self.db.execute(
            "SELECT s.anchors, d.title, d.text, u.url FROM search_docs s JOIN documents d ON d.url_id = s.url_id"
            " JOIN urls u ON u.id = s.url_id WHERE s.url_id = ? AND d.fetch_id = s.fetch_id", (url_id,)).fetchone()
        if indexed is not None:
            anchors, title, text, url = indexed
            self.db.execute("INSERT INTO search_index (search_index, rowid, title, body, url_words, anchors)"
                            " VALUES ('delete', ?, ?, ?, ?, ?)", (url_id, title or "", text, _url_words(url), anchors))
        self.db.execute("DELETE FROM search_docs WHERE url_id = ?", (url_id,))
        self.late.remove(url_id)

    def rebuild(self) -> None:
        """Drop the index and start again from the store (then :meth:`follow` until it returns 0)."""
        self.db.execute("DROP TABLE IF EXISTS search_index")
        self.db.execute("DROP TABLE IF EXISTS search_docs")
        self.db.execute("DROP TABLE IF EXISTS late_anchor_index")
        self.db.execute("DROP TABLE IF EXISTS late_anchors")
        for statement in SEARCH_SCHEMA.split(";"):
            if statement.strip():
                self.db.execute(statement)
        self.db.execute("DELETE FROM meta WHERE key IN ('search_fetches_indexed', 'search_links_seen')")

    # -- reading --------------------------------------------------------------------------

    def matches(self, match: str, limit: int, topic: str | None = None, host: str | None = None,
                mime: str | None = None, since: float | None = None, until: float | None = None,
                parts: tuple[list[str], list[str]] | None = None) -> list[tuple[int, float]]:
        """(url id, BM25 score: higher is better) of the best ``limit`` pages matching an FTS5
        query, within the filters (a topic includes its subtopics). A page's late anchors count
        as part of it (their score added): for a conjunctive query, ``parts`` gives its required
        and excluded parts, each checked against the page's row and its late anchors together;
        without them the query is a disjunction, which each row may satisfy alone."""
        filters = (topic, host, mime, since, until)
        joins, where, parameters = _filters("s.rowid", *filters)
        weights = ", ".join(map(str, COLUMN_WEIGHTS))
        found = dict(self.db.execute(
            f"SELECT s.rowid, -bm25(search_index, {weights}) AS score FROM search_index s{joins}"
            f" WHERE search_index MATCH ?{where} ORDER BY bm25(search_index, {weights}) LIMIT ?",
            [match, *parameters, limit]).fetchall())
        return self.late.joined(found, match, limit, filters, parts)

    def ranking(self, url_ids: list[int]) -> dict[int, tuple]:
        """What ranks each page beside BM25: (topic, confidence, modified_at, hub, authority,
        pagerank, confidence_pagerank), the link scores of its topic's latest analysis (0: none)."""
        return {row[0]: row[1:] for row in rows_in(
            self.db, "SELECT sd.url_id, sd.topic, COALESCE(sd.confidence, 0), sd.modified_at, COALESCE(ls.hub, 0),"
            " COALESCE(ls.authority, 0), COALESCE(ls.pagerank, 0), COALESCE(ls.confidence_pagerank, 0)"
            " FROM search_docs sd LEFT JOIN link_scores ls ON ls.topic = COALESCE(sd.topic, '') AND ls.url_id = sd.url_id"
            " WHERE sd.url_id IN ({})", url_ids)}

    def details(self, url_ids: list[int]) -> dict[int, dict]:
        """What a result list shows of each page: URL, host, title, the topic-specific preview (or
        the text's opening), topic, the critic's score, size, MIME type, Last-Modified."""
        rows = rows_in(
            self.db, "SELECT d.url_id, u.url, u.host, d.title, COALESCE(d.preview, substr(d.text, 1, 300), ''), d.topic,"
            " d.relevance, f.bytes, f.mime, sd.modified_at FROM documents d JOIN urls u ON u.id = d.url_id"
            " JOIN fetches f ON f.id = d.fetch_id LEFT JOIN search_docs sd ON sd.url_id = d.url_id"
            " WHERE d.url_id IN ({})", url_ids)
        return {url_id: {"url_id": url_id, "url": url, "host": host, "title": title or "", "preview": preview,
                         "topic": topic, "relevance": relevance, "size": size, "mime": mime, "modified_at": modified}
                for url_id, url, host, title, preview, topic, relevance, size, mime, modified in rows}

    def texts(self, url_ids: list[int]) -> dict[int, tuple[str, str]]:
        """(title, text) of pages: a surface-word search checks its words in them."""
        return {url_id: (title or "", text or "") for url_id, title, text in rows_in(
            self.db, "SELECT url_id, title, text FROM documents WHERE url_id IN ({})", url_ids)}

    def neighbours(self, url_id: int, limit: int = 100) -> tuple[list[int], list[int]]:
        """Stored pages linking to the page, and stored pages it links to (BINGO!'s search in the
        neighbourhood of a result)."""
        predecessors = [source for (source,) in self.db.execute(
            "SELECT DISTINCT l.source_id FROM links l JOIN search_docs s ON s.url_id = l.source_id"
            " WHERE l.target_id = ? AND l.source_id != ? LIMIT ?", (url_id, url_id, limit))]
        successors = [target for (target,) in self.db.execute(
            "SELECT DISTINCT l.target_id FROM links l JOIN search_docs s ON s.url_id = l.target_id"
            " WHERE l.source_id = ? AND l.target_id != ? LIMIT ?", (url_id, url_id, limit))]
        return predecessors, successors

    def topics(self) -> list[tuple[str, int]]:
        """The topics of the indexed pages with their numbers of pages."""
        return self.db.execute("SELECT topic, COUNT(*) FROM search_docs WHERE topic IS NOT NULL GROUP BY topic"
                               " ORDER BY topic").fetchall()

    def frequent_terms(self, count: int, lowest: int = 2) -> list[tuple[str, int]]:
        """Indexed terms (stems) with the number of pages holding each, the most frequent first
        (FTS5's vocabulary table over the index): queries for benchmarks."""
        self.db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_vocabulary USING fts5vocab(main, search_index, row)")
        return self.db.execute("SELECT term, doc FROM temp.search_vocabulary WHERE doc >= ? AND term GLOB '[a-z]*'"
                               " ORDER BY doc DESC LIMIT ?", (lowest, count)).fetchall()

    def for_review(self, topic: str | None, by: str, count: int) -> list[tuple[int, str | None, float, str | None]]:
        """The best pages of a topic (None: the pages a one-topic crawl accepted) by confidence,
        authority or hub: (url id, topic, score, label if reviewed)."""
        column = {"confidence": "sd.confidence", "authority": "COALESCE(ls.authority, 0)", "hub": "COALESCE(ls.hub, 0)"}[by]
        where, parameters = _topic_clause(topic) if topic else ("sd.topic IS NULL AND sd.confidence >= 0.5", [])
        return self.db.execute(
            f"SELECT sd.url_id, sd.topic, {column}, lb.label FROM search_docs sd"
            " LEFT JOIN link_scores ls ON ls.topic = COALESCE(sd.topic, '') AND ls.url_id = sd.url_id"
            f" LEFT JOIN labels lb ON lb.url_id = sd.url_id WHERE {where} ORDER BY {column} DESC LIMIT ?",
            [*parameters, count]).fetchall()

    def size(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM search_docs").fetchone()[0]


class UserMarks:
    """What the portal's users say of pages: feedback on results (BINGO! §4.1.1) and the
    reviser's labels (§2.4.13), kept in the crawl."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def add_feedback(self, user: str, query: str, url_id: int, relevant: bool) -> None:
        """A user's mark on a result (the latest mark of a page for a query counts)."""
        with self.db:
            self.db.execute("DELETE FROM search_feedback WHERE user = ? AND query = ? AND url_id = ?", (user, query, url_id))
            self.db.execute("INSERT INTO search_feedback (user, query, url_id, relevant, at) VALUES (?, ?, ?, ?, ?)",
                            (user, query, url_id, int(relevant), time.time()))

    def feedback(self, user: str | None = None) -> list[tuple[str, str, int, bool]]:
        """(user, query, url id, relevant) of every mark, or one user's, oldest first."""
        rows = self.db.execute("SELECT user, query, url_id, relevant FROM search_feedback"
                               + (" WHERE user = ?" if user else "") + " ORDER BY id", (user,) if user else ())
        return [(who, query, url_id, bool(relevant)) for who, query, url_id, relevant in rows]

    def set_label(self, url_id: int, label: str, user: str) -> None:
        """A reviewed page's true topic ('' : not relevant); the latest review counts."""
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO labels (url_id, label, user, at) VALUES (?, ?, ?, ?)",
                            (url_id, label, user, time.time()))

    def exclude_term(self, term: str, excluded: bool, user: str) -> None:
        """A term (a stem) the critic must not learn from, or no longer."""
        with self.db:
            if excluded:
                self.db.execute("INSERT OR REPLACE INTO excluded_terms (term, user, at) VALUES (?, ?, ?)",
                                (term, user, time.time()))
            else:
                self.db.execute("DELETE FROM excluded_terms WHERE term = ?", (term,))

    def excluded_terms(self) -> set[str]:
        return {term for (term,) in self.db.execute("SELECT term FROM excluded_terms")}

    def set_indicator(self, topic: str, term: str, indicator: bool, user: str) -> None:
        """A term (a stem) pages of the topic must hold to be accepted, or no longer."""
        with self.db:
            if indicator:
                self.db.execute("INSERT OR REPLACE INTO indicator_terms (topic, term, user, at) VALUES (?, ?, ?, ?)",
                                (topic, term, user, time.time()))
            else:
                self.db.execute("DELETE FROM indicator_terms WHERE topic = ? AND term = ?", (topic, term))

    def indicators(self) -> dict[str, set[str]]:
        """Topic ('' in a one-topic crawl) -> its indicator terms."""
        found: dict[str, set[str]] = {}
        for topic, term in self.db.execute("SELECT topic, term FROM indicator_terms"):
            found.setdefault(topic, set()).add(term)
        return found

    def labels(self) -> dict[int, str]:
        return dict(self.db.execute("SELECT url_id, label FROM labels"))

    def reviewed(self) -> list[tuple[str | None, str]]:
        """(the topic the page is in, its label) of every reviewed indexed page."""
        return self.db.execute("SELECT sd.topic, lb.label FROM labels lb JOIN search_docs sd ON sd.url_id = lb.url_id"
                               " WHERE sd.topic IS NOT NULL OR sd.confidence >= 0.5").fetchall()

    def feedback_version(self) -> tuple[int, float | None]:
        """Changes whenever a mark is added or changed: (marks, time of the latest)."""
        return tuple(self.db.execute("SELECT COUNT(*), MAX(at) FROM search_feedback").fetchone())


class WaitingPages:
    """Pages stored in the open transaction, indexed as it commits (see the module's docstring)."""

    def __init__(self, index: SearchIndex):
        self.index = index
        self.url_ids: list[int] = []
        self.seconds = 0.0  # spent indexing them

    def add(self, url_id: int) -> None:
        """Index a page just stored when its transaction commits (:meth:`index_all`)."""
        self.url_ids.append(url_id)

    @contextmanager
    def forgetting(self):
        """A unit whose failure takes back the pages it left waiting (all of them if SQLite has
        rolled the whole transaction back)."""
        waiting = len(self.url_ids)
        try:
            yield
        except BaseException:
            del self.url_ids[waiting if self.index.db.in_transaction else 0:]
            raise

    def index_all(self) -> None:
        """Index the pages waiting, inside the transaction about to commit; a failure leaves
        them waiting (indexing one again changes nothing)."""
        clock = time.perf_counter()
        for url_id in dict.fromkeys(self.url_ids):
            self.index.index(url_id)
        self.url_ids.clear()
        self.seconds += time.perf_counter() - clock


class AnchorFollower:
    """Keeps a running crawl's index current with the anchor texts of the links it stores:
    they are kept as they are stored (a menu repeated on every page is one pair) and taken
    in every second (:meth:`follow`), which costs a few lookups per distinct target instead
    of reading back every link. Links stored before the follower started are read from the
    table, within the time given; so are those of a unit or group that failed (:meth:`reset`:
    its pairs may name links that are gone, or taken with nothing committed). A crash loses
    the pairs with the links not committed; links committed without theirs left the
    watermark behind, and the next crawl reads them again from the table."""

    def __init__(self, index: SearchIndex, active: bool = True):
        self.index, self.active = index, active  # inactive: a crawl without a search index
        self.since = index.newest_link()  # links up to here: read from the table
        self.pairs: set[tuple[int, str]] = set()

    def found(self, rows: list[tuple]) -> None:
        """Links being stored: (source, target, anchor texts, …) rows (:mod:`.link_rows`, a page's
        target each); a row with anchor texts to another page is kept as its (target, anchor texts) pair."""
        if self.active:
            self.pairs.update([(target, anchors) for source, target, anchors, *_ in rows if anchors and source != target])

    def follow(self, seconds: float) -> int:
        """Take in the pairs kept, then read older links for about ``seconds``; in a
        transaction. Returns how many pages got anchors."""
        found: dict[int, set[str]] = {}
        for target, anchors in self.pairs:
            found.setdefault(target, set()).update(anchor_texts(anchors))
        self.pairs = set()
        changed = self.index.take_anchors(found)
        if not self.index.caught_up(self.since):
            changed += self.index.refresh_anchors(1 << 30, seconds, CRAWL_LINK_BATCH, upto=self.since)
            self.index.caught_up(self.since)
        return changed

    def reset(self) -> None:
        """After a failed unit, group or commit: the pairs kept are dropped, and every link
        up to the newest is read from the table again (taking anchors twice changes nothing)."""
        if self.active:
            self.pairs, self.since = set(), self.index.newest_link()

    @contextmanager
    def forgetting(self):
        """A block whose failure takes its links back (see :meth:`reset`)."""
        try:
            yield
        except BaseException:
            self.reset()
            raise


class LateAnchors:
    """Anchor texts of links found after their target was indexed, each batch a row of a small
    FTS5 index of its own (see the module's docstring); a page's row is folded back into the
    page's own by :meth:`SearchIndex.follow`, and taken out whenever the page is re-indexed."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def add(self, url_id: int, anchors: str) -> None:
        row = self.db.execute("INSERT INTO late_anchors (url_id, anchors) VALUES (?, ?)", (url_id, anchors)).lastrowid
        self.db.execute("INSERT INTO late_anchor_index (rowid, anchors) VALUES (?, ?)", (row, anchors))

    def known(self, url_ids: list[int]) -> dict[int, set[str]]:
        """The late anchors of pages that have some."""
        known: dict[int, set[str]] = {}
        for url_id, anchors in rows_in(self.db, "SELECT url_id, anchors FROM late_anchors WHERE url_id IN ({})", url_ids):
            known.setdefault(url_id, set()).update(anchors.split(ANCHOR_SEPARATOR))
        return known

    def remove(self, url_id: int) -> None:
        for row, anchors in self.db.execute("SELECT id, anchors FROM late_anchors WHERE url_id = ?", (url_id,)).fetchall():
            self.db.execute("INSERT INTO late_anchor_index (late_anchor_index, rowid, anchors) VALUES ('delete', ?, ?)",
                            (row, anchors))
        self.db.execute("DELETE FROM late_anchors WHERE url_id = ?", (url_id,))

    def pages(self, limit: int) -> list[int]:
        """Pages with late anchors, to fold in."""
        return [url_id for (url_id,) in self.db.execute("SELECT DISTINCT url_id FROM late_anchors LIMIT ?", (limit,))]

    def joined(self, found: dict[int, float], match: str, limit: int, filters: tuple,
               parts: tuple[list[str], list[str]] | None) -> list[tuple[int, float]]:
        """The best ``limit`` of the pages whose own rows match (``found``, with their scores)
        and of those that match with their late anchors (see :meth:`SearchIndex.matches`)."""
        if self.db.execute("SELECT 1 FROM late_anchors LIMIT 1").fetchone() is None:
            return sorted(found.items(), key=lambda hit: -hit[1])
        required, excluded = parts if parts else ([match], [])
        late = dict(self.matches(" OR ".join(required), limit, filters))
        others = [url_id for url_id in late if url_id not in found]  # not matched by their own rows
        if excluded:  # an excluded word in the page's row or its late anchors: it does not match
            unwanted = " OR ".join(excluded)
            dropped = self.pages_matching(unwanted, list(found) + others) | _rows_matching(self.db, unwanted, others)
            found = {url_id: score for url_id, score in found.items() if url_id not in dropped}
            others = [url_id for url_id in others if url_id not in dropped]
        for part in required if parts else []:  # each required part in the page's row or its late anchors
            holding = _rows_matching(self.db, part, others) | self.pages_matching(part, others)
            others = [url_id for url_id in others if url_id in holding]
        found.update((url_id, 0.0) for url_id in others)
        for url_id, score in late.items():
            if url_id in found:
                found[url_id] += COLUMN_WEIGHTS[3] * score
        return sorted(found.items(), key=lambda hit: -hit[1])[:limit]

    def pages_matching(self, match: str, url_ids: list[int]) -> set[int]:
        """Those pages with a late anchor row that matches."""
        if not url_ids:
            return set()
        return {url_id for (url_id,) in rows_in(
            self.db, "WITH hits AS MATERIALIZED (SELECT rowid AS id FROM late_anchor_index WHERE late_anchor_index MATCH ?)"
            " SELECT DISTINCT la.url_id FROM hits h JOIN late_anchors la ON la.id = h.id WHERE la.url_id IN ({})",
            url_ids, (match,))}

    def matches(self, match: str, limit: int, filters: tuple) -> list[tuple[int, float]]:
        """(url id, best BM25 score of its late anchors) of pages whose late anchors match."""
        joins, where, parameters = _filters("la.url_id", *filters)
        return self.db.execute(
            "WITH hits AS MATERIALIZED (SELECT rowid AS id, -bm25(late_anchor_index) AS score FROM late_anchor_index"
            " WHERE late_anchor_index MATCH ?)"
            f" SELECT la.url_id, MAX(h.score) FROM hits h JOIN late_anchors la ON la.id = h.id{joins}"
            f" WHERE 1{where} GROUP BY la.url_id ORDER BY 2 DESC LIMIT ?", [match, *parameters, limit]).fetchall()


def _rows_matching(db: sqlite3.Connection, match: str, url_ids: list[int]) -> set[int]:
    """Those pages whose own row in the main index matches."""
    if not url_ids:
        return set()
    return {url_id for (url_id,) in rows_in(
        db, "SELECT rowid FROM search_index WHERE search_index MATCH ? AND rowid IN ({})", url_ids, (match,))}


def _filters(url_id: str, topic: str | None, host: str | None, mime: str | None, since: float | None,
             until: float | None) -> tuple[str, str, list]:
    """Joins, conditions (each after ' AND ') and their parameters that keep pages (their id
    in the column ``url_id``) within a search's filters."""
    joins, where, parameters = "", "", []
    if topic or since is not None or until is not None or mime:
        joins += f" JOIN search_docs sd ON sd.url_id = {url_id}"
    if topic:
        clause, values = _topic_clause(topic)
        where += f" AND {clause}"
        parameters += values
    if host:
        joins += f" JOIN urls u ON u.id = {url_id}"
        where += " AND u.host = ?"
        parameters.append(host)
    if mime:
        joins += " JOIN fetches f ON f.id = sd.fetch_id"
        where += " AND f.mime = ?"
        parameters.append(mime)
    if since is not None:
        where += " AND sd.modified_at >= ?"
        parameters.append(since)
    if until is not None:
        where += " AND sd.modified_at < ?"
        parameters.append(until)
    return joins, where, parameters


def _topic_clause(topic: str) -> tuple[str, list[str]]:
    """``search_docs`` (as sd) rows in the topic or one of its subtopics."""
    escaped = topic.rstrip("/").replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return "(sd.topic = ? OR sd.topic LIKE ? ESCAPE '\\')", [topic, escaped + "/%"]


def _url_words(url: str) -> str:
    """The URL without its scheme: the tokenizer splits it into its words."""
    return url.partition("://")[2] or url


def _modified_at(headers: str | None, fetched_at: float) -> float:
    """The page's Last-Modified date (a Unix time), else when it was fetched."""
    try:
        value = json.loads(headers or "{}").get("last-modified")
        return parsedate_to_datetime(value).timestamp() if value else fetched_at
    except (ValueError, TypeError, AttributeError):
        return fetched_at

