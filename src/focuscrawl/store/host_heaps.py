"""The SQLite frontier's memory of hosts: one small record per host, whatever the number of URLs
on disk. As in Mercator's back queues, hosts sit in heaps: *ready* by the priority of their best
queued URL, *sleeping* by the time their politeness interval ends; a third heap holds every
host with queued URLs by its best, the frontier's best for the hand-out order. Each heap is
kept per queue (one queue "", or BINGO!'s sub-queue per topic).

A host's learnt factor (:class:`~.clusters.LinkClusters`) lives here, not in its URLs' rows: it
scales all of them alike, so it leaves their order within the host as it is and only moves the
host's best among the others'. A URL's priority on disk is the strategy's times its link
cluster's factor; the heaps order hosts by that times the host's factor (``effective``), and a
new factor costs a few heap entries instead of an update of every queued URL of the host (one
to two thousand on a documentation site, 0.1–0.25 s of a 1 000-page crawl's main process)."""

from __future__ import annotations

import bisect
import heapq
import time
from collections import defaultdict

from focuscrawl.fetch.hosts import BAD, Host, Hosts
from focuscrawl.frontier import HEAD


class HostHeaps:
    def __init__(self, hosts: Hosts, order: str, band: float):
        self.hosts = hosts
        self.connections = hosts.connections
        self.order, self.band = order, band
        self.best_of: dict[tuple[str, str], tuple[float, int]] = {}  # (queue, host) -> (effective priority, id) of its best URL
        self.factors: dict[str, float] = {}  # host -> its learnt factor (none: 1)
        self.queues_of: dict[str, set[str]] = defaultdict(set)  # host -> queues it has URLs in
        self._ready: dict[str, list[tuple[float, int, str]]] = {}  # queue -> heap of ready hosts by best priority
        self._all: dict[str, list[tuple[float, int, str]]] = {}  # queue -> heap of every host by best priority
        self._sleeping: list[tuple[float, str]] = []
        self._turn = ""  # the queue served last

    def clear(self) -> None:
        self.best_of.clear()
        self.queues_of.clear()
        self._ready.clear()
        self._all.clear()

    def effective(self, name: str, priority: float) -> float:
        """A URL's priority as it competes with other hosts': its own (on disk) times its host's
        factor; a URL promoted to the head keeps its own."""
        return priority if priority >= HEAD / 2 else priority * self.factors.get(name, 1.0)

    def rescale(self, name: str, factor: float) -> None:
        """The host's factor is now ``factor``: its bests move, in every queue it has URLs in."""
        ratio = factor / self.factors.get(name, 1.0)
        self.factors[name] = factor
        for queue in self.queues_of.get(name, ()):
            priority, url_id = self.best_of[(queue, name)]
            if priority < HEAD / 2:
                self.best_of[(queue, name)] = (priority * ratio, url_id)
                self._push(self._all, queue, name)
        self.offer(self.hosts[name], time.monotonic())

    def raise_best(self, queue: str, host: Host, priority: float, url_id: int) -> None:
        """A URL of the host was queued (or raised) at ``priority`` (its own): it may be the host's new best."""
        priority = self.effective(host.name, priority)
        best = self.best_of.get((queue, host.name))
        if best is None or priority > best[0]:
            self.best_of[(queue, host.name)] = (priority, url_id)
            self.queues_of[host.name].add(queue)
            self._push(self._all, queue, host.name)
            self.offer(host, time.monotonic(), (queue,))

    def set_best(self, queue: str, name: str, best: tuple[float, int] | None) -> None:
        """The host's best URL of the queue as read from disk, (priority, id) (None: it has none left)."""
        if best is None:
            self.best_of.pop((queue, name), None)
            self.queues_of[name].discard(queue)
            return
        self.best_of[(queue, name)] = (self.effective(name, best[0]), best[1])
        self._push(self._all, queue, name)

    def forget(self, name: str) -> None:
        """A host gone bad: none of its URLs is handed out any more."""
        for queue in self.queues_of.pop(name, set()):
            self.best_of.pop((queue, name), None)

    def queues_in_turn(self, now: float) -> list[str]:
        """Wake the hosts whose interval has passed; the queues with ready hosts, the one after
        the queue served last first (round-robin)."""
        while self._sleeping and self._sleeping[0][0] <= now:
            self.offer(self.hosts[heapq.heappop(self._sleeping)[1]], now)
        queues = sorted(q for q, heap in self._ready.items() if heap)
        after = bisect.bisect_right(queues, self._turn)
        return queues[after:] + queues[:after]

    def served(self, queue: str) -> None:
        self._turn = queue

    def next_host(self, queue: str, now: float) -> str | None:
        """Take the ready host whose best URL goes next, if the order lets it go: stale entries,
        hosts at their connection limit and hosts not awake yet leave the heap on the way."""
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
            return name
        return None

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
        return self.best_of.get((queue, name)) == (-negative, best_id) and self.hosts[name].status != BAD

    def seconds_to_next(self) -> float | None:
        """How long until a sleeping host wakes; None if none sleeps."""
        if not self._sleeping:
            return None
        return max(0.0, self._sleeping[0][0] - time.monotonic())

    def _push(self, heaps: dict[str, list], queue: str, name: str) -> None:
        """Add the host's current best of the queue to one of the heaps; entries gone stale are
        dropped when they surface, and the heap is rebuilt (without them, and once per host) when
        they outnumber the live ones."""
        priority, url_id = self.best_of[(queue, name)]
        heap = heaps.setdefault(queue, [])
        heapq.heappush(heap, (-priority, url_id, name))
        if len(heap) > 1000 + 4 * len(self.queues_of):
            heap[:] = {entry for entry in heap if self._current(queue, entry[2], entry[0], entry[1])}
            heapq.heapify(heap)

    def offer(self, host: Host, now: float, queues=None) -> None:
        """Put the host in the ready heaps of its queues (or only ``queues``), or to sleep."""
        if host.status == BAD or host.active >= self.connections or not self.queues_of.get(host.name):
            return
        if host.next_start > now:
            heapq.heappush(self._sleeping, (host.next_start, host.name))
            return
        for queue in self.queues_of[host.name] if queues is None else queues:
            if (queue, host.name) in self.best_of:
                self._push(self._ready, queue, host.name)
