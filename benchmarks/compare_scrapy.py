"""focuscrawl's full focused pipeline against Scrapy's plain breadth-first crawl, same test web,
same concurrency, same page count; prints both results and the ratio of pages per second.

    pip install -e '.[bench]'
    python benchmarks/compare_scrapy.py --testweb DIR --pages 5000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
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
    args = parser.parse_args()
    if importlib.util.find_spec("scrapy") is None:  # checked first: our half takes minutes
        sys.exit("error: Scrapy is not installed here; pip install -e '.[bench]'")
    ours = bench(args.pages, args.testweb, args.concurrency, processes=args.processes, order=args.order)
    server = ServedTestWeb(args.testweb)
    try:
        run = subprocess.run([sys.executable, str(Path(__file__).with_name("scrapy_bfs.py")), "--testweb", str(args.testweb),
                              "--port", str(server.info["port"]), "--hostmap", server.info["hostmap"], "--pages", str(args.pages),
                              "--concurrency", str(args.concurrency)], capture_output=True, text=True, check=True)
    finally:
        server.close()
    scrapy = json.loads(run.stdout.strip().splitlines()[-1])
    print(json.dumps({"focuscrawl": {k: ours[k] for k in ("pages", "pages_per_second", "cpu_seconds_per_page", "cores_used",
                                                     "pages_per_second_per_core", "peak_rss_mb", "processes", "order", "breakdown")},
                      "scrapy": scrapy,
                      "ratio": round(ours["pages_per_second"] / scrapy["pages_per_second"], 2)}, indent=2))


if __name__ == "__main__":
    main()
