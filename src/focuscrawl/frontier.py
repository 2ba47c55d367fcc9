"""How the crawl orders its URLs: the strategies' priorities, the record of a handed-out URL,
and the frontier's interface. The frontier itself is a backend of the store
(:class:`focuscrawl.store.frontier.SqliteFrontier`): the order survives parallel fetching
and politeness there, next to the queue it orders."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from focuscrawl.fetch.hosts import BAD, Hosts

# a skipped URL may still be queued when a later link admits it
TUNNEL_END = "beyond the tunnelling distance"
OUT_OF_PHASE = "outside the learning phase"  # queued again when the harvesting phase starts
QUEUE_FULL = "dropped from a full queue"
REVIVABLE = ("nofollow", "beyond max depth", TUNNEL_END, OUT_OF_PHASE, QUEUE_FULL)
HEAD = 1e6  # a promoted URL's priority is HEAD + its score: ahead of every strategy's priorities
CLUSTER_STEP = 0.05  # a link cluster's queued URLs are re-prioritised when its factor moves by more than 5 %


def own_priority(priority: float) -> float:
    """A URL's priority without a promotion to the head (what its links may inherit)."""
    return priority - HEAD if priority >= HEAD / 2 else priority


def bfs_priority(parent_relevance: float | None, depth: int, url: str, parent_priority: float = 0.0) -> float:
    """Breadth-first (BINGO!'s 1/L): shallower first, first found first (ties go to the lower id)."""
    return -float(depth)


def dfs_priority(parent_relevance: float | None, depth: int, url: str, parent_priority: float = 0.0) -> float:
    """Depth-first (BINGO!'s L): deeper first; restrict budget.max_depth (3 to 5, §2.3.3)."""
    return float(depth)


def best_first_priority(parent_relevance: float | None, depth: int, url: str, parent_priority: float = 0.0) -> float:
    """Chakrabarti's baseline and BINGO!'s "classifier" strategy: an out-link of u inherits Pr(relevant | u)."""
    return parent_relevance if parent_relevance is not None else 0.0


def classifier_bfs_priority(parent_relevance: float | None, depth: int, url: str, parent_priority: float = 0.0) -> float:
    """BINGO!'s "classifier, breadth-first": conf(u) · 1/L, the nearest vicinity of the seeds first."""
    return best_first_priority(parent_relevance, depth, url) / max(depth, 1)


def classifier_dfs_priority(parent_relevance: float | None, depth: int, url: str, parent_priority: float = 0.0) -> float:
    """BINGO!'s "classifier, depth-first": conf(u) · L, fast focused sampling."""
    return best_first_priority(parent_relevance, depth, url) * max(depth, 1)


def bookmark_priority(parent_relevance: float | None, depth: int, url: str, parent_priority: float = 0.0) -> float:
    """BINGO!'s bookmark-based "classifier" strategy: conf(b) of the seed b the path started at,
    i.e. a seed's links take the seed's score and every later link its parent's priority."""
    return best_first_priority(parent_relevance, depth, url) if depth <= 1 else parent_priority


# A strategy gives a discovered URL its priority from its parent's relevance, its depth, the URL
# itself and its parent's own priority; evaluation adds reference strategies (oracles).
STRATEGIES = {"bfs": bfs_priority, "dfs": dfs_priority, "best-first": best_first_priority,
              "classifier-bfs": classifier_bfs_priority, "classifier-dfs": classifier_dfs_priority,
              "bookmark": bookmark_priority}


class Discovered(NamedTuple):
    """A URL found on a page (or a redirect's target), as the frontier is asked to queue it."""

    url: str
    host: str
    priority: float
    skip_reason: str | None  # why it is only remembered, not queued (None: queue it)


def once_per_url(found: list[Discovered], hosts: Hosts) -> list[Discovered]:
    """A page's links with each URL once, as queueing them one by one would leave the frontier
    (a documentation page links to a quarter as many URLs as it has links: its menu, its table of
    contents and its text name the same pages). A URL some link admits is admitted with the best
    of those links' priorities; one none admits keeps its first link. Only a first link skipped
    for a reason no later link lifts (not REVIVABLE) keeps its place before the admitting one.
    No link admits a URL of a host marked bad."""
    distinct = dict.fromkeys(found)  # (links alike in every field, in C: the rest is per distinct link)
    bad = {host for host in {host for _, host, _, reason in distinct if reason is None} if hosts[host].status == BAD}
    first: dict[str, Discovered] = {}
    best: dict[str, float] = {}
    for url, host, priority, reason in distinct:
        if reason is None and host in bad:
            reason = "host marked bad"
        if url not in first:
            first[url] = Discovered(url, host, priority, reason)
        if reason is None and priority > best.get(url, -math.inf):
            best[url] = priority
    once = []
    for url, link in first.items():
        if url not in best:
            once.append(link)
            continue
        if link.skip_reason is not None and link.skip_reason not in REVIVABLE:
            once.append(link)
        once.append(Discovered(url, link.host, best[url], None))
    return once


@dataclass(slots=True)
class Seen:
    """A URL the frontier knows (the seen set), as a page's links are checked against it."""

    url_id: int
    state: int  # queued, in flight, done or skipped (``focuscrawl.store.schema``)
    priority: float
    skip_reason: str | None  # (one a later link may lift, REVIVABLE; others may be given as one placeholder)


@dataclass(slots=True)
class Item:
    """A URL handed out to a connection."""

    url_id: int
    url: str
    host: str
    depth: int
    parent_id: int | None
    priority: float
    tunnel: int = 0
    queue: str = ""
    connected: bool = True  # holds one of its host's connections (until ``hang_up`` or ``release``)


class Frontier(Protocol):
    """What the crawl asks of a frontier: the seen set and the queue of every discovered URL,
    handed out in priority order as politeness allows. The SQLite backend is
    :class:`focuscrawl.store.frontier.SqliteFrontier`."""

    size: int  # URLs queued
    in_flight: int
    done: int  # URLs fetched over the whole crawl, resumes included (refused ones are not)

    def load(self) -> int: ...
    def resync(self) -> None: ...
    def add(self, found: list[Discovered], depth: int, parent_id: int | None,
            known: dict[str, Seen] | None = None, tunnel: int = 0, queue: str = "") -> list[int]: ...
    def known(self, urls: list[str]) -> dict[str, Seen]: ...
    def mark_fetched_alias(self, url: str, host: str, depth: int, parent_id: int | None) -> None: ...
    def next_ready(self) -> Item | None: ...
    def seconds_to_next(self) -> float | None: ...
    def exhausted(self) -> bool: ...  # nothing queued, and nothing in flight that may queue more
    def claimed(self) -> int: ...  # URLs fetched or being fetched over the whole crawl (the page budget's count)
    def finish(self, item: Item, refused: str | None = None) -> None: ...
    def hang_up(self, item: Item) -> None: ...  # its fetch is over: the host's connection is free
    def release(self, item: Item) -> None: ...  # its page is stored or abandoned: no longer in flight
    def drop_host(self, name: str) -> int: ...
    # learning: exploration, BINGO!'s bounded queues and hub promotion, re-scoring
    def learn_cluster(self, item: Item, relevance: float) -> None: ...
    def trim(self, max_queued: int) -> int: ...
    def requeue(self, rows: list[tuple[float, int]]) -> int: ...
    def promote(self, priorities: dict[int, float]) -> int: ...
