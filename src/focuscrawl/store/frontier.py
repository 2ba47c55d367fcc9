"""The frontier: every discovered URL once (the seen set), the queued ones on disk, handed
out best first among the hosts that politeness lets us ask now, and only if the URL is among
the best the whole frontier holds (the hand-out order), so that parallel fetching does not
throw the priority order away.

Queued URLs live in the ``urls`` table (state 0) with a partial index on (host, priority), so
memory holds only one small record per host, however many URLs wait. In memory, hosts sit in
two heaps as in Mercator's back queues: *ready* by the priority of their best URL, *sleeping*
by the time their politeness interval ends; a third heap holds every host with queued URLs by
its best, the frontier's best for the order. Hosts at their connection limit wait for a release.
"""

from __future__ import annotations

import bisect
import heapq
import sqlite3
import time
from collections import defaultdict

from focuscrawl.fetch.hosts import BAD, Host, Hosts
from focuscrawl.frontier import CLUSTER_STEP, HEAD, OUT_OF_PHASE, QUEUE_FULL, REVIVABLE, TUNNEL_END, Item
from focuscrawl.store.schema import DONE, IN_FLIGHT, QUEUED, SKIPPED

class SqliteFrontier:
    """Hosts wait in heaps per queue: one queue (""), or BINGO!'s sub-queue per topic, served
    round-robin so that one topic's higher scores cannot starve the others (thesis §2.3.3).

    The hand-out order (``order``) holds across hosts: besides the heap of *ready* hosts, a heap
    of *every* host with queued URLs knows the frontier's best, and a ready host's URL is handed
    out only if it is that best (strict) or within ``band`` of it; otherwise the connection waits
    for a better host to become free. Exploration (``link_clusters``): see :meth:`learn_cluster`."""

    def __init__(self, db: sqlite3.Connection, hosts: Hosts, order: str = "band", band: float = 0.05,
                 link_clusters: float | None = None):
        self.db = db
        self.hosts = hosts
        self.connections = hosts.connections
        self.order, self.band = order, band
        self.link_clusters = link_clusters
        self._best: dict[tuple[str, str], tuple[float, int]] = {}  # (queue, host) -> its best queued URL
        self._queues_of: dict[str, set[str]] = defaultdict(set)  # host -> queues it has URLs in
        self._ready: dict[str, list[tuple[float, int, str]]] = {}  # queue -> heap of ready hosts by best priority
        self._all: dict[str, list[tuple[float, int, str]]] = {}  # queue -> heap of every host by best priority
        self._sleeping: list[tuple[float, str]] = []
        self._turn = ""  # the queue served last
        self.size = 0  # queued URLs
        self.in_flight = 0
        self.done = 0  # URLs fetched over the whole crawl, resumes included (refused ones are not)

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
        self._best.clear()
        self._queues_of.clear()
        self._ready.clear()
        self._all.clear()
        best = "SELECT queue, host, MAX(priority), id FROM urls WHERE state = ? GROUP BY queue, host"
        for queue, name, priority, url_id in self.db.execute(best, (QUEUED,)).fetchall():
            self._raise(queue, self.hosts[name], priority, url_id)

    # -- discovery ---------------------------------------------------------------------------

    def add(self, found: list[tuple[str, str, float, str | None]], depth: int, parent_id: int | None,
            known: dict[str, list] | None = None, tunnel: int = 0, queue: str = "") -> list[int]:
        """Queue discovered URLs given as (url, host, priority, skip_reason); returns their ids.
        A URL already seen keeps its best priority; one with a skip reason is only remembered
        (link graph, seen set) unless a later link admits it. One lookup for the whole batch
        (or none: ``known`` from :meth:`known` on the same URLs). ``tunnel`` and ``queue``: the
        links' tunnelling distance and sub-queue (the same for all links of a page)."""
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
                    "INSERT INTO urls (url, host, depth, parent_id, priority, state, skip_reason, discovered_at, tunnel,"
                    " queue) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (url, host, depth, parent_id, priority, state, skip_reason, time.time(), tunnel, queue),
                ).lastrowid
                known[url] = [url_id, state, priority, skip_reason]
                if state == QUEUED:
                    self.size += 1
                    self._raise(queue, self.hosts[host], priority, url_id)
            elif skip_reason is None:
                self._readmit(row, host, depth, parent_id, priority, tunnel, queue)
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

    def _readmit(self, row: list, host: str, depth: int, parent_id: int | None, priority: float, tunnel: int,
                 queue: str) -> None:
        """A seen URL found again by an admissible link: raise its priority (the better link's
        tunnelling distance and queue with it), or queue it if it was skipped only for a reason
        this link does not have."""
        url_id, state, old_priority, old_reason = row
        if state == QUEUED and priority > old_priority:
            self.db.execute("UPDATE urls SET priority = ?, tunnel = ?, queue = ?, depth = ?, parent_id = ? WHERE id = ?",
                            (priority, tunnel, queue, depth, parent_id, url_id))
        elif state == SKIPPED and old_reason in REVIVABLE:
            self.db.execute(
                "UPDATE urls SET state = ?, skip_reason = NULL, depth = ?, parent_id = ?, priority = ?, tunnel = ?,"
                " queue = ? WHERE id = ?", (QUEUED, depth, parent_id, priority, tunnel, queue, url_id),
            )
            self.size += 1
        else:
            return
        row[1:] = [QUEUED, priority, None]
        self._raise(queue, self.hosts[host], priority, url_id)

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
        """The best queued URL of a host we may ask now, if the order lets it go, marked in
        flight; None if none is ready or good enough. With several queues, the next queue after
        the one served last that has one (round-robin)."""
        now = time.monotonic()
        while self._sleeping and self._sleeping[0][0] <= now:
            self._offer(self.hosts[heapq.heappop(self._sleeping)[1]], now)
        queues = sorted(q for q, heap in self._ready.items() if heap)
        after = bisect.bisect_right(queues, self._turn)
        for queue in queues[after:] + queues[:after]:
            item = self._take(queue, now)
            if item is not None:
                self._turn = queue
                return item
        return None

    def _take(self, queue: str, now: float) -> Item | None:
        heap = self._ready[queue]
        while heap:
            negative, best_id, name = heap[0]
            host = self.hosts[name]
            if not self._current(queue, name, negative, best_id) or host.active >= self.connections:
                heapq.heappop(heap)
                continue
            if host.next_start > now:
                heapq.heappop(heap)
                heapq.heappush(self._sleeping, (host.next_start, name))
                continue
            if not self._in_order(-negative, queue):
                return None  # a better URL waits on a host that is busy or asleep
            heapq.heappop(heap)
            rows = self._queued_best(queue, name, 2)
            del self._best[(queue, name)]
            if len(rows) > 1:
                self._best[(queue, name)] = (rows[1][4], rows[1][0])
                self._push(self._all, queue, name)
            if not rows:
                self._queues_of[name].discard(queue)
                continue
            url_id, url, depth, parent_id, priority, tunnel = rows[0]
            self.db.execute("UPDATE urls SET state = ? WHERE id = ?", (IN_FLIGHT, url_id))
            host.active += 1
            self.size -= 1
            self.in_flight += 1
            self._offer(host, now)
            return Item(url_id, url, name, depth, parent_id, priority, tunnel, queue)
        return None

    def _queued_best(self, queue: str, name: str, count: int) -> list[tuple]:
        """(id, url, depth, parent id, priority, tunnel) of a host's ``count`` best queued URLs in a queue."""
        return self.db.execute(
            "SELECT id, url, depth, parent_id, priority, tunnel FROM urls WHERE queue = ? AND host = ? AND state = ?"
            " ORDER BY priority DESC, id LIMIT ?", (queue, name, QUEUED, count)).fetchall()

    def _in_order(self, priority: float, queue: str) -> bool:
        """Whether a URL of this priority may be handed out now, given the queue's best."""
        if self.order == "host-parallel":
            return True
        best = self.best(queue)
        return best is None or priority >= best - (self.band if self.order == "band" else 1e-9)

    def best(self, queue: str = "") -> float | None:
        """The priority of the best queued URL of a queue, over every host (ready or not)."""
        heap = self._all.get(queue)
        while heap:
            negative, best_id, name = heap[0]
            if self._current(queue, name, negative, best_id):
                return -negative
            heapq.heappop(heap)
        return None

    def _current(self, queue: str, name: str, negative: float, best_id: int) -> bool:
        """Whether a heap entry still stands for the host's best URL (and the host is not bad)."""
        return self._best.get((queue, name)) == (-negative, best_id) and self.hosts[name].status != BAD

    # -- exploration -------------------------------------------------------------------------

    def learn_cluster(self, item: Item, relevance: float) -> None:
        """The out-links of one page are a link cluster, their priorities one guess (best-first:
        all the page's score). As they are fetched, the guess for the rest becomes the posterior
        mean of how the fetched ones turned out, the strategy's priority a prior worth
        ``link_clusters`` pages: for a best-first link, (α·p + Σ relevance) / (α + n). In general
        each queued URL of the cluster keeps its own priority times the cluster's factor
        (α·b̄ + Σ relevance) / (α·b̄ + Σ b), b the priorities its fetched links had before the
        factor. So a table of contents scored 0.99 whose first links lead off the topic stops
        pouring the budget into them (call inside the page's transaction)."""
        parent = item.parent_id
        if self.link_clusters is None or parent is None or item.priority >= HEAD / 2:
            return
        pages, total, predicted, factor = self.db.execute(
            "SELECT pages, relevance, predicted, factor FROM link_clusters WHERE parent_id = ?", (parent,)
        ).fetchone() or (0, 0.0, 0.0, 1.0)
        pages, total, predicted = pages + 1, total + relevance, predicted + item.priority / factor
        prior = self.link_clusters * predicted / pages
        learnt = (prior + total) / (prior + predicted) if predicted > 1e-9 else 1.0
        moved = abs(learnt / factor - 1) > CLUSTER_STEP  # else the queued URLs keep the factor they have
        self.db.execute("INSERT OR REPLACE INTO link_clusters (parent_id, pages, relevance, predicted, factor)"
                        " VALUES (?, ?, ?, ?, ?)", (parent, pages, total, predicted, learnt if moved else factor))
        if moved:
            self._scale_cluster(parent, learnt / factor)

    def _scale_cluster(self, parent: int, ratio: float) -> None:
        """Multiply the priorities of a cluster's queued URLs (not those promoted to the head) and
        keep the hosts' best URLs true: a host whose best was one of them is read again."""
        rows = self.db.execute(f"SELECT id, queue, host, priority FROM urls WHERE parent_id = ? AND state = {QUEUED}"
                               f" AND priority < {HEAD / 2}", (parent,)).fetchall()
        self.db.executemany("UPDATE urls SET priority = ? WHERE id = ?", [(p * ratio, i) for i, _, _, p in rows])
        stale = set()
        for url_id, queue, name, priority in rows:
            best = self._best.get((queue, name))
            if best is not None and best[1] == url_id and ratio < 1:
                stale.add((queue, name))
            elif best is None or priority * ratio > best[0]:
                self._raise(queue, self.hosts[name], priority * ratio, url_id)
        for queue, name in stale:
            self._refresh(queue, name)

    def reapply_clusters(self) -> int:
        """After queued URLs got new priorities from the strategy (the apprentice's re-scoring), the
        link clusters' factors apply to them again (call :meth:`resync` after the transaction)."""
        if self.link_clusters is None:
            return 0
        return self.db.execute(
            f"UPDATE urls SET priority = priority * (SELECT factor FROM link_clusters c WHERE c.parent_id = urls.parent_id)"
            f" WHERE state = {QUEUED} AND priority < {HEAD / 2} AND parent_id IN"
            f" (SELECT parent_id FROM link_clusters WHERE factor != 1.0)").rowcount

    def _refresh(self, queue: str, name: str) -> None:
        """Read a host's best URL of a queue again after its priorities changed on disk."""
        rows = self._queued_best(queue, name, 1)
        if not rows:
            self._best.pop((queue, name), None)
            self._queues_of[name].discard(queue)
            return
        self._best[(queue, name)] = (rows[0][4], rows[0][0])
        self._push(self._all, queue, name)
        self._offer(self.hosts[name], time.monotonic(), (queue,))

    def seconds_to_next(self) -> float | None:
        """How long until a sleeping host wakes; None if none sleeps."""
        if not self._sleeping:
            return None
        return max(0.0, self._sleeping[0][0] - time.monotonic())

    def finish(self, item: Item, refused: str | None = None) -> None:
        """The URL has been handled (call inside the page's transaction). A URL ``refused``
        (robots.txt, policy, MIME type, size) was not a fetch: it keeps the reason and does not
        count toward the budget."""
        self.db.execute("UPDATE urls SET state = ?, skip_reason = ? WHERE id = ?", (DONE, refused, item.url_id))
        self.done += refused is None

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
        for queue in self._queues_of.pop(name, set()):
            self._best.pop((queue, name), None)
        return dropped

    # -- reorganisation (BINGO!) ---------------------------------------------------------------

    def trim(self, max_queued: int) -> int:
        """BINGO!'s bounded queue: beyond ``max_queued`` URLs in a queue (each topic's, with
        per-topic queues) the lowest-priority ones are dropped; a later link may queue them again."""
        dropped = self.db.execute(
            "UPDATE urls SET state = ?, skip_reason = ? WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER"
            " (PARTITION BY queue ORDER BY priority DESC, id) AS rank FROM urls WHERE state = ?) WHERE rank > ?)",
            (SKIPPED, QUEUE_FULL, QUEUED, max_queued)).rowcount
        self.size -= dropped
        return dropped

    def requeue(self, rows: list[tuple[float, int]]) -> int:
        """Queue again skipped URLs given as (priority, id), unless their host has gone bad
        (call :meth:`resync` after the transaction)."""
        return self.db.executemany(
            f"UPDATE urls SET state = {QUEUED}, skip_reason = NULL, priority = ? WHERE id = ? AND state = {SKIPPED}"
            f" AND host NOT IN (SELECT host FROM hosts WHERE status = '{BAD}')", rows).rowcount

    def promote(self, priorities: dict[int, float]) -> int:
        """Put not-yet-fetched URLs at the head of the frontier (BINGO!'s best hubs' links):
        priority HEAD + the given score; a URL the crawl policy had left aside (not one refused
        by nofollow or max_depth) is queued. Call :meth:`resync` after the transaction."""
        rows = [(HEAD + p, url_id) for url_id, p in priorities.items()]
        return self.db.executemany(
            f"UPDATE urls SET state = {QUEUED}, skip_reason = NULL, priority = ? WHERE id = ?"
            f" AND (state = {QUEUED} OR (state = {SKIPPED} AND skip_reason IN ('{TUNNEL_END}', '{OUT_OF_PHASE}',"
            f" '{QUEUE_FULL}'))) AND host NOT IN (SELECT host FROM hosts WHERE status = '{BAD}')", rows).rowcount

    # -- host heaps --------------------------------------------------------------------------

    def _raise(self, queue: str, host: Host, priority: float, url_id: int) -> None:
        best = self._best.get((queue, host.name))
        if best is None or priority > best[0]:
            self._best[(queue, host.name)] = (priority, url_id)
            self._queues_of[host.name].add(queue)
            self._push(self._all, queue, host.name)
            self._offer(host, time.monotonic(), (queue,))

    def _push(self, heaps: dict[str, list], queue: str, name: str) -> None:
        """Add the host's current best of the queue to one of the heaps; entries gone stale are
        dropped when they surface, and the heap is rebuilt (without them, and once per host) when
        they outnumber the live ones."""
        priority, url_id = self._best[(queue, name)]
        heap = heaps.setdefault(queue, [])
        heapq.heappush(heap, (-priority, url_id, name))
        if len(heap) > 1000 + 4 * len(self._queues_of):
            heap[:] = {entry for entry in heap if self._current(queue, entry[2], entry[0], entry[1])}
            heapq.heapify(heap)

    def _offer(self, host: Host, now: float, queues=None) -> None:
        """Put the host in the ready heaps of its queues (or only ``queues``), or to sleep."""
        if host.status == BAD or host.active >= self.connections or not self._queues_of.get(host.name):
            return
        if host.next_start > now:
            heapq.heappush(self._sleeping, (host.next_start, host.name))
            return
        for queue in self._queues_of[host.name] if queues is None else queues:
            if (queue, host.name) in self._best:
                self._push(self._ready, queue, host.name)
