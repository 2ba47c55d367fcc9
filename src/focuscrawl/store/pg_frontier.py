"""The shared frontier on PostgreSQL: many stateless workers (processes or machines) hand out
one crawl's URLs, without a coordinator of our own.

A worker *leases a host*: the ready host whose best queued URL is the best of the frontier
(``FOR UPDATE SKIP LOCKED``, so workers never wait on each other), and takes a batch of that
host's best URLs, marked in flight under its name. While the lease holds, no other worker asks
that host: its politeness interval and connection limit are the lessee's, kept by the local
:class:`~focuscrawl.fetch.hosts.Hosts` clock, and when the lease ends the next allowed start is
written back, so the interval holds across the hand-over too. A worker renews its leases as it
goes; a lease that expires (the worker was killed) frees the host, its URLs in flight queued
again (every worker looks for expired leases about once a second). A worker holds at most its
share of the hosts with URLs to fetch among the live workers. The seen set is a unique
index on a 64-bit hash of the URL, on disk.
All times are the database's clock, so workers on several machines agree.

One crawl is one PostgreSQL schema (``crawl_<name>``), created on first use.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import time
from dataclasses import dataclass, field

import psycopg

from focuscrawl.fetch.hosts import BAD, Hosts
from focuscrawl.frontier import (CLUSTER_STEP, HEAD, OUT_OF_PHASE, QUEUE_FULL, REVIVABLE, TUNNEL_END, Discovered, Item,
                                 Seen, once_per_url)
from focuscrawl.store.clusters import HOST_FACTOR, LINK_FACTOR, crawl_ratio, learnt_factor, totals_query
from focuscrawl.store.inherited import not_inherited
from focuscrawl.store.schema import DONE, IN_FLIGHT, QUEUED, SKIPPED

NOW = "extract(epoch from clock_timestamp())"
# a shared crawl's queued URLs hold both of their clusters' factors (the SQLite frontier keeps a host's with the host)
CLUSTERS_LEARNT = f"{LINK_FACTOR} * {HOST_FACTOR}"
COUNT_CAP = 10_000
RATIO_LEARNS = 100  # pages a worker learns its clusters from between readings of the crawl's ratio (relative clusters)
RECOUNT_SECONDS = 10.0
# The best priority queued on any host: the free hosts' best by their index, the leased ones' (a
# few) apart; MAX over the whole table read 100 000 hosts' rows (12-18 ms, once a second a worker)
BEST_QUEUED = ("GREATEST((SELECT best FROM hosts WHERE best IS NOT NULL AND lease_owner IS NULL AND status <> 'bad'"
               " ORDER BY best DESC LIMIT 1),"
               " (SELECT MAX(best) FROM hosts WHERE lease_owner IS NOT NULL AND status <> 'bad'))")
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS hosts (
    host text PRIMARY KEY,
    best double precision,                            -- priority of its best queued URL; NULL: none queued
    next_allowed double precision NOT NULL DEFAULT 0, -- no request may start before (epoch seconds)
    lease_owner text,
    lease_until double precision NOT NULL DEFAULT 0,
    status text NOT NULL DEFAULT 'ok',
    failures integer NOT NULL DEFAULT 0,              -- as the fetcher last counted them (the repository's record_host)
    crawl_delay double precision
);
CREATE INDEX IF NOT EXISTS hosts_free_by_best ON hosts (best DESC) WHERE best IS NOT NULL AND lease_owner IS NULL;
CREATE INDEX IF NOT EXISTS hosts_leased ON hosts (lease_until) WHERE lease_owner IS NOT NULL;
CREATE TABLE IF NOT EXISTS urls (
    id bigserial PRIMARY KEY,
    url_hash bigint NOT NULL UNIQUE,                  -- the seen set
    url text NOT NULL,
    host text NOT NULL,
    depth integer NOT NULL,
    parent_id bigint,
    priority double precision NOT NULL,
    state smallint NOT NULL,                          -- {QUEUED} queued, {IN_FLIGHT} in flight, {DONE} done, {SKIPPED} skipped
    skip_reason text,
    owner text,                                       -- the worker that has it in flight
    discovered_at double precision NOT NULL,
    tunnel integer NOT NULL DEFAULT 0,
    queue text NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS urls_queued ON urls (host, priority DESC, id) WHERE state = {QUEUED};
CREATE INDEX IF NOT EXISTS urls_in_flight ON urls (host) WHERE state = {IN_FLIGHT};
CREATE TABLE IF NOT EXISTS workers (
    worker text PRIMARY KEY,
    done bigint NOT NULL DEFAULT 0,                   -- URLs fetched (not refused) by this worker
    seen_at double precision NOT NULL,
    stopped_at double precision                       -- NULL while it runs
);
CREATE INDEX IF NOT EXISTS urls_queued_by_parent ON urls (parent_id) WHERE state = {QUEUED};  -- a link cluster's
CREATE TABLE IF NOT EXISTS link_clusters (  -- the out-links of one page: how those fetched turned out (FrontierSteps)
    parent_id bigint PRIMARY KEY,
    pages integer NOT NULL,
    relevance double precision NOT NULL,
    predicted double precision NOT NULL,
    factor double precision NOT NULL
);
CREATE TABLE IF NOT EXISTS host_clusters (  -- the URLs of one host: how those fetched turned out (FrontierSteps)
    host text PRIMARY KEY,
    pages integer NOT NULL,
    relevance double precision NOT NULL,
    predicted double precision NOT NULL,
    factor double precision NOT NULL
);
"""


