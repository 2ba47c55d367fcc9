"""Exploration against greedy collapse: the out-links of one page are a link cluster whose
priorities are one guess, corrected as its links are fetched (a posterior mean, table
``link_clusters``); the URLs of one host are a cluster too (table ``host_clusters``), so that a
site whose pages keep scoring below what their links promised loses its place to the others.
A link cluster's factor is in its queued URLs' priorities; a host's is kept with the host
(:class:`~.host_heaps.HostHeaps`), as it moves none of them within the host."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from focuscrawl.fetch.hosts import Hosts
from focuscrawl.frontier import CLUSTER_STEP, HEAD, Item
from focuscrawl.store.host_heaps import HostHeaps
from focuscrawl.store.schema import QUEUED
from focuscrawl.store.seen_set import SeenSet

NO_CLUSTER = (0, 0.0, 0.0, 1.0)  # a cluster none of whose URLs was fetched: pages, relevance, predicted, factor
# what a queued URL's priority is multiplied by when the strategy gives it a new one (in SQL, of ``urls``)
LINK_FACTOR = "COALESCE((SELECT c.factor FROM link_clusters c WHERE c.parent_id = urls.parent_id), 1.0)"
HOST_FACTOR = "COALESCE((SELECT h.factor FROM host_clusters h WHERE h.host = urls.host), 1.0)"


def learnt_factor(pages: int, relevance: float, predicted: float, alpha: float, ratio: float = 1.0) -> float:
    """A cluster's factor once ``pages`` of its URLs were fetched, their scores summing to
    ``relevance`` and their priorities (before the factor) to ``predicted``: the posterior mean of
    its ratio of scores to priorities, the crawl's ``ratio`` a prior worth α pages, against that
    ratio. Best-first's priorities are scores (a page's links take its score): the ratio is 1, and
    a cluster falls as its pages score below what their links promised. The apprentice's are
    Pr(a high target) on a scale of their own (on networking its pages' priorities averaged 0.8,
    their scores 0.27): against 1, every cluster the crawl entered fell below every cluster it
    had not, whatever its pages were worth, and the crawl spread itself over new hosts; against
    the crawl's own ratio (``crawl_ratio``), a cluster falls only as it turns out worse than the
    crawl's average."""
    if predicted <= 1e-9:
        return 1.0
    prior = alpha * predicted / pages
    return (prior * ratio + relevance) / (prior + predicted) / ratio


def crawl_ratio(relevance: float, predicted: float) -> float:
    """The crawl's ratio of its fetched pages' scores to their priorities (1 before it has one)."""
    return relevance / predicted if relevance > 1e-9 and predicted > 1e-9 else 1.0


def totals_query(host_clusters: float | None) -> str:
    """The crawl's fetched pages' scores and strategy's priorities (before the factors), summed:
    a host cluster's priorities are the strategy's own; without host clusters, a link cluster's."""
    table = "host_clusters" if host_clusters else "link_clusters"
    return f"SELECT COALESCE(SUM(relevance), 0), COALESCE(SUM(predicted), 0), COALESCE(SUM(pages), 0) FROM {table}"


