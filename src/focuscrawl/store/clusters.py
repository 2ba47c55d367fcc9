"""Exploration against greedy collapse: the out-links of one page are a link cluster whose
priorities are one guess, corrected as its links are fetched (a posterior mean, table
``link_clusters``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from focuscrawl.fetch.hosts import Hosts
from focuscrawl.frontier import CLUSTER_STEP, HEAD, Item
from focuscrawl.store.host_heaps import HostHeaps
from focuscrawl.store.schema import QUEUED
from focuscrawl.store.seen_set import SeenSet


class LinkClusters:
    def __init__(self, db: sqlite3.Connection, hosts: Hosts, heaps: HostHeaps, prior: float,
                 refresh: Callable[[str, str], None], seen: Callable[[], SeenSet]):
        """``refresh(queue, host)``: read a host's best URL of a queue again from disk; ``seen()``:
        the frontier's seen set, told of new priorities."""
        self.db, self.hosts, self.heaps, self.prior, self.refresh, self.seen = db, hosts, heaps, prior, refresh, seen

    def learn(self, item: Item, relevance: float) -> None:
        """The out-links of one page are a link cluster, their priorities one guess (best-first:
        all the page's score). As they are fetched, the guess for the rest becomes the posterior
        mean of how the fetched ones turned out, the strategy's priority a prior worth ``prior``
        pages (α, ``frontier.link_clusters``): for a best-first link, (α·p + Σ relevance) / (α + n).
        In general each queued URL of the cluster keeps its own priority times the cluster's factor
        (α·b̄ + Σ relevance) / (α·b̄ + Σ b), b the priorities its fetched links had before the
        factor. So a table of contents scored 0.99 whose first links lead off the topic stops
        pouring the budget into them (call inside the page's transaction)."""
        parent = item.parent_id
        if parent is None or item.priority >= HEAD / 2:
            return
        pages, total, predicted, factor = self.db.execute(
            "SELECT pages, relevance, predicted, factor FROM link_clusters WHERE parent_id = ?", (parent,)
        ).fetchone() or (0, 0.0, 0.0, 1.0)
        pages, total, predicted = pages + 1, total + relevance, predicted + item.priority / factor
        prior = self.prior * predicted / pages
        learnt = (prior + total) / (prior + predicted) if predicted > 1e-9 else 1.0
        moved = abs(learnt / factor - 1) > CLUSTER_STEP  # else the queued URLs keep the factor they have
        self.db.execute("INSERT OR REPLACE INTO link_clusters (parent_id, pages, relevance, predicted, factor)"
                        " VALUES (?, ?, ?, ?, ?)", (parent, pages, total, predicted, learnt if moved else factor))
        if moved:
            self._scale(parent, learnt / factor)

    def _scale(self, parent: int, ratio: float) -> None:
        """Multiply the priorities of a cluster's queued URLs (not those promoted to the head) and
        keep the hosts' best URLs true: a host whose best was one of them is read again."""
        rows = self.db.execute(f"UPDATE urls SET priority = priority * ? WHERE parent_id = ? AND state = {QUEUED}"
                               f" AND priority < {HEAD / 2} RETURNING id, queue, host, priority",
                               (ratio, parent)).fetchall()  # (one statement: a fifth less time than a read and a write per URL)
        self.seen().set_priorities([i for i, _, _, _ in rows], [p for _, _, _, p in rows])
        stale = set()
        for url_id, queue, name, priority in rows:
            best = self.heaps.best_of.get((queue, name))
            if best is not None and best[1] == url_id and ratio < 1:
                stale.add((queue, name))
            elif best is None or priority > best[0]:
                self.heaps.raise_best(queue, self.hosts[name], priority, url_id)
        for queue, name in stale:
            self.refresh(queue, name)

    def reapply(self) -> int:
        """After queued URLs got new priorities from the strategy (the apprentice's re-scoring), the
        link clusters' factors apply to them again (call the frontier's ``resync`` after the transaction)."""
        return self.db.execute(
            f"UPDATE urls SET priority = priority * (SELECT factor FROM link_clusters c WHERE c.parent_id = urls.parent_id)"
            f" WHERE state = {QUEUED} AND priority < {HEAD / 2} AND parent_id IN"
            f" (SELECT parent_id FROM link_clusters WHERE factor != 1.0)").rowcount