URL_HASH_SQL = "('x' || left(md5({}), 16))::bit(64)::bigint"  # the same, computed by the server (bulk loads)


# workers running: one unseen for two minutes (a worker renews its leases every 10 s) was killed
LIVE_WORKERS = f"workers WHERE stopped_at IS NULL AND seen_at > {NOW} - 120"


def url_hash(url: str) -> int:
    """The first 64 bits of the URL's MD5, signed for PostgreSQL's bigint (``URL_HASH_SQL`` in
    SQL): a collision among 10 M URLs has odds of about 3e-6."""
    return int.from_bytes(hashlib.md5(url.encode()).digest()[:8], "big", signed=True)


def shown(dsn: str) -> str:
    """The DSN as messages show it: without its password."""
    return re.sub(r"(password=)[^&\s]+|(://[^/@:]*:)[^/@]*(@)", lambda m: f"{m[1] or m[2]}***{m[3] or ''}", dsn)


def schema_of(crawl: str) -> str:
    """The PostgreSQL schema holding a crawl's tables."""
    if not re.fullmatch(r"[a-z0-9_]{1,40}", crawl):
        raise ValueError(f"crawl name {crawl!r}: use 1 to 40 of a-z, 0-9 and _")
    return f"crawl_{crawl}"


def connect(dsn: str, crawl: str) -> psycopg.Connection:
    """A connection whose tables are the crawl's (its schema, created if new); autocommit: every
    statement below is its own transaction unless grouped."""
    schema = schema_of(crawl)
    db = not_inherited(psycopg.connect(dsn, autocommit=True), _close_socket)
    db.execute(f"SET search_path TO {schema}")
    create_tables(db, schema, "host_clusters", f"CREATE SCHEMA IF NOT EXISTS {schema}; {SCHEMA}")
    return db


def _close_socket(db: psycopg.Connection) -> None:
    """A forked child's copy of the connection's socket (psycopg never closes a connection from a
    process that did not open it)."""
    try:
        os.close(db.pgconn.socket)
    except (OSError, psycopg.Error):  # closed already
        pass


def create_tables(db: psycopg.Connection, schema: str, last: str, ddl: str) -> None:
    """Run ``ddl`` (whose ``last`` table it creates last) unless it ran: once per crawl, under a
    lock for workers starting together. Never again once the crawl runs: CREATE INDEX IF NOT
    EXISTS locks its table even when the index exists, and deadlocked with workers' pages."""
    def missing() -> bool:
        return db.execute("SELECT to_regclass(%s) IS NULL", (f"{schema}.{last}",)).fetchone()[0]

    if missing():
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema,))
            if missing():
                db.execute(ddl)


# URLs in flight on the hosts ``host {}`` names queued again; rows a page's transaction holds are
# skipped, never waited for
ORPHANS = (f"UPDATE urls SET state = {QUEUED}, owner = NULL WHERE id IN (SELECT id FROM urls WHERE host {{}}"
           f" AND state = {IN_FLIGHT} FOR UPDATE SKIP LOCKED)")

# A lease in one statement (where six round trips used to wait their turn on busy cores): the
# best free host whose interval has passed, if its best URL is within the order's bar; its URLs in
# flight that no live worker holds queued again (a reaping skipped them: taken at its next lease);
# its best URLs within the bar taken; the host leased if any were, its best counted again. The
# parts see the tables as they were before it, hence the taken URLs left out of the count; URLs
# another worker queued there after it began and before it locked the host are not counted (a
# two-round-trip lease measured a hand-out p99 twice as long): the host's best is counted again
# when the lease is given back, and at once when the lease took nothing (``_lease``).
LEASE = (
    f"WITH h AS (SELECT host FROM hosts WHERE best >= %(bar)s AND lease_owner IS NULL AND next_allowed <= {NOW}"
    f" AND status <> 'bad' ORDER BY best DESC LIMIT 1 FOR UPDATE SKIP LOCKED),"
    f" orphans AS ({ORPHANS.format('= (SELECT host FROM h)')} RETURNING priority),"
    f" taken AS (UPDATE urls SET state = {IN_FLIGHT}, owner = %(worker)s WHERE id IN (SELECT id FROM urls WHERE host ="
    f" (SELECT host FROM h) AND state = {QUEUED} AND priority >= %(bar)s ORDER BY priority DESC, id LIMIT %(batch)s"
    f" FOR UPDATE SKIP LOCKED) RETURNING id, url, host, depth, parent_id, priority, tunnel, queue),"
    f" leased AS (UPDATE hosts SET lease_owner = CASE WHEN EXISTS (SELECT 1 FROM taken) THEN %(worker)s END,"
    f" lease_until = {NOW} + CASE WHEN EXISTS (SELECT 1 FROM taken) THEN %(seconds)s ELSE -1e9 END,"
    f" best = GREATEST((SELECT MAX(priority) FROM urls WHERE host = hosts.host AND state = {QUEUED} AND id NOT IN"
    f" (SELECT id FROM taken)), (SELECT MAX(priority) FROM orphans)) WHERE host = (SELECT host FROM h))"
    f" SELECT h.host, t.* FROM h LEFT JOIN taken AS t ON true")


