"""The frontier: every discovered URL once (the seen set), the queued ones on disk, handed
out best first among the hosts that politeness lets us ask now.

Queued URLs live in the ``urls`` table (state 0) with a partial index on (host, priority), so
memory holds only one small record per host, however many URLs wait. In memory, hosts sit in
two heaps as in Mercator's back queues: *ready* by the priority of their best URL, *sleeping*
by the time their politeness interval ends. Hosts at their connection limit wait for a release.
"""

from __future__ import annotations

import heapq
import sqlite3
import time
from dataclasses import dataclass

from focuscrawl.fetch.hosts import BAD, Host, Hosts
from focuscrawl.store import DONE, IN_FLIGHT, QUEUED, SKIPPED

# a skipped URL may still be queued when a later link admits it
REVIVABLE = ("nofollow", "beyond max depth")


def bfs_priority(parent_relevance: float | None, depth: int, url: str) -> float:
    """Breadth-first: shallower first, first found first (ties go to the lower id)."""
    return -float(depth)


def best_first_priority(parent_relevance: float | None, depth: int, url: str) -> float:
    """Chakrabarti's baseline: an out-link of u inherits Pr(relevant | u)."""
    return parent_relevance if parent_relevance is not None else 0.0


# A strategy gives a discovered URL its priority from its parent's relevance, its depth and
# the URL itself; evaluation adds reference strategies (oracles) under their own names.
STRATEGIES = {"bfs": bfs_priority, "best-first": best_first_priority}


@dataclass(slots=True)
class Item:
    url_id: int
    url: str
    host: str
    depth: int
    parent_id: int | None
    priority: float


