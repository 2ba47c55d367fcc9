"""Speed and memory of the whole crawl pipeline, measured from outside the crawler.

The web (the test web, or without one the synthetic site) runs in one process and the
crawler in another (``focuscrawl crawl -q``), so the crawler's peak memory is its own
(``wait4`` resource usage) and the server does not share its CPU. Pages per second are
counted between the first and last fetch recorded, so start-up and critic training are
reported apart; the crawler's per-stage seconds say where the time goes. The server's own
request rate is measured too, so one can see it is not the bottleneck.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import aiohttp
import yaml

from focuscrawl.config import dump_config, validate_config
from focuscrawl.evaluate.harness import ServedTestWeb, crawl_config
from focuscrawl.fetch.http import HostMapResolver
from focuscrawl.store import Queries, read_only
from focuscrawl.testweb.synthetic import build_site, topic_config


class _SyntheticServer:
    def __init__(self, pages: int, hosts: int, seed: int = 0):
        self.site = build_site(pages, hosts, seed)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "focuscrawl.testweb.synthetic", "--pages", str(pages), "--hosts", str(hosts),
             "--seed", str(seed)], stdout=subprocess.PIPE, text=True)
        info = json.loads(self.process.stdout.readline())
        self.port = info["port"]
        self.host_map = {"hosts": info["hosts"]}

    def close(self) -> None:
        self.process.terminate()
        self.process.wait()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _request_rate(urls: list[str], host_map: dict, concurrency: int = 64) -> float:
    """Requests per second the server answers for these URLs, fetched by a plain client."""
    connector = aiohttp.TCPConnector(limit=concurrency, resolver=HostMapResolver(host_map["hosts"], True))
    queue = list(urls)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def worker():
            while queue:
                url = queue.pop().replace("https://", "http://", 1)
                async with session.get(url, allow_redirects=False) as response:
                    await response.read()

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return len(urls) / (time.monotonic() - started)


def bench(pages: int, testweb: Path | None = None, concurrency: int = 64, strategy: str = "best-first",
          hosts: int = 8, directory: Path | None = None, processes: int = 1) -> dict:
    work = Path(directory or tempfile.mkdtemp(prefix="focuscrawl-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    server = ServedTestWeb(testweb) if testweb else _SyntheticServer(pages, hosts)
    try:
        if testweb:
            topics = yaml.safe_load((Path(testweb) / "topics.yml").read_text())["topics"]
            name, topic = next(iter(topics.items()))
            data = crawl_config(topic, {"strategy": strategy, "fetch": {"processes": processes}}, pages, server.host_map,
                                None, concurrency)
            config = validate_config(data, f"bench on topic {name}")
        else:
            config = topic_config(server.site, server.port, work / "examples", strategy=strategy,
                                  budget={"max_pages": pages}, politeness={"min_interval": 0.0},
                                  fetch={"loopback_only": True, "concurrency": concurrency, "processes": processes})
        dump_config(config, work / "bench.yml")
        out = work / "crawl"
        crawler = subprocess.Popen([sys.executable, "-m", "focuscrawl", "crawl", str(work / "bench.yml"), "--out", str(out), "-q"],
                                   stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(crawler.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"the crawl failed: {crawler.stderr.read().strip()}")
        server_cpu = _cpu_seconds(server.process.pid)
        with closing(read_only(out)) as db:
            urls, first, last, fetched = Queries(db).fetch_summary()
            stages = json.loads(Queries(db).meta()["stage_seconds"])
        server_rate = asyncio.run(_request_rate(urls[:3000] * max(1, 3000 // max(1, len(urls))), server.host_map))
    finally:
        server.close()
    crawl_seconds = last - first
    cpu = usage.ru_utime + usage.ru_stime
    return {
        "web": str(testweb) if testweb else f"synthetic site of {pages} pages on {hosts} hosts",
        "pages": fetched,
        "pages_per_second": round(fetched / crawl_seconds, 1),
        "cpu_seconds_per_page": round(cpu / fetched, 5),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "crawl_seconds": round(crawl_seconds, 2),
        "crawler_cpu_seconds": round(cpu, 2),
        "breakdown": {stage: {"seconds": seconds, "ms_per_page": round(1000 * seconds / fetched, 3)}
                      for stage, seconds in sorted(stages.items())},
        "server_cpu_seconds": round(server_cpu, 2),
        "server_requests_per_second": round(server_rate, 1),
        "concurrency": concurrency,
        "processes": processes,
        "strategy": strategy,
        "directory": str(out),
    }