def requeue_orphans(db: psycopg.Connection, hosts: list[str]) -> None:
    """URLs in flight on hosts no live worker holds, queued again."""
    db.execute(ORPHANS.format("= ANY(%s)"), (hosts,))


def hand_over_intervals(db: psycopg.Connection, hosts: Hosts) -> None:
    """Hosts this process asked outside a lease (the critic's examples): no worker asks them
    before their interval is over."""
    now = time.monotonic()
    waits = [(host.name, host.next_start - now) for host in hosts if host.next_start > now]
    if waits:
        db.execute(f"INSERT INTO hosts (host, next_allowed) SELECT h, {NOW} + w FROM unnest(%s::text[], %s::float8[])"
                   f" AS t(h, w) ORDER BY h ON CONFLICT (host) DO UPDATE SET next_allowed = GREATEST(hosts.next_allowed,"
                   f" EXCLUDED.next_allowed)", ([name for name, _ in waits], [wait for _, wait in waits]))


def recount_best(db: psycopg.Connection, hosts) -> None:
    """The hosts' best priority counted again from their queued URLs (some went, or fell)."""
    db.execute(f"UPDATE hosts SET best = (SELECT MAX(priority) FROM urls WHERE urls.host = hosts.host AND"
               f" state = {QUEUED}) WHERE host = ANY(%s)", (sorted(set(hosts)),))


def queue_again(db: psycopg.Connection, rows: list[tuple[float, int]], reasons: list[str] | None = None,
                queued_too: bool = False, learnt: bool = False) -> int:
    """URLs given as (priority, id) queued at that priority (``learnt``: times what their link
    cluster and their host have learnt, ``CLUSTERS_LEARNT``): skipped ones (for one of ``reasons``;
    None: for any) and, with ``queued_too``, queued ones; not on a host gone bad. Their hosts'
    best is raised; how many."""
    rows = sorted(rows, key=lambda row: row[1])
    queued = f"urls.state = {QUEUED} OR " if queued_too else ""
    priority = f"t.p * {CLUSTERS_LEARNT}" if learnt else "t.p"
    updated = db.execute(
        f"UPDATE urls SET state = {QUEUED}, skip_reason = NULL, priority = {priority} FROM unnest(%s::float8[], %s::bigint[])"
        f" AS t(p, id) WHERE urls.id = t.id AND ({queued}(urls.state = {SKIPPED} AND (%s OR urls.skip_reason = ANY(%s))))"
        f" AND urls.host NOT IN (SELECT host FROM hosts WHERE status = '{BAD}') RETURNING urls.host, urls.priority",
        ([p for p, _ in rows], [i for _, i in rows], reasons is None, reasons or [])).fetchall()
    best: dict[str, float] = {}
    for host, priority in updated:
        best[host] = max(best.get(host, priority), priority)
    hosts = sorted(best)
    db.execute("INSERT INTO hosts (host, best) SELECT * FROM unnest(%s::text[], %s::float8[]) ON CONFLICT (host)"
               " DO UPDATE SET best = GREATEST(hosts.best, EXCLUDED.best)", (hosts, [best[h] for h in hosts]))
    return len(updated)


