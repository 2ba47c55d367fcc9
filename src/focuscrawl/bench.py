"""Speed and memory of a whole crawl of the synthetic site, measured from outside the crawler.

The site runs in one process and the crawler in another (``focuscrawl crawl -q``), so the
crawler's peak memory is its own (``wait4`` resource usage) and the server does not share
its CPU. Pages per second are counted between the first and last fetch recorded in the
database, so start-up and critic training are reported apart.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from focuscrawl.config import dump_config
from focuscrawl.testweb.synthetic import build_site, topic_config, true_harvest


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_crawl(pages: int, hosts: int, strategy: str, concurrency: int, budget: int | None = None, seed: int = 0,
                directory: Path | None = None) -> dict:
    """Crawl ``budget`` pages (default: all) of a synthetic site for the topic 'networking'."""
    site = build_site(pages, hosts, seed)
    work = Path(directory or tempfile.mkdtemp(prefix="focuscrawl-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    server = subprocess.Popen(
        [sys.executable, "-m", "focuscrawl.testweb.synthetic", "--pages", str(pages), "--hosts", str(hosts), "--seed", str(seed)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        port = json.loads(server.stdout.readline())["port"]
        config = topic_config(site, port, work / "examples", strategy=strategy,
                              budget={"max_pages": budget or pages}, politeness={"min_interval": 0.0},
                              fetch={"loopback_only": True, "concurrency": concurrency})
        dump_config(config, work / "bench.yml")
        out = work / "crawl"
        started = time.monotonic()
        crawler = subprocess.Popen([sys.executable, "-m", "focuscrawl", "crawl", str(work / "bench.yml"), "--out", str(out), "-q"],
                                   stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(crawler.pid, 0)
        wall = time.monotonic() - started
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"the crawl failed: {crawler.stderr.read().strip()}")
        server_cpu = _cpu_seconds(server.pid)
    finally:
        server.terminate()
        server.wait()
    db = sqlite3.connect(out / "crawl.db")
    first, last, fetched = db.execute("SELECT MIN(fetched_at), MAX(fetched_at + seconds), COUNT(*) FROM fetches").fetchone()
    urls = [url for (url,) in db.execute("SELECT url FROM fetches WHERE status = 200 ORDER BY id")]
    harvest = db.execute("SELECT AVG(relevance) FROM documents").fetchone()[0]
    crawl_seconds = last - first
    return {
        "site_pages": pages,
        "pages": fetched,
        "strategy": strategy,
        "concurrency": concurrency,
        "hosts": hosts,
        "crawl_seconds": round(crawl_seconds, 2),
        "pages_per_second": round(fetched / crawl_seconds, 1),
        "wall_seconds": round(wall, 2),
        "crawler_cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
        "crawler_peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "server_cpu_seconds": round(server_cpu, 2),
        "harvest_rate_critic": round(harvest, 4),
        "harvest_rate_true": round(true_harvest(site, urls, "networking"), 4),
        "directory": str(out),
    }
