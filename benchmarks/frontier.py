"""The frontier's hand-out on a large disk frontier: microseconds per hand-out and resident
memory, for each hand-out order, with link clusters re-prioritising siblings as pages finish.

    python benchmarks/frontier.py --urls 2000000 --hosts 5000 --handouts 20000

Prints JSON. A crawl database is filled with queued URLs (random priorities, each URL a child of
one of a few thousand fetched parents) the way the crawl writes them, then the frontier is
loaded and asked for URLs; each one is finished at once, as if fetched, and its link cluster
learns a random relevance, so the priorities on disk keep moving as in a crawl.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import tempfile
import time
from pathlib import Path

from focuscrawl.config import validate_config
from focuscrawl.fetch.hosts import Hosts
from focuscrawl.store import QUEUED, SqliteFrontier, Store


def fill(store: Store, urls: int, hosts: int, parents: int, rng: random.Random) -> None:
    """``parents`` fetched pages, and ``urls`` queued children of theirs spread over ``hosts``."""
    def queued():
        for i in range(urls):
            host = f"h{rng.randrange(hosts)}.test"
            yield f"http://{host}/p{i}", host, rng.randrange(parents) + 1, rng.random()

    with store.transaction() as db:
        db.executemany("INSERT INTO urls (id, url, host, depth, priority, state, discovered_at)"
                       " VALUES (?, ?, 'seed.test', 1, 0, 2, 0)", ((i + 1, f"http://seed.test/{i}") for i in range(parents)))
        db.executemany(f"INSERT INTO urls (url, host, depth, parent_id, priority, state, discovered_at)"
                       f" VALUES (?, ?, 2, ?, ?, {QUEUED}, 0)", queued())


def measure(directory: Path, order: str, handouts: int, rng: random.Random) -> dict:
    config = validate_config({"seeds": ["http://seed.test/"], "strategy": "bfs", "politeness": {"min_interval": 0.0}},
                             "benchmark")  # the defaults of the frontier; the strategy is not used
    store = Store(directory, warc=False)
    frontier = SqliteFrontier(store.db, Hosts(config), order, config.frontier.band, config.frontier.link_clusters)
    clock = time.perf_counter()
    frontier.load()
    loaded = time.perf_counter() - clock
    taken, clock = 0, time.perf_counter()
    while taken < handouts:
        with store.transaction():
            item = frontier.next_ready()
            if item is None:
                break
            frontier.finish(item)
            frontier.learn_cluster(item, rng.random())
        frontier.release(item)
        taken += 1
    seconds = time.perf_counter() - clock
    store.close()
    return {"order": order, "load_seconds": round(loaded, 2), "handouts": taken,
            "microseconds_per_handout": round(1e6 * seconds / max(taken, 1), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=2_000_000)
    parser.add_argument("--hosts", type=int, default=5000)
    parser.add_argument("--parents", type=int, default=20000)
    parser.add_argument("--handouts", type=int, default=20000)
    args = parser.parse_args()
    rng = random.Random(0)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for order in ("host-parallel", "band", "strict"):
            directory = Path(tmp) / order
            store = Store(directory, warc=False)
            fill(store, args.urls, args.hosts, args.parents, rng)
            store.close()
            results.append(measure(directory, order, args.handouts, rng))
    print(json.dumps({"urls": args.urls, "hosts": args.hosts, "results": results,
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}, indent=2))


if __name__ == "__main__":
    main()