class FrontierSteps:
    """What the learning steps ask of the shared frontier (the SQLite frontier's methods of the
    same names): BINGO!'s hubs' links to the head, the learning phase's leftovers queued, the
    link clusters."""

    db: psycopg.Connection
    cluster_prior: float | None  # frontier.link_clusters (α); None: no link clusters
    host_prior: float | None  # frontier.host_clusters (α); None: no host clusters
    relative_clusters: bool  # the strategy's priorities are on a scale of their own (clusters.learnt_factor)
    ratio: tuple[float, int]  # the crawl's ratio of scores to priorities as last read, and pages left till re-read

    def promote(self, priorities: dict[int, float]) -> int:
        return queue_again(self.db, [(HEAD + p, url_id) for url_id, p in priorities.items()],
                           [TUNNEL_END, OUT_OF_PHASE, QUEUE_FULL], queued_too=True)

    def requeue(self, rows: list[tuple[float, int]]) -> int:
        return queue_again(self.db, rows, learnt=True)

    def learn_cluster(self, item: Item, relevance: float) -> None:
        """The SQLite frontier's link and host clusters (:class:`~.clusters.LinkClusters`), shared:
        each worker's page updates its clusters' rows, which hold the others' until the page commits."""
        if item.priority >= HEAD / 2:
            return
        linked = self.cluster_prior is not None and item.parent_id is not None
        cluster = linked and self.db.execute("SELECT factor FROM link_clusters WHERE parent_id = %s",
                                             (item.parent_id,)).fetchone()
        cluster_factor = cluster[0] if cluster else 1.0
        expected = self._crawl_ratio() if self.relative_clusters else 1.0
        if self.host_prior is not None:
            self._learn("host_clusters", "host", item.host, relevance, item.priority / cluster_factor, self.host_prior,
                        expected)
        if linked:
            self._learn("link_clusters", "parent_id", item.parent_id, relevance, item.priority, self.cluster_prior,
                        expected)

    def _learn(self, table: str, column: str, key, relevance: float, priority: float, alpha: float,
               expected: float) -> None:
        """A fetched page of a cluster whose factor ``priority`` holds (and, for a host, nothing
        else: the link cluster's taken out): the factor learnt, the queued URLs scaled if it moved."""
        pages, total, predicted, factor = self.db.execute(
            f"INSERT INTO {table} AS c ({column}, pages, relevance, predicted, factor) VALUES (%s, 1, %s, %s, 1.0)"
            f" ON CONFLICT ({column}) DO UPDATE SET pages = c.pages + 1, relevance = c.relevance + EXCLUDED.relevance,"
            f" predicted = c.predicted + EXCLUDED.predicted / c.factor RETURNING pages, relevance, predicted, factor",
            (key, relevance, priority)).fetchone()
        learnt = learnt_factor(pages, total, predicted, alpha, expected)
        if abs(learnt / factor - 1) > CLUSTER_STEP:  # else the queued URLs keep the factor they have
            self.db.execute(f"UPDATE {table} SET factor = %s WHERE {column} = %s", (learnt, key))
            self._scaled(self.db.execute(
                f"UPDATE urls SET priority = priority * %s WHERE {column} = %s AND state = {QUEUED} AND priority"
                f" < {HEAD / 2} RETURNING host", (learnt / factor, key)))

    def _crawl_ratio(self) -> float:
        """The whole crawl's ratio of scores to the strategy's priorities (all workers' pages, the
        clusters' totals), read again every ``RATIO_LEARNS`` pages once it holds that many (it moves
        slowly then, and a sum over the clusters of a million-page crawl on every page would not),
        every page before."""
        ratio, left = self.ratio
        if left <= 0:
            relevance, predicted, pages = self.db.execute(totals_query(self.host_prior)).fetchone()
            ratio, left = crawl_ratio(relevance, predicted), RATIO_LEARNS if pages >= RATIO_LEARNS else 1
        self.ratio = ratio, left - 1
        return ratio

    def _scaled(self, hosts) -> int:
        """The hosts of URLs whose priorities were scaled get their best again; how many URLs."""
        hosts = [host for (host,) in hosts]
        recount_best(self.db, hosts)
        return len(hosts)


class HandOutOrder:
    """The SQLite frontier's hand-out orders across workers: a URL goes only if it is within
    ``band`` of the best URL queued on any host (as last counted, about once a second) or held in
    this worker's leases (strict: a band of 0; host-parallel: any)."""

    def __init__(self, order: str, band: float):
        self.band = {"strict": 1e-9, "band": band}.get(order)  # None: host-parallel
        self.best_queued: float | None = None

    def bar(self, leases) -> float:
        """The lowest priority that may go now."""
        if self.band is None:
            return -math.inf
        held = [lease.items[0].priority for lease in leases if lease.items]
        best = max(held + ([self.best_queued] if self.best_queued is not None else []), default=None)
        return -math.inf if best is None else best - self.band


@dataclass
class Lease:
    """A host this worker holds: the URLs it took, best first."""

    host: str
    items: list[Item] = field(default_factory=list)
    in_flight: int = 0  # its URLs handed out and not yet stored: the lease is kept until they are


