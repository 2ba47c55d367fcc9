"""The seen set in memory: a 64-bit fingerprint of every URL the crawl knows, with its id, and
each id's state, priority and whether a later link may lift its skip, so that a page's links are
checked without reading the database (at 10 M URLs no cache holds the URL index or the table, and
300 links took 1–2 ms of page reads; from memory 0.5 ms). About 22 bytes a URL.

As in Mercator's seen-URL test, a URL is known by a fingerprint (Python's own 64-bit hash: the set
lives as long as the process), so two URLs in 10 M share one with a chance of 3 in a million;
the second is then taken for the first. The frontier keeps the records true: every write to a
URL's state or priority goes through it, and bulk ones are followed by :meth:`reread`."""

from __future__ import annotations

import sqlite3

import numpy as np

from focuscrawl.frontier import REVIVABLE, Seen

MERGE_EVERY = 65_536  # fingerprints kept in a dict before they join the sorted arrays (an O(N) copy)
REASONS = (None, *REVIVABLE)  # a skip reason's code is its place here; the next code: a reason no link lifts
OTHER_REASON = "(a reason no later link lifts)"


def reason_code(reason: str | None) -> int:
    return REASONS.index(reason) if reason in REASONS else len(REASONS)


class SeenSet:
    def __init__(self):
        self.hashes = np.empty(0, np.int64)  # sorted, unique
        self.ids = np.empty(0, np.uint32)  # the id of each fingerprint
        self.recent: dict[int, int] = {}  # fingerprint -> id of URLs added since the last merge
        self.state = np.zeros(0, np.int8)  # by id
        self.priority = np.zeros(0, np.float64)  # by id
        self.reason = np.zeros(0, np.int8)  # by id: the skip reason's code

    @classmethod
    def read(cls, db: sqlite3.Connection) -> SeenSet:
        """Every URL of the crawl (at 10 M URLs, about 20 s and 180 MB)."""
        seen = cls()
        count = db.execute("SELECT COUNT(*) FROM urls").fetchone()[0]
        hashes, ids, filled = np.empty(count, np.int64), np.empty(count, np.int64), 0
        cursor = db.execute("SELECT url, id FROM urls")
        while rows := cursor.fetchmany(100_000):
            hashes[filled:filled + len(rows)] = np.fromiter((hash(url) for url, _ in rows), np.int64, len(rows))
            ids[filled:filled + len(rows)] = np.fromiter((url_id for _, url_id in rows), np.int64, len(rows))
            filled += len(rows)
        seen._merge(hashes[:filled], ids[:filled])
        seen.reread(db)
        return seen

    def reread(self, db: sqlite3.Connection, ids: list[int] | None = None) -> None:
        """The records of ``ids`` (None: all) again from the database, after writes made there."""
        query = "SELECT id, state, priority, skip_reason FROM urls"
        if ids is None:
            self._grow(db.execute("SELECT COALESCE(MAX(id), 0) FROM urls").fetchone()[0])
            cursor = db.execute(query)
        else:
            cursor = (row for start in range(0, len(ids), 500) for row in db.execute(
                f"{query} WHERE id IN ({','.join('?' * len(ids[start:start + 500]))})", ids[start:start + 500]))
        while rows := _take(cursor, 100_000):
            at = np.fromiter((row[0] for row in rows), np.int64, len(rows))
            self._grow(int(at.max()))
            self.state[at] = np.fromiter((row[1] for row in rows), np.int8, len(rows))
            self.priority[at] = np.fromiter((row[2] for row in rows), np.float64, len(rows))
            self.reason[at] = np.fromiter((reason_code(row[3]) for row in rows), np.int8, len(rows))

    def forget_after(self, last_id: int) -> None:
        """Ids above the last one the database holds were rolled back: their URLs are new again."""
        self.recent = {h: i for h, i in self.recent.items() if i <= last_id}
        kept = self.ids <= last_id
        if not kept.all():
            self.hashes, self.ids = self.hashes[kept], self.ids[kept]

    def records(self, urls: list[str]) -> dict[str, Seen]:
        """The records of those of ``urls`` seen before, by URL."""
        found = self._ids(urls)
        if not found:
            return {}
        at = np.fromiter((url_id for _, url_id in found), np.int64, len(found))
        states, priorities, reasons = self.state[at].tolist(), self.priority[at].tolist(), self.reason[at].tolist()
        return {url: Seen(url_id, state, priority, REASONS[code] if code < len(REASONS) else OTHER_REASON)
                for (url, url_id), state, priority, code in zip(found, states, priorities, reasons)}

    def _ids(self, urls: list[str]) -> list[tuple[str, int]]:
        found, missing = [], []
        for url in urls:
            url_id = self.recent.get(hash(url))
            if url_id is None:
                missing.append(url)
            else:
                found.append((url, url_id))
        if missing and len(self.hashes):
            wanted = np.fromiter((hash(url) for url in missing), np.int64, len(missing))
            at = np.minimum(np.searchsorted(self.hashes, wanted), len(self.hashes) - 1)
            hits = np.flatnonzero(self.hashes[at] == wanted)
            found += zip([missing[i] for i in hits.tolist()], self.ids[at[hits]].tolist())
        return found

    def add(self, url: str, url_id: int, state: int, priority: float, reason: str | None) -> None:
        self.recent[hash(url)] = url_id
        self.set(url_id, state, priority, reason)
        if len(self.recent) >= MERGE_EVERY:
            self._merge(np.fromiter(self.recent.keys(), np.int64, len(self.recent)),
                        np.fromiter(self.recent.values(), np.int64, len(self.recent)))
            self.recent = {}

    def set(self, url_id: int, state: int, priority: float | None = None, reason: str | None = None) -> None:
        """A URL's new state (and priority, if given; and skip reason)."""
        self._grow(url_id)
        self.state[url_id] = state
        if priority is not None:
            self.priority[url_id] = priority
        self.reason[url_id] = reason_code(reason)

    def set_priorities(self, ids: list[int], priorities: list[float]) -> None:
        self.priority[np.array(ids, np.int64)] = priorities

    def _grow(self, last_id: int) -> None:
        """Room for records up to ``last_id``, and a quarter more (ids only grow)."""
        if last_id < len(self.state):
            return
        size = max(1024, last_id + last_id // 4)
        self.state, self.priority, self.reason = (np.concatenate([array, np.zeros(size - len(array), array.dtype)])
                                                  for array in (self.state, self.priority, self.reason))

    def _merge(self, hashes: np.ndarray, ids: np.ndarray) -> None:
        """Join fingerprints and their ids into the sorted arrays (one there already takes the new id)."""
        wide = max(int(ids.max(initial=0)), int(self.ids.max(initial=0))) >= 2**32
        dtype = np.int64 if wide else np.uint32
        order = np.argsort(hashes, kind="stable")
        hashes, ids = hashes[order], ids[order].astype(dtype)
        del order
        last = np.append(hashes[1:] != hashes[:-1], True)  # of equal fingerprints the last added wins
        if not last.all():
            hashes, ids = hashes[last], ids[last]
        if not len(self.hashes):
            self.hashes, self.ids = hashes, ids
            return
        at = np.searchsorted(self.hashes, hashes)
        there = at < len(self.hashes)
        there[there] = self.hashes[at[there]] == hashes[there]
        self.ids = self.ids.astype(dtype, copy=False)
        self.ids[at[there]] = ids[there]
        new = ~there
        self.hashes = np.insert(self.hashes, at[new], hashes[new])
        self.ids = np.insert(self.ids, at[new], ids[new])


def _take(rows, count: int) -> list[tuple]:
    """Up to ``count`` rows of a cursor or an iterator of rows."""
    if isinstance(rows, sqlite3.Cursor):
        return rows.fetchmany(count)
    return [row for _, row in zip(range(count), rows)]