class Frontier:
    def __init__(self, db: sqlite3.Connection, hosts: Hosts):
        self.db = db
        self.hosts = hosts
        self.connections = hosts.connections
        self._ready: list[tuple[float, int, str]] = []
        self._sleeping: list[tuple[float, str]] = []
        self.size = 0  # queued URLs
        self.in_flight = 0
        self.done = 0  # URLs fetched (or refused) over the whole crawl, resumes included

    def load(self) -> int:
        """Rebuild the in-memory view from disk; URLs in flight at a kill are queued again."""
        requeued = self.db.execute("UPDATE urls SET state = ? WHERE state = ?", (QUEUED, IN_FLIGHT)).rowcount
        for name, failures, status, delay in self.db.execute("SELECT host, failures, status, crawl_delay FROM hosts"):
            self.hosts.restore(name, failures, status, delay)
        self.resync()
        return requeued

    def resync(self) -> None:
        """Recount from the database and re-offer every host (after a load or a rolled-back page)."""
        self.size = self.db.execute("SELECT COUNT(*) FROM urls WHERE state = ?", (QUEUED,)).fetchone()[0]
        self.done = self.db.execute("SELECT COUNT(*) FROM urls WHERE state = ? AND skip_reason IS NULL", (DONE,)).fetchone()[0]
        for host in self.hosts:
            host.best = None
        best = "SELECT host, MAX(priority), id FROM urls WHERE state = ? GROUP BY host"
        for name, priority, url_id in self.db.execute(best, (QUEUED,)).fetchall():
            self._raise(self.hosts[name], priority, url_id)

    # -- discovery ---------------------------------------------------------------------------

    def add(self, found: list[tuple[str, str, float, str | None]], depth: int, parent_id: int | None,
            known: dict[str, list] | None = None) -> list[int]:
        """Queue discovered URLs given as (url, host, priority, skip_reason); returns their ids.
        A URL already seen keeps its best priority; one with a skip reason is only remembered
        (link graph, seen set) unless a later link admits it. One lookup for the whole batch
        (or none: ``known`` from :meth:`known` on the same URLs)."""
        if known is None:
            known = self.known([url for url, _, _, _ in found])
        ids = []
        for url, host, priority, skip_reason in found:
            if skip_reason is None and self.hosts[host].status == BAD:
                skip_reason = "host marked bad"
            row = known.get(url)
            if row is None:
                state = QUEUED if skip_reason is None else SKIPPED
                url_id = self.db.execute(
                    "INSERT INTO urls (url, host, depth, parent_id, priority, state, skip_reason, discovered_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (url, host, depth, parent_id, priority, state, skip_reason, time.time()),
                ).lastrowid
                known[url] = [url_id, state, priority, skip_reason]
                if state == QUEUED:
                    self.size += 1
                    self._raise(self.hosts[host], priority, url_id)
            elif skip_reason is None:
                self._readmit(row, host, depth, parent_id, priority)
            ids.append(known[url][0])
        return ids

    def known(self, urls: list[str]) -> dict[str, list]:
        """url -> [id, state, priority, skip reason] of those of ``urls`` seen before."""
        known = {}
        unique = list(dict.fromkeys(urls))
        for start in range(0, len(unique), 500):
            chunk = unique[start:start + 500]
            query = f"SELECT url, id, state, priority, skip_reason FROM urls WHERE url IN ({','.join('?' * len(chunk))})"
            known.update((url, list(rest)) for url, *rest in self.db.execute(query, chunk))
        return known

    def _readmit(self, row: list, host: str, depth: int, parent_id: int | None, priority: float) -> None:
        """A seen URL found again by an admissible link: raise its priority, or queue it if it was
        skipped only for a reason this link does not have."""
        url_id, state, old_priority, old_reason = row
        if state == QUEUED and priority > old_priority:
            self.db.execute("UPDATE urls SET priority = ? WHERE id = ?", (priority, url_id))
        elif state == SKIPPED and old_reason in REVIVABLE:
            self.db.execute(
                "UPDATE urls SET state = ?, skip_reason = NULL, depth = ?, parent_id = ?, priority = ? WHERE id = ?",
                (QUEUED, depth, parent_id, priority, url_id),
            )
            self.size += 1
        else:
            return
        row[1:] = [QUEUED, priority, None]
        self._raise(self.hosts[host], priority, url_id)

    def mark_fetched_alias(self, url: str, host: str, depth: int, parent_id: int | None) -> None:
        """A redirect's final URL has been fetched too: never queue it again."""
        row = self.db.execute("SELECT id, state FROM urls WHERE url = ?", (url,)).fetchone()
        if row is None:
            self.add([(url, host, 0.0, "fetched as a redirect target")], depth, parent_id)
        elif row[1] in (QUEUED, SKIPPED):
            self.db.execute("UPDATE urls SET state = ?, skip_reason = 'fetched as a redirect target' WHERE id = ?", (DONE, row[0]))
            self.size -= row[1] == QUEUED

    # -- hand-out ----------------------------------------------------------------------------

    def next_ready(self) -> Item | None:
        """The best queued URL of a host we may ask now, marked in flight; None if none is ready."""
        now = time.monotonic()
        while self._sleeping and self._sleeping[0][0] <= now:
            self._offer(self.hosts[heapq.heappop(self._sleeping)[1]], now)
        while self._ready:
            negative, best_id, name = heapq.heappop(self._ready)
            host = self.hosts[name]
            if host.best != -negative or host.best_id != best_id or host.status == BAD or host.active >= self.connections:
                continue
            if host.next_start > now:
                heapq.heappush(self._sleeping, (host.next_start, name))
                continue
            rows = self.db.execute(
                "SELECT id, url, depth, parent_id, priority FROM urls WHERE host = ? AND state = ?"
                " ORDER BY priority DESC, id LIMIT 2",
                (name, QUEUED),
            ).fetchall()
            host.best = None
            if len(rows) > 1:
                host.best, host.best_id = rows[1][4], rows[1][0]
            if not rows:
                continue
            url_id, url, depth, parent_id, priority = rows[0]
            self.db.execute("UPDATE urls SET state = ? WHERE id = ?", (IN_FLIGHT, url_id))
            host.active += 1
            self.size -= 1
            self.in_flight += 1
            self._offer(host, now)
            return Item(url_id, url, name, depth, parent_id, priority)
        return None

    def seconds_to_next(self) -> float | None:
        """How long until a sleeping host wakes; None if none sleeps."""
        if not self._sleeping:
            return None
        return max(0.0, self._sleeping[0][0] - time.monotonic())

    def finish(self, item: Item) -> None:
        """The URL has been handled (call inside the page's transaction)."""
        self.db.execute("UPDATE urls SET state = ? WHERE id = ?", (DONE, item.url_id))
        self.done += 1

    def release(self, item: Item) -> None:
        """Free the host's connection slot, whether the page was finished or abandoned."""
        host = self.hosts[item.host]
        host.active -= 1
        self.in_flight -= 1
        self._offer(host, time.monotonic())

    def drop_host(self, name: str) -> int:
        """A bad host: its queued URLs are skipped for the rest of the crawl."""
        dropped = self.db.execute(
            "UPDATE urls SET state = ?, skip_reason = 'host marked bad' WHERE host = ? AND state = ?", (SKIPPED, name, QUEUED)
        ).rowcount
        self.size -= dropped
        self.hosts[name].best = None
        return dropped

    # -- host heaps --------------------------------------------------------------------------

    def _raise(self, host: Host, priority: float, url_id: int) -> None:
        if host.best is None or priority > host.best:
            host.best, host.best_id = priority, url_id
            self._offer(host, time.monotonic())

    def _offer(self, host: Host, now: float) -> None:
        if host.best is None or host.status == BAD or host.active >= self.connections:
            return
        if host.next_start > now:
            heapq.heappush(self._sleeping, (host.next_start, host.name))
        else:
            heapq.heappush(self._ready, (-host.best, host.best_id, host.name))