class HostLeases(FrontierSteps):
    """The hosts a worker holds: their URLs taken and in flight, the leases renewed, given back,
    and the expired leases of killed workers reaped (part of :class:`PgFrontier`)."""

    db: psycopg.Connection
    worker: str
    hosts: Hosts
    leases: dict[str, Lease]
    batch: int
    lease_seconds: float
    in_flight: int

    def hang_up(self, item: Item) -> None:
        """The fetch is over: the host's connection may take the lease's next URL while this page
        is judged and stored (as the SQLite frontier's). The lease is kept until the page is
        stored: one given back with a page in flight would not bring its URL back to the queue,
        should the worker be killed before it stores it."""
        if item.connected:
            item.connected = False
            self.hosts[item.host].active -= 1

    def release(self, item: Item) -> None:
        """The page is stored or abandoned (its connection freed, if :meth:`hang_up` has not); a
        lease whose batch is fetched and stored is given back."""
        self.hang_up(item)
        self.in_flight -= 1
        lease = self.leases.get(item.host)
        if lease is not None:
            lease.in_flight -= 1
            if not lease.items and lease.in_flight == 0:
                self._give_back(lease)

    def _reap(self) -> None:
        """Free the hosts whose lease expired (their lessee was killed) and queue their URLs in
        flight again, all at once: the next workers take them in priority order."""
        self._expiries_checked = time.monotonic()
        with self.db.transaction():
            hosts = [name for (name,) in self.db.execute(
                f"UPDATE hosts SET lease_owner = NULL, lease_until = 0 WHERE host IN (SELECT host FROM hosts WHERE"
                f" lease_owner IS NOT NULL AND lease_until < {NOW} FOR UPDATE SKIP LOCKED) RETURNING host")]
            if hosts:
                requeue_orphans(self.db, hosts)
                recount_best(self.db, hosts)

    def _renew(self) -> None:
        """Extend this worker's leases. A host row that another worker's unit holds (a page's
        links raising its best priority) is renewed next time, a third of a lease later: waiting
        for it could deadlock with that unit, which holds other rows of the lessee's and waits."""
        self.db.execute(f"UPDATE hosts SET lease_until = {NOW} + %s WHERE host IN (SELECT host FROM hosts WHERE"
                        f" lease_owner = %s AND host = ANY(%s) FOR UPDATE SKIP LOCKED)",
                        (self.lease_seconds, self.worker, list(self.leases)))
        self.db.execute(f"UPDATE workers SET seen_at = {NOW} WHERE worker = %s", (self.worker,))
        self._renewed = time.monotonic()

    def _give_up_below(self, bar: float) -> None:
        """Give back the leases whose URLs the order holds back."""
        for lease in [lease for lease in self.leases.values() if self._held_back(lease, bar)]:
            self._return_items(lease)
            self._give_back(lease)

    def _held_back(self, lease: Lease, bar: float) -> bool:
        """Whether the order holds a lease's URLs back (none of them in flight: it may be given back)."""
        return lease.in_flight == 0 and (not lease.items or lease.items[0].priority < bar)

    def _give_back(self, lease: Lease) -> None:
        """End a lease: the host's next allowed start and best priority go back to the table."""
        wait = max(0.0, self.hosts[lease.host].next_start - time.monotonic())
        self.db.execute(
            f"UPDATE hosts SET lease_owner = NULL, lease_until = 0, next_allowed = {NOW} + %s, best = (SELECT"
            f" MAX(priority) FROM urls WHERE host = %s AND state = {QUEUED}), status = %s WHERE host = %s AND lease_owner = %s",
            (wait, lease.host, self.hosts[lease.host].status, lease.host, self.worker))
        del self.leases[lease.host]

    def _return_items(self, lease: Lease) -> None:
        """The lease's URLs taken and not fetched go back to the queue."""
        if not lease.items:
            return
        self.db.execute(f"UPDATE urls SET state = {QUEUED}, owner = NULL WHERE id = ANY(%s) AND owner = %s",
                        ([item.url_id for item in lease.items], self.worker))
        lease.items.clear()


