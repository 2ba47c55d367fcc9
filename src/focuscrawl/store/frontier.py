"""The frontier's SQLite backend: every discovered URL once (the seen set), the queued ones on
disk in the ``urls`` table (state 0, a partial index on (queue, host, priority)), handed out
best first among the hosts politeness lets us ask now, and only if the URL is among the best
the whole frontier holds (the hand-out order), so that parallel fetching does not throw the
priority order away. Memory holds one small record per host (:mod:`.host_heaps`) and the seen
set's fingerprints and records, about 22 bytes a URL (:mod:`.seen_set`)."""

from __future__ import annotations

import sqlite3
import time

from focuscrawl.fetch.hosts import BAD, Hosts
from focuscrawl.frontier import (HEAD, OUT_OF_PHASE, QUEUE_FULL, REVIVABLE, TUNNEL_END, Discovered, Item, Seen,
                                 once_per_url)
from focuscrawl.store.clusters import HOST_FACTOR, LINK_FACTOR, LinkClusters
from focuscrawl.store.host_heaps import HostHeaps
from focuscrawl.store.seen_set import SeenSet
from focuscrawl.store.schema import DONE, IN_FLIGHT, QUEUED, SKIPPED


class SqliteFrontier:
    """One queue (""), or BINGO!'s sub-queue per topic, served round-robin so that one topic's
    higher scores cannot starve the others (thesis §2.3.3). The order (``order``: strict, band,
    host-parallel) and exploration (``link_clusters`` and ``host_clusters``: :class:`LinkClusters`)
    hold within each."""

    def __init__(self, db: sqlite3.Connection, hosts: Hosts, order: str = "band", band: float = 0.05,
                 link_clusters: float | None = None, host_clusters: float | None = None, relative_clusters: bool = False):
        self.db = db
        self.hosts = hosts
        self.heaps = HostHeaps(hosts, order, band)
        self._seen: SeenSet | None = None  # read by the load, or the first lookup
        self.clusters = LinkClusters(db, hosts, self.heaps, link_clusters, host_clusters, self._refresh,
                                     lambda: self.seen, relative_clusters) if link_clusters or host_clusters else None
        self.size = 0  # queued URLs
        self.in_flight = 0
        self.done = 0  # URLs fetched over the whole crawl, resumes included (refused ones are not)

    def load(self) -> int:
        """Rebuild the in-memory view from disk; URLs in flight at a kill are queued again."""
        requeued = self.db.execute("UPDATE urls SET state = ? WHERE state = ?", (QUEUED, IN_FLIGHT)).rowcount
        for name, failures, status, delay in self.db.execute("SELECT host, failures, status, crawl_delay FROM hosts"):
            self.hosts.restore(name, failures, status, delay)
        self._seen = SeenSet.read(self.db)
        self.resync(reread=False)
        return requeued

    def resync(self, reread: bool = True) -> None:
        """Recount from the database and re-offer every host, and read the seen set's records
        again (after a load, a rolled-back page, or priorities changed on disk)."""
        if reread and self._seen is not None:
            self._seen.forget_after(self.db.execute("SELECT COALESCE(MAX(id), 0) FROM urls").fetchone()[0])
            self._seen.reread(self.db)
        self.size = self.db.execute("SELECT COUNT(*) FROM urls WHERE state = ?", (QUEUED,)).fetchone()[0]
        self.done = self.db.execute("SELECT COUNT(*) FROM urls WHERE state = ? AND skip_reason IS NULL", (DONE,)).fetchone()[0]
        if self.clusters is not None:
            self.clusters.reread()
        self.heaps.clear()
        best = "SELECT queue, host, MAX(priority), id FROM urls WHERE state = ? GROUP BY queue, host"
        for queue, name, priority, url_id in self.db.execute(best, (QUEUED,)).fetchall():
            self.heaps.raise_best(queue, self.hosts[name], priority, url_id)

    # -- discovery ---------------------------------------------------------------------------

    def add(self, found: list[Discovered], depth: int, parent_id: int | None,
            known: dict[str, Seen] | None = None, tunnel: int = 0, queue: str = "") -> list[int]:
        """Queue discovered URLs given as (url, host, priority, skip_reason); returns their ids.
        A URL already seen keeps its best priority; one with a skip reason is only remembered
        (link graph, seen set) unless a later link admits it. Each URL is looked up and written
        once (``once_per_url``), in one lookup for the whole batch (or none: ``known`` from
        :meth:`known` on the same URLs). ``tunnel`` and ``queue``: the links' tunnelling distance
        and sub-queue (the same for all links of a page)."""
        each_url = once_per_url(found, self.hosts)
        if known is None:
            known = self.known([url for url, _, _, _ in each_url])
        for url, host, priority, skip_reason in each_url:
            seen = known.get(url)
            if seen is None:
                state = QUEUED if skip_reason is None else SKIPPED
                url_id = self.db.execute(
                    "INSERT INTO urls (url, host, depth, parent_id, priority, state, skip_reason, discovered_at, tunnel,"
                    " queue) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (url, host, depth, parent_id, priority, state, skip_reason, time.time(), tunnel, queue),
                ).lastrowid
                known[url] = Seen(url_id, state, priority, skip_reason)
                self.seen.add(url, url_id, state, priority, skip_reason)
                if state == QUEUED:
                    self.size += 1
                    self.heaps.raise_best(queue, self.hosts[host], priority, url_id)
            elif skip_reason is None:
                self._readmit(seen, host, depth, parent_id, priority, tunnel, queue)
        return [known[url].url_id for url, _, _, _ in found]

    @property
    def seen(self) -> SeenSet:
        if self._seen is None:
            self._seen = SeenSet.read(self.db)
        return self._seen

    def known(self, urls: list[str]) -> dict[str, Seen]:
        """The records of those of ``urls`` seen before, by URL (from memory: :mod:`.seen_set`)."""
        return self.seen.records(urls)

    def _readmit(self, seen: Seen, host: str, depth: int, parent_id: int | None, priority: float, tunnel: int,
                 queue: str) -> None:
        """A seen URL found again by an admissible link: raise its priority (the better link's
        tunnelling distance and queue with it), or queue it if it was skipped only for a reason
        this link does not have."""
        if seen.state == QUEUED and priority > seen.priority:
            self.db.execute("UPDATE urls SET priority = ?, tunnel = ?, queue = ?, depth = ?, parent_id = ? WHERE id = ?",
                            (priority, tunnel, queue, depth, parent_id, seen.url_id))
        elif seen.state == SKIPPED and seen.skip_reason in REVIVABLE:
            self.db.execute(
                "UPDATE urls SET state = ?, skip_reason = NULL, depth = ?, parent_id = ?, priority = ?, tunnel = ?,"
                " queue = ? WHERE id = ?", (QUEUED, depth, parent_id, priority, tunnel, queue, seen.url_id),
            )
            self.size += 1
        else:
            return
        seen.state, seen.priority, seen.skip_reason = QUEUED, priority, None
        self.seen.set(seen.url_id, QUEUED, priority)
        self.heaps.raise_best(queue, self.hosts[host], priority, seen.url_id)

    def mark_fetched_alias(self, url: str, host: str, depth: int, parent_id: int | None) -> None:
        """A redirect's final URL has been fetched too: never queue it again."""
        reason = "fetched as a redirect target"
        seen = self.known([url]).get(url)
        if seen is None:
            self.add([Discovered(url, host, 0.0, reason)], depth, parent_id)
        elif seen.state in (QUEUED, SKIPPED):
            self.db.execute("UPDATE urls SET state = ?, skip_reason = ? WHERE id = ?", (DONE, reason, seen.url_id))
            self.seen.set(seen.url_id, DONE, reason=reason)
            self.size -= seen.state == QUEUED

    # -- hand-out ----------------------------------------------------------------------------

    def next_ready(self) -> Item | None:
        """The best queued URL of a host we may ask now, if the order lets it go, marked in
        flight; None if none is ready or good enough. With several queues, the next queue after
        the one served last that has one (round-robin)."""
        now = time.monotonic()
        for queue in self.heaps.queues_in_turn(now):
            item = self._take(queue, now)
            if item is not None:
                self.heaps.served(queue)
                return item
        return None

    def _take(self, queue: str, now: float) -> Item | None:
        """The best URL of the queue's next host in order, marked in flight."""
        while (name := self.heaps.next_host(queue, now)) is not None:
            rows = self._queued_best(queue, name, 2)
            self.heaps.set_best(queue, name, (rows[1][4], rows[1][0]) if len(rows) > 1 else None)
            if not rows:
                continue
            url_id, url, depth, parent_id, priority, tunnel = rows[0]
            self.db.execute("UPDATE urls SET state = ? WHERE id = ?", (IN_FLIGHT, url_id))
            self.seen.set(url_id, IN_FLIGHT)
            host = self.hosts[name]
            host.active += 1
            self.size -= 1
            self.in_flight += 1
            self.heaps.offer(host, now)  # (the item's priority is what it won the hand-out with)
            return Item(url_id, url, name, depth, parent_id, self.heaps.effective(name, priority), tunnel, queue)
        return None

    def _queued_best(self, queue: str, name: str, count: int) -> list[tuple]:
        """(id, url, depth, parent id, priority, tunnel) of a host's ``count`` best queued URLs in a queue."""
        return self.db.execute(
            "SELECT id, url, depth, parent_id, priority, tunnel FROM urls WHERE queue = ? AND host = ? AND state = ?"
            " ORDER BY priority DESC, id LIMIT ?", (queue, name, QUEUED, count)).fetchall()

    # -- exploration (:class:`LinkClusters`) ---------------------------------------------------

    def learn_cluster(self, item: Item, relevance: float) -> None:
        if self.clusters is not None:
            self.clusters.learn(item, relevance)

    def _refresh(self, queue: str, name: str) -> None:
        """Read a host's best URL of a queue again after its priorities changed on disk."""
        rows = self._queued_best(queue, name, 1)
        self.heaps.set_best(queue, name, (rows[0][4], rows[0][0]) if rows else None)
        if rows:
            self.heaps.offer(self.hosts[name], time.monotonic(), (queue,))

    def seconds_to_next(self) -> float | None:
        """How long until a sleeping host wakes; None if none sleeps."""
        return self.heaps.seconds_to_next()

    def exhausted(self) -> bool:
        return self.size == 0 and self.in_flight == 0

    def claimed(self) -> int:
        return self.done + self.in_flight

    def finish(self, item: Item, refused: str | None = None) -> None:
        """The URL has been handled (call inside the page's transaction). A URL ``refused``
        (robots.txt, policy, MIME type, size) was not a fetch: it keeps the reason and does not
        count toward the budget."""
        self.db.execute("UPDATE urls SET state = ?, skip_reason = ? WHERE id = ?", (DONE, refused, item.url_id))
        self.seen.set(item.url_id, DONE, reason=refused)
        self.done += refused is None

    def hang_up(self, item: Item) -> None:
        """The fetch is over: the host's connection may take its next URL (as the order allows)
        while this page is judged and stored; the URL stays in flight until :meth:`release`.
        Holding the connection until the page was stored kept about 6 pages in flight under the
        band order on the default web, too few to keep the judging process busy (README)."""
        if item.connected:
            item.connected = False
            host = self.hosts[item.host]
            host.active -= 1
            self.heaps.offer(host, time.monotonic())

    def release(self, item: Item) -> None:
        """The page is stored or abandoned: the URL is no longer in flight (and its host's
        connection is free, if :meth:`hang_up` has not freed it already)."""
        self.hang_up(item)
        self.in_flight -= 1

    def drop_host(self, name: str) -> int:
        """A bad host: its queued URLs are skipped for the rest of the crawl."""
        dropped = [url_id for url_id, in self.db.execute(
            "UPDATE urls SET state = ?, skip_reason = 'host marked bad' WHERE host = ? AND state = ? RETURNING id",
            (SKIPPED, name, QUEUED))]
        for url_id in dropped:
            self.seen.set(url_id, SKIPPED, reason="host marked bad")
        self.size -= len(dropped)
        self.heaps.forget(name)
        return len(dropped)

    # -- reorganisation (BINGO!) ---------------------------------------------------------------

    def trim(self, max_queued: int) -> int:
        """BINGO!'s bounded queue: beyond ``max_queued`` URLs in a queue (each topic's, with
        per-topic queues) the lowest-priority ones are dropped; a later link may queue them again."""
        effective = f"CASE WHEN priority < {HEAD / 2} THEN priority * {HOST_FACTOR} ELSE priority END"
        dropped = [url_id for url_id, in self.db.execute(
            f"UPDATE urls SET state = ?, skip_reason = ? WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER"
            f" (PARTITION BY queue ORDER BY {effective} DESC, id) AS rank FROM urls WHERE state = ?) WHERE rank > ?)"
            " RETURNING id", (SKIPPED, QUEUE_FULL, QUEUED, max_queued))]
        for url_id in dropped:
            self.seen.set(url_id, SKIPPED, reason=QUEUE_FULL)
        self.size -= len(dropped)
        return len(dropped)

    def requeue(self, rows: list[tuple[float, int]]) -> int:
        """Queue again skipped URLs given as (the strategy's priority, id), times their link
        cluster's factor, unless their host has gone bad (call :meth:`resync` after the transaction)."""
        requeued = self.db.executemany(
            f"UPDATE urls SET state = {QUEUED}, skip_reason = NULL, priority = ? * {LINK_FACTOR} WHERE id = ?"
            f" AND state = {SKIPPED}"
            f" AND host NOT IN (SELECT host FROM hosts WHERE status = '{BAD}')", rows).rowcount
        self.seen.reread(self.db, [url_id for _, url_id in rows])
        return requeued

    def promote(self, priorities: dict[int, float]) -> int:
        """Put not-yet-fetched URLs at the head of the frontier (BINGO!'s best hubs' links):
        priority HEAD + the given score; a URL the crawl policy had left aside (not one refused
        by nofollow or max_depth) is queued. Call :meth:`resync` after the transaction."""
        rows = [(HEAD + p, url_id) for url_id, p in priorities.items()]
        promoted = self.db.executemany(
            f"UPDATE urls SET state = {QUEUED}, skip_reason = NULL, priority = ? WHERE id = ?"
            f" AND (state = {QUEUED} OR (state = {SKIPPED} AND skip_reason IN ('{TUNNEL_END}', '{OUT_OF_PHASE}',"
            f" '{QUEUE_FULL}'))) AND host NOT IN (SELECT host FROM hosts WHERE status = '{BAD}')", rows).rowcount
        self.seen.reread(self.db, list(priorities))
        return promoted
