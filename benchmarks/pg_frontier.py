"""The shared frontier on PostgreSQL at scale: hand-out latency and statements per page with a
frontier of millions of URLs, several workers at once.

    python benchmarks/pg_frontier.py --urls 10000000 --hosts 100000 --workers 4 --pages 20000

Prints JSON. A throw-away PostgreSQL cluster (or ``--dsn``) gets a crawl whose ``urls`` table is
filled server-side (``generate_series``: random priorities over ``--hosts`` hosts), then
``--workers`` processes each run the crawl's per-page calls on it as fast as they can: hand-out
(:meth:`PgFrontier.next_ready`, leases included), the page's links (``add``, 30 links: 25 known,
5 new) and ``finish``. Reported: per-call latency percentiles over all workers, statements per
page (round trips: psycopg's execute calls), and pages/s.
Goal (issue 22): hand-out p99 <= 10 ms with 10 M URLs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import time

import numpy as np
import psycopg

from focuscrawl.config import validate_config
from focuscrawl.fetch.hosts import Hosts
from focuscrawl.frontier import Discovered
from focuscrawl.store.pg_frontier import URL_HASH_SQL, PgFrontier, connect
from focuscrawl.testweb.postgres import ThrowawayPostgres

CRAWL = "bench"


def fill(dsn: str, urls: int, hosts: int) -> float:
    """``urls`` queued URLs over ``hosts`` hosts, written by the server itself; seconds taken."""
    started = time.perf_counter()
    with connect(dsn, CRAWL) as db:
        db.execute("TRUNCATE urls, hosts, workers")
        db.execute(f"INSERT INTO urls (url_hash, url, host, depth, priority, state, discovered_at)"
                   f" SELECT {URL_HASH_SQL.format('u')}, u, h, 2, random(), 0, 0 FROM (SELECT 'h' || (i %% %s) || '.test' AS h,"
                   f" 'http://h' || (i %% %s) || '.test/p' || i AS u FROM generate_series(1, %s) AS i) AS t",
                   (hosts, hosts, urls))
        db.execute("INSERT INTO hosts (host, best) SELECT host, MAX(priority) FROM urls GROUP BY host")
        db.execute("VACUUM ANALYZE urls")
        db.execute("VACUUM ANALYZE hosts")
    return time.perf_counter() - started


class CountingConnection(psycopg.Connection):
    """Counts the statements sent (each execute is one round trip)."""

    statements = 0

    def execute(self, *args, **kwargs):
        CountingConnection.statements += 1
        return super().execute(*args, **kwargs)


def run_worker(dsn: str, name: str, pages: int, urls: int, hosts: int, seed: int, out) -> None:
    rng = random.Random(seed)
    config = validate_config({"seeds": ["http://x/"], "strategy": "bfs", "politeness": {"min_interval": 0.0}}, "bench")
    db = connect(dsn, CRAWL)
    db.close()
    db = CountingConnection.connect(dsn, autocommit=True)
    db.execute(f"SET search_path TO crawl_{CRAWL}")
    db.execute("SET synchronous_commit TO off")
    frontier = PgFrontier(db, name, Hosts(config))
    frontier.load()
    timings = {"next_ready": [], "add": [], "finish": []}
    CountingConnection.statements = 0
    started, done = time.perf_counter(), 0
    while done < pages:
        clock = time.perf_counter()
        item = frontier.next_ready()
        timings["next_ready"].append(time.perf_counter() - clock)
        if item is None:
            continue
        known = [f"http://h{i % hosts}.test/p{i}" for i in (rng.randrange(1, urls + 1) for _ in range(25))]
        new = [f"http://{name}-n{done}-{k}.test/x" for k in range(5)]
        found = [Discovered(url, url.split("/")[2], rng.random(), None) for url in known + new]
        clock = time.perf_counter()
        frontier.add(found, item.depth + 1, item.url_id)
        timings["add"].append(time.perf_counter() - clock)
        clock = time.perf_counter()
        frontier.finish(item)
        frontier.release(item)
        timings["finish"].append(time.perf_counter() - clock)
        done += 1
    seconds = time.perf_counter() - started
    frontier.close()
    out.put({"worker": name, "seconds": seconds, "pages": done, "statements": CountingConnection.statements,
             "timings": {k: v for k, v in timings.items()}})


def percentiles(values: list[float]) -> dict:
    ms = np.array(values) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3),
            "max_ms": round(float(ms.max()), 3), "calls": len(ms)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pages", type=int, default=5000, help="pages per worker")
    parser.add_argument("--dsn", help="a PostgreSQL server to use (default: a throw-away cluster)")
    args = parser.parse_args()
    cluster = None if args.dsn else ThrowawayPostgres(shared_buffers="2GB")  # the urls table's hot part in the server
    dsn = args.dsn or cluster.dsn
    try:
        fill_seconds = fill(dsn, args.urls, args.hosts)
        queue = multiprocessing.Queue()
        processes = [multiprocessing.Process(target=run_worker, args=(dsn, f"w{i}", args.pages, args.urls, args.hosts, i, queue))
                     for i in range(args.workers)]
        started = time.perf_counter()
        for process in processes:
            process.start()
        results = [queue.get() for _ in processes]
        wall = time.perf_counter() - started
        for process in processes:
            process.join()
        with psycopg.connect(dsn) as db:
            size = db.execute(f"SELECT pg_total_relation_size('crawl_{CRAWL}.urls')").fetchone()[0]
    finally:
        if cluster:
            cluster.stop()
    pages = sum(r["pages"] for r in results)
    merged = {k: [t for r in results for t in r["timings"][k]] for k in ("next_ready", "add", "finish")}
    report = {
        "urls": args.urls, "hosts": args.hosts, "workers": args.workers, "fill_seconds": round(fill_seconds, 1),
        "urls_table_mb": round(size / 2**20), "pages": pages, "pages_per_second": round(pages / wall, 1),
        "statements_per_page": round(sum(r["statements"] for r in results) / pages, 2),
        "latency": {k: percentiles(v) for k, v in merged.items()},
    }
    report["goals_met"] = {"hand_out_p99_at_most_10_ms": report["latency"]["next_ready"]["p99_ms"] <= 10}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