class PgFrontier(HostLeases):
    """The worker's side of the shared frontier (the crawl's :class:`~focuscrawl.frontier.Frontier`
    protocol: seen set, queue, hand-out, finish). ``leases``: hosts held at once; ``batch``: URLs
    taken per lease; ``lease_seconds``: how long a lease lives without renewal; ``order`` and
    ``band``: the SQLite frontier's hand-out order (:class:`HandOutOrder`); ``link_clusters`` and
    ``host_clusters``: the priors of its link and host clusters (:meth:`FrontierSteps.learn_cluster`)."""

    def __init__(self, db: psycopg.Connection, worker: str, hosts: Hosts, leases: int = 16, batch: int = 8,
                 lease_seconds: float = 30.0, order: str = "band", band: float = 0.05,
                 link_clusters: float | None = None, host_clusters: float | None = None, relative_clusters: bool = False):
        self.db, self.worker, self.hosts = db, worker, hosts
        self.order, self.cluster_prior, self.host_prior = HandOutOrder(order, band), link_clusters, host_clusters
        self.relative_clusters, self.ratio = relative_clusters, (1.0, 0)
        self.max_leases, self.batch, self.lease_seconds = leases, batch, lease_seconds
        self.share = leases  # hosts this worker may hold: its fair share of the open hosts among the live workers
        self.leases: dict[str, Lease] = {}
        self.size = 0  # URLs queued over the whole frontier, as last counted
        self.in_flight = 0  # this worker's
        self.others_in_flight = 0  # the other workers', as last counted: the frontier is exhausted only without them
        self.done = 0  # over all workers, as last counted, plus this worker's since
        self.lost = 0  # URLs finished after their lease had expired (another worker may have fetched them)
        self._renewed = self._counted = self._done_counted = self._expiries_checked = self._queue_counted = 0.0
        self._waiting_until = 0.0  # no host to lease before this (monotonic)
        self._links_added, self._analyze_at = 0, 2000  # see resync

    def load(self) -> int:
        """Register this worker and count the frontier; nothing to requeue (expired leases are)."""
        self.db.execute(f"INSERT INTO workers (worker, seen_at) VALUES (%s, {NOW}) ON CONFLICT (worker) DO UPDATE"
                        f" SET seen_at = EXCLUDED.seen_at, stopped_at = NULL", (self.worker,))
        self.resync()
        return 0

    def resync(self, recount: bool = False) -> None:
        """Count again (about once a second): the URLs fetched by every worker, and the queued
        URLs and the other workers' URLs in flight up to ``COUNT_CAP`` each (an exact count of
        10 M rows would take seconds; above the cap, ``size`` is this worker's running estimate,
        and the queue is counted again only every ``RECOUNT_SECONDS`` or when asked, ``recount``:
        counting to the cap is most of a resync's time); this worker's share of the hosts with URLs
        to fetch (a web of few hosts would otherwise be held by the first worker, the others
        waiting for its batches to end)."""
        now = time.monotonic()
        recount = recount or self.size < COUNT_CAP or now - self._queue_counted > RECOUNT_SECONDS
        queue_count = f"(SELECT COUNT(*) FROM (SELECT 1 FROM urls WHERE state = {QUEUED} LIMIT {COUNT_CAP}) AS q)"
        self.done, queued, others, self.order.best_queued, live, open_hosts = self.db.execute(
            f"SELECT (SELECT COALESCE(SUM(done), 0)::bigint FROM workers), {queue_count if recount else 'NULL'},"
            f" (SELECT COUNT(*) FROM (SELECT 1 FROM urls WHERE state = {IN_FLIGHT} AND owner <> %s"
            f" LIMIT {COUNT_CAP}) AS f),"
            f" {BEST_QUEUED}, (SELECT COUNT(*) FROM workers WHERE stopped_at IS NULL AND seen_at > {NOW} - %s),"
            f" (SELECT COUNT(*) FROM (SELECT 1 FROM hosts WHERE status <> 'bad' AND (best IS NOT NULL OR lease_owner IS"
            f" NOT NULL) LIMIT %s) AS h)",
            (self.worker, self.lease_seconds, self.max_leases * 256)).fetchone()  # live: its leases would hold
        if recount:
            self.size = queued if queued < COUNT_CAP else max(COUNT_CAP, self.size)
            self._queue_counted = now
        self.share = min(self.max_leases, -(-open_hosts // max(1, live))) if open_hosts else self.max_leases
        self.others_in_flight = others
        self._counted = self._done_counted = now
        if self._links_added >= self._analyze_at:  # a young crawl's table outgrows its statistics within seconds,
            self.db.execute("ANALYZE urls")      # long before autovacuum looks, and its plans turn to full scans
            self._analyze_at *= 2

    # -- discovery ---------------------------------------------------------------------------

    def known(self, urls: list[str]) -> dict[str, Seen]:
        rows = self.db.execute("SELECT url, id, state, priority, skip_reason FROM urls WHERE url_hash = ANY(%b)",
                               ([url_hash(url) for url in urls],))
        return {url: Seen(*rest) for url, *rest in rows}

    def add(self, found: list[Discovered], depth: int, parent_id: int | None,
            known: dict[str, Seen] | None = None, tunnel: int = 0, queue: str = "") -> list[int]:
        """Queue discovered URLs (one statement for the new ones, one for those found again with
        a better priority or an admissible link), raise their hosts' best; returns their ids.
        Each URL goes once (``once_per_url``): an update joined to two rows of one URL would take
        either one's priority."""
        hashes = {url: url_hash(url) for url, *_ in found}
        rows = [(hashes[url], url, host, float(priority), skip)
                for url, host, priority, skip in once_per_url(found, self.hosts)]
        # in hash order: two workers queueing the same URLs lock them in one order (a page's unit
        # that deadlocks all the same is run again whole: PgRepository.run_unit)
        ids = self._add(sorted(rows, key=lambda row: row[0]), depth, parent_id, tunnel, queue)
        self.size += sum(skip is None for *_, skip in rows)  # an estimate until the next count
        self._links_added += len(rows)
        return [ids[hashes[url]] for url, *_ in found]

    def _add(self, found: list[tuple], depth: int, parent_id: int | None, tunnel: int, queue: str) -> dict[int, int]:
        """One statement (one round trip, atomic): insert the new URLs (hash, URL, host, priority,
        skip), readmit the known ones found by an admissible link (a better priority, or a skip
        this link does not have), raise their hosts' best; the ids by URL hash. Its parts see the
        table as it was before it. The arrays go in binary: psycopg's text arrays cost a page of
        150 links about 1.3 ms more of the crawl's CPU."""
        hashes = [hashed for hashed, *_ in found]
        rows = self.db.execute(
            f"WITH t AS (SELECT h, u, host, p * COALESCE((SELECT factor FROM host_clusters c WHERE c.host = n.host), 1)"
            f" AS p, s FROM unnest(%(h)b::bigint[], %(u)b::text[], %(host)b::text[], %(p)b::float8[], %(s)b::text[])"
            f" AS n(h, u, host, p, s)),"  # a URL comes at what its host's pages have turned out to be worth
            f" ins AS (INSERT INTO urls (url_hash, url, host, depth, parent_id, priority, state, skip_reason,"
            f" discovered_at, tunnel, queue) SELECT h, u, host, %(depth)s, %(parent)s, p, CASE WHEN s IS NULL THEN"
            f" {QUEUED} ELSE {SKIPPED} END, s, {NOW}, %(tunnel)s, %(queue)s FROM t ON CONFLICT (url_hash) DO NOTHING"
            f" RETURNING url_hash, id, host, priority, state),"
            f" upd AS (UPDATE urls SET priority = t.p, state = {QUEUED}, skip_reason = NULL, depth = %(depth)s,"
            f" parent_id = %(parent)s, tunnel = %(tunnel)s, queue = %(queue)s FROM t WHERE url_hash = t.h AND t.s IS NULL"
            f" AND ((state = {QUEUED} AND t.p > priority) OR (state = {SKIPPED} AND skip_reason = ANY(%(revivable)s)))"
            f" RETURNING urls.host, urls.priority),"
            f" best AS (INSERT INTO hosts (host, best) SELECT host, MAX(priority) FROM (SELECT host, priority FROM ins"
            f" WHERE state = {QUEUED} UNION ALL SELECT host, priority FROM upd) AS q GROUP BY host ORDER BY host"
            f" ON CONFLICT (host) DO UPDATE SET best = GREATEST(hosts.best, EXCLUDED.best))"
            f" SELECT url_hash, id FROM ins UNION ALL SELECT url_hash, id FROM urls WHERE url_hash = ANY(%(h)b)",
            {"h": hashes, "u": [u for _, u, *_ in found], "host": [h for _, _, h, _, _ in found],
             "p": [p for *_, p, _ in found], "s": [s for *_, s in found], "depth": depth, "parent": parent_id,
             "tunnel": tunnel, "queue": queue, "revivable": list(REVIVABLE)}).fetchall()
        ids = dict(rows)
        missing = [h for h in hashes if h not in ids]  # inserted by another worker after this statement began
        if missing:
            ids.update(self.db.execute("SELECT url_hash, id FROM urls WHERE url_hash = ANY(%s)", (missing,)).fetchall())
        return ids

    def mark_fetched_alias(self, url: str, host: str, depth: int, parent_id: int | None) -> None:
        """A redirect's final URL has been fetched too: never queue it again."""
        self.add([Discovered(url, host, 0.0, "fetched as a redirect target")], depth, parent_id)
        self.db.execute(f"UPDATE urls SET state = {DONE}, skip_reason = 'fetched as a redirect target' WHERE"
                        f" url_hash = %s AND state IN ({QUEUED}, {SKIPPED})", (url_hash(url),))

    # -- hand-out ----------------------------------------------------------------------------

    def next_ready(self) -> Item | None:
        """The best URL of a leased host that politeness and the order let go now; leases the
        best ready host within the order when this worker's leases have none (first giving back
        those whose URLs the order holds back: a host's better URLs queued since its URLs were
        taken, by a re-scoring or a promotion, are leased with it again)."""
        now = time.monotonic()
        if now - self._renewed > self.lease_seconds / 3:
            self._renew()
        if now - self._expiries_checked > min(1.0, self.lease_seconds / 3):
            self._reap()
        if now - self._counted > 1.0:
            self.resync()
        bar = self.order.bar(self.leases.values())
        ready = [lease for lease in self.leases.values()
                 if lease.items and self._may_ask(lease.host, now) and lease.items[0].priority >= bar]
        if not ready and now >= self._waiting_until:
            self._give_up_below(bar)
            if len(self.leases) < self.share:
                lease = self._lease(bar)
                ready = [lease] if lease is not None and self._may_ask(lease.host, now) else []
        if not ready:
            return None
        lease = max(ready, key=lambda lease: lease.items[0].priority)
        item = lease.items.pop(0)
        self.hosts[item.host].active += 1
        lease.in_flight += 1
        self.in_flight += 1
        return item

    def _may_ask(self, name: str, now: float) -> bool:
        host = self.hosts[name]
        return host.status != BAD and host.active < self.hosts.connections and host.next_start <= now

    def _lease(self, bar: float) -> Lease | None:
        """Lease the best host no worker holds and whose interval has passed, if its best URL is
        within the order's ``bar``; take its best URLs within it."""
        rows = self.db.execute(LEASE, {"bar": bar, "worker": self.worker, "batch": self.batch,
                                       "seconds": self.lease_seconds}).fetchall()
        if not rows:
            self._waiting_until = time.monotonic() + 0.05
            return None
        name = rows[0][0]
        items = sorted((Item(*row[1:]) for row in rows if row[1] is not None),
                       key=lambda item: (-item.priority, item.url_id))
        if not items:  # its best was stale: none queued any more (left free, so counted again now: see LEASE)
            recount_best(self.db, [name])
            return None
        held = self.leases.get(name)  # this worker's own lease, expired and reaped, with pages still in flight
        lease = self.leases[name] = Lease(name, items, in_flight=held.in_flight if held else 0)
        return lease

    def seconds_to_next(self) -> float | None:
        """How long until a leased host whose URLs the order lets go may be asked again (or
        another host may be leased)."""
        now, bar = time.monotonic(), self.order.bar(self.leases.values())
        # (a host at its connections is asked again when a fetch hangs up, which wakes a crawl worker)
        waits = [self.hosts[name].next_start - now for name, lease in self.leases.items()
                 if lease.items and lease.items[0].priority >= bar and self.hosts[name].active < self.hosts.connections]
        if len(self.leases) < self.share or any(self._held_back(lease, bar) for lease in self.leases.values()):
            waits.append(self._waiting_until - now)  # another host to lease (after giving one back)
        return max(0.0, min(waits)) if waits else None

    def exhausted(self) -> bool:
        """Nothing queued and nothing in flight anywhere (another worker's page may queue more),
        counted again at most four times a second."""
        if self.in_flight or self.size and time.monotonic() - self._counted < 1.0:
            return False
        if time.monotonic() - self._counted > 0.25:
            self.resync(recount=True)
        return self.size == 0 and self.in_flight == 0 and self.others_in_flight == 0

    def claimed(self) -> int:
        """Every worker's fetched URLs (counted again if a tenth of a second old) and this worker's
        in flight: the budget is overshot by at most the other workers' fetches in flight (the
        URLs they hold in flight include those taken in a batch and not started: counted, they
        would stop every worker short)."""
        if time.monotonic() - self._done_counted > 0.1:  # only the count it needs: asked before every fetch, a whole
            self.done = self.db.execute(  # resync would count the queue ten times a second (1 ms of PostgreSQL a page)
                "SELECT COALESCE(SUM(done), 0)::bigint FROM workers").fetchone()[0]
            self._done_counted = time.monotonic()
        return self.done + self.in_flight

    def finish(self, item: Item, refused: str | None = None) -> bool:
        """The URL has been handled; False if this worker's lease on it had expired meanwhile."""
        mine = self.db.execute(  # one statement: the URL and the worker's count together
            f"WITH f AS (UPDATE urls SET state = {DONE}, skip_reason = %s, owner = NULL WHERE id = %s AND owner = %s"
            f" AND state = {IN_FLIGHT} RETURNING 1) UPDATE workers SET done = done + (SELECT COUNT(*) FROM f) * %s"
            f" WHERE worker = %s RETURNING (SELECT COUNT(*) FROM f)",
            (refused, item.url_id, self.worker, int(refused is None), self.worker)).fetchone()[0]
        self.done += refused is None
        self.lost += not mine
        return bool(mine)

    def close(self) -> None:
        """Give back every lease (URLs taken and not fetched return to the queue); the worker has stopped."""
        for lease in list(self.leases.values()):
            self._return_items(lease)
            self._give_back(lease)
        self.db.execute(f"UPDATE workers SET stopped_at = {NOW} WHERE worker = %s", (self.worker,))

    def trim(self, max_queued: int) -> int:
        """BINGO!'s bounded queue (the SQLite frontier's ``trim``), shared: beyond ``max_queued``
        URLs in a queue the lowest-priority ones are skipped. The ranking is read first, then the
        rows are taken with SKIP LOCKED: a URL another worker's page is queueing again is left
        alone (trimmed next time), never waited for, so two workers trimming cannot deadlock."""
        ranked = [url_id for url_id, in self.db.execute(
            f"SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY queue ORDER BY priority DESC, id) AS rank"
            f" FROM urls WHERE state = {QUEUED}) AS r WHERE rank > %s ORDER BY id", (max_queued,))]
        hosts = [host for host, in self.db.execute(
            f"UPDATE urls SET state = {SKIPPED}, skip_reason = %s WHERE id IN (SELECT id FROM urls WHERE id = ANY(%s)"
            f" AND state = {QUEUED} ORDER BY id FOR UPDATE SKIP LOCKED) RETURNING host", (QUEUE_FULL, ranked))]
        recount_best(self.db, hosts)
        self.size -= len(hosts)
        return len(hosts)

    def drop_host(self, name: str) -> int:
        """A bad host: its queued URLs are skipped for the rest of the crawl, by every worker."""
        dropped = self.db.execute(f"UPDATE urls SET state = {SKIPPED}, skip_reason = 'host marked bad' WHERE host = %s"
                                  f" AND state = {QUEUED}", (name,)).rowcount
        self.db.execute("UPDATE hosts SET status = 'bad', best = NULL WHERE host = %s", (name,))
        self.size -= dropped
        return dropped
