"""focuscrawl's full focused pipeline against Scrapy's plain breadth-first crawl, same test web,
same concurrency, same page count; prints both results and the ratio of pages per second.

    pip install -e '.[bench]'
    python benchmarks/compare_scrapy.py --testweb DIR --pages 5000 [--runs 3]

With ``--runs N`` the two crawl in turn N times (ours, Scrapy, ours, Scrapy, …) and the ratio
is the median of the pairs' ratios, our CPU per page the median of our runs': a shared
machine's speed drifts by a third within an hour, so one run of each measures the drift as much
as the crawlers.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import get_args

from focuscrawl.bench import bench
from focuscrawl.config import Order
from focuscrawl.evaluate.harness import ServedTestWeb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--testweb", type=Path, required=True)
    parser.add_argument("--pages", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--processes", type=int, default=None, help="focuscrawl's fetch.processes (default: one per core)")
    parser.add_argument("--order", default=None, choices=get_args(Order), help="focuscrawl's frontier.order (default: band)")
    parser.add_argument("--runs", type=int, default=1, help="pairs of runs, in turn; the ratio is the pairs' median")
    args = parser.parse_args()
    if importlib.util.find_spec("scrapy") is None:  # checked first: our half takes minutes
        sys.exit("error: Scrapy is not installed here; pip install -e '.[bench]'")
    if args.runs < 1:
        sys.exit(f"error: --runs must be at least 1, not {args.runs}")
    pairs = []
    for _ in range(args.runs):
        ours = bench(args.pages, args.testweb, args.concurrency, processes=args.processes, order=args.order)
        pairs.append(({k: ours[k] for k in ("pages", "pages_per_second", "cpu_seconds_per_page", "start_cpu_seconds",
                                            "cpu_seconds_per_page_after_start", "cores_used",
                                            "pages_per_second_per_core", "peak_rss_mb", "processes", "order", "breakdown")},
                      scrapy_crawl(args.testweb, args.pages, args.concurrency)))
    ratios = [round(ours["pages_per_second"] / scrapy["pages_per_second"], 2) for ours, scrapy in pairs]
    ours, scrapy = pairs[-1]
    print(json.dumps({"focuscrawl": ours, "scrapy": scrapy, "ratio": round(statistics.median(ratios), 2),
                      **({"cpu_seconds_per_page": statistics.median(run["cpu_seconds_per_page"] for run, _ in pairs),
                          "runs": [{"focuscrawl_pages_per_second": ours["pages_per_second"],
                                    "scrapy_pages_per_second": scrapy["pages_per_second"], "ratio": ratio,
                                    "focuscrawl_cpu_seconds_per_page": ours["cpu_seconds_per_page"]}
                                   for (ours, scrapy), ratio in zip(pairs, ratios)]} if args.runs > 1 else {})},
                     indent=2))


def scrapy_crawl(testweb: Path, pages: int, concurrency: int) -> dict:
    """One run of scrapy_bfs.py against the test web, served for it alone."""
    server = ServedTestWeb(testweb)
    try:
        run = subprocess.run([sys.executable, str(Path(__file__).with_name("scrapy_bfs.py")), "--testweb", str(testweb),
                              "--port", str(server.info["port"]), "--hostmap", server.info["hostmap"], "--pages", str(pages),
                              "--concurrency", str(concurrency)], capture_output=True, text=True, check=True)
    finally:
        server.close()
    return json.loads(run.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