class LinkClusters:
    def __init__(self, db: sqlite3.Connection, hosts: Hosts, heaps: HostHeaps, prior: float | None,
                 host_prior: float | None, refresh: Callable[[str, str], None], seen: Callable[[], SeenSet],
                 relative: bool = False):
        """``prior`` and ``host_prior``: the link clusters' and the host clusters' α (None: not
        learnt); ``refresh(queue, host)``: read a host's best URL of a queue again from disk;
        ``seen()``: the frontier's seen set, told of new priorities; ``relative``: the strategy's
        priorities are on a scale of their own (:func:`learnt_factor`)."""
        self.db, self.hosts, self.heaps, self.refresh, self.seen = db, hosts, heaps, refresh, seen
        self.prior, self.host_prior, self.relative = prior, host_prior, relative
        self.totals = [0.0, 0.0]  # when relative: the fetched pages' scores and strategy's priorities, summed
        self.reread()

    def reread(self) -> None:
        """The hosts' factors and, when relative, the crawl's totals as the database holds them
        (at the start, and after a rolled-back page)."""
        self.heaps.factors = dict(self.db.execute("SELECT host, factor FROM host_clusters"))
        if self.relative:
            self.totals = list(self.db.execute(totals_query(self.host_prior)).fetchone()[:2])

    def learn(self, item: Item, relevance: float) -> None:
        """The out-links of one page are a link cluster, their priorities one guess (best-first:
        all the page's score). As they are fetched, the guess for the rest becomes the posterior
        mean of how the fetched ones turned out, the strategy's priority a prior worth ``prior``
        pages (α, ``frontier.link_clusters``): for a best-first link, (α·p + Σ relevance) / (α + n).
        In general each queued URL of the cluster keeps its own priority times the cluster's factor
        (α·b̄ + Σ relevance) / (α·b̄ + Σ b), b the priorities its fetched links had before the
        factor. So a table of contents scored 0.99 whose first links lead off the topic stops
        pouring the budget into them. A host's factor is learnt the same way (``host_prior``,
        ``frontier.host_clusters``), b the strategy's own priorities (before both factors: the
        link clusters correct what is left of it, and it never learns from theirs): on a site whose
        pages link each other at their own high scores while most turn out off the topic (a Java
        API's docs for a GUI topic: 473 of 1 243 pages at 0.43), a new link cluster starts at the
        host's factor instead of at the page's score (call inside the page's transaction)."""
        if item.priority >= HEAD / 2:
            return
        parent = item.parent_id
        linked = parent is not None and self.prior
        cluster = self._row("link_clusters", "parent_id", parent) if linked else NO_CLUSTER
        host = self._row("host_clusters", "host", item.host) if self.host_prior else NO_CLUSTER
        strategy_priority = item.priority / (cluster[3] * host[3])  # the strategy's own priority, before both factors
        expected = 1.0
        if self.relative:
            self.totals[0] += relevance
            self.totals[1] += strategy_priority
            expected = crawl_ratio(*self.totals)
        if self.host_prior:
            ratio = self._learn("host_clusters", "host", item.host, host, strategy_priority, relevance, self.host_prior,
                                expected)
            if ratio is not None:
                self.heaps.rescale(item.host, host[3] * ratio)
        if linked:
            ratio = self._learn("link_clusters", "parent_id", parent, cluster, item.priority / cluster[3], relevance,
                                self.prior, expected)
            if ratio is not None:
                self._scale(parent, ratio)

    def _row(self, table: str, column: str, key) -> tuple:
        """A cluster's (pages, relevance, predicted, factor)."""
        return self.db.execute(f"SELECT pages, relevance, predicted, factor FROM {table} WHERE {column} = ?",
                               (key,)).fetchone() or NO_CLUSTER

    def _learn(self, table: str, column: str, key, row: tuple, predicted_one: float, relevance: float,
               alpha: float, expected: float) -> float | None:
        """A fetched page of the cluster ``key`` (its row): its factor learnt; by how much its queued
        URLs are to be scaled (None: it did not move)."""
        pages, total, predicted, factor = row
        pages, total, predicted = pages + 1, total + relevance, predicted + predicted_one
        learnt = learnt_factor(pages, total, predicted, alpha, expected)
        moved = abs(learnt / factor - 1) > CLUSTER_STEP  # else the queued URLs keep the factor they have
        self.db.execute(f"INSERT OR REPLACE INTO {table} ({column}, pages, relevance, predicted, factor)"
                        " VALUES (?, ?, ?, ?, ?)", (key, pages, total, predicted, learnt if moved else factor))
        return learnt / factor if moved else None

    def _scale(self, parent: int, ratio: float) -> None:
        """Multiply the priorities of a link cluster's queued URLs (not those promoted to the head)
        and keep the hosts' best URLs true: a host whose best was one of them is read again."""
        rows = self.db.execute(f"UPDATE urls SET priority = priority * ? WHERE parent_id = ? AND state = {QUEUED}"
                               f" AND priority < {HEAD / 2} RETURNING id, queue, host, priority",
                               (ratio, parent)).fetchall()  # (one statement: a fifth less time than a read and a write per URL)
        self.seen().set_priorities([i for i, _, _, _ in rows], [p for _, _, _, p in rows])
        stale = set()
        for url_id, queue, name, priority in rows:
            best = self.heaps.best_of.get((queue, name))
            if best is not None and best[1] == url_id and ratio < 1:
                stale.add((queue, name))
            else:  # (the heaps compare it as the host's URLs compete: times its factor)
                self.heaps.raise_best(queue, self.hosts[name], priority, url_id)
        for queue, name in stale:
            self.refresh(queue, name)
