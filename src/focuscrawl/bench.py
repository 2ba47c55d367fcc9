"""Speed and memory of the whole crawl pipeline, measured from outside the crawler.

The web (the test web, or without one the synthetic site) runs in one process and the
crawler in another (``focuscrawl crawl -q``, with its judging workers), so the crawler's CPU
time is its own (``wait4`` resource usage, workers included) and its memory the peak of the
sum over its processes (sampled from /proc every 0.1 s). Pages per second are
counted between the first and last fetch recorded, so start-up and critic training are
reported apart; the crawler's per-stage seconds say where the time goes. The server's own
request rate is measured too, so one can see it is not the bottleneck.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import closing, contextmanager
from pathlib import Path

import aiohttp

from focuscrawl.config import CrawlConfig, dump_config, validate_config
from focuscrawl.evaluate.harness import ServedTestWeb, crawl_config, read_topics
from focuscrawl.fetch.http import HostMapResolver
from focuscrawl.store import Queries, crawl_status, read_only
from focuscrawl.testweb.synthetic import build_site, topic_config
from focuscrawl.testweb.webmap import WebMap


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
    """User and system CPU of the process itself (not of its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pss_bytes(pid: int) -> int:
    """The process's proportional set size (its own pages, and its share of those it shares);
    0 for a process that has ended, or on a kernel without ``smaps_rollup`` (before 4.14)."""
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


class _ProcessWatch(threading.Thread):
    """The crawl process and its children, sampled until it exits: the peak of their summed
    resident memory, and the crawl process's own CPU time (the rest of the total is the workers').
    Resident memory counts the pages a forked process shares with the crawl's once in each; the
    proportional set size (PSS, every ``PSS_EVERY`` samples: the kernel walks each process's
    memory for it) divides them among the processes, so its sum is the memory they take."""

    PSS_EVERY = 5

    def __init__(self, pid: int, every: float = 0.1):
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.peak_rss_bytes, self.peak_pss_bytes, self.own_cpu = 0, 0, 0.0
        self.done = threading.Event()

    def run(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        samples = 0
        while not self.done.is_set():
            try:
                family = self._family()
                rss = sum(int(Path(f"/proc/{pid}/statm").read_text().split()[1]) for pid in family) * page
                self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
                if samples % self.PSS_EVERY == 0:
                    self.peak_pss_bytes = max(self.peak_pss_bytes, sum(map(pss_bytes, family)))
                self.own_cpu = _cpu_seconds(self.pid)
            except (OSError, ValueError, IndexError):  # a process ended between listing and reading
                pass
            samples += 1
            self.done.wait(self.every)

    def _family(self) -> list[int]:
        """The crawl process and its children (only itself on kernels without the children list)."""
        try:
            children = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
        except OSError:
            children = []
        return [self.pid, *map(int, children)]


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


def _crawl(config_path: Path, out: Path) -> tuple[resource.struct_rusage, float, _ProcessWatch]:
    """Run ``focuscrawl crawl`` and watch it: its resource usage, wall seconds and samples."""
    crawler = subprocess.Popen([sys.executable, "-m", "focuscrawl", "crawl", str(config_path), "--out", str(out), "-q"],
                               stderr=subprocess.PIPE, text=True)
    watch = _ProcessWatch(crawler.pid)
    watch.start()
    started = time.monotonic()
    _, status, usage = os.wait4(crawler.pid, 0)
    wall = time.monotonic() - started
    watch.done.set()
    watch.join()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"the crawl failed: {crawler.stderr.read().strip()}")
    return usage, wall, watch


def bench(pages: int, testweb: Path | None = None, concurrency: int = 64, strategy: str = "best-first",
          hosts: int = 8, directory: Path | None = None, processes: int | None = None, order: str | None = None,
          near_duplicates: bool = False) -> dict:
    if testweb:  # checked before anything starts: one line, nothing left behind
        WebMap(testweb).db.close()
        name, topic = next(iter(read_topics(Path(testweb) / "topics.yml").items()))
    work = Path(directory or tempfile.mkdtemp(prefix="focuscrawl-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    with _removed_unless_kept(work if directory is None else None):
        result = _bench(pages, testweb, topic if testweb else None, name if testweb else None, concurrency, strategy,
                        hosts, work, processes, order, near_duplicates)
    return result if directory is None else {**result, "directory": str(work / "crawl")}


@contextmanager
def _removed_unless_kept(work: Path | None):
    """A bench leaves no temporary directory behind, whether it ends or fails (a crawl of the
    small test web is about 150 MB; ``directory`` keeps one)."""
    try:
        yield
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def _bench_config(budget: int, server, testweb: Path | None, topic: dict | None, name: str | None, concurrency: int,
                  strategy: str, work: Path, processes: int | None, order: str | None,
                  near_duplicates: bool) -> tuple[Path, CrawlConfig]:
    """The bench crawl's config for this page budget, written in ``work``: (its path, it)."""
    if testweb:
        data = crawl_config(topic, {"strategy": strategy, "fetch": {"processes": processes},
                                    "store": {"near_duplicates": near_duplicates}}, budget, server.host_map,
                            None, concurrency, order)
        config = validate_config(data, f"bench on topic {name}")
    else:
        config = topic_config(server.site, server.port, work / "examples", strategy=strategy,
                              budget={"max_pages": budget}, politeness={"min_interval": 0.0},
                              fetch={"loopback_only": True, "concurrency": concurrency, "processes": processes},
                              store={"near_duplicates": near_duplicates},
                              **({"frontier": {"order": order}} if order else {}))
    path = work / f"bench-{budget}.yml"
    dump_config(config, path)
    return path, config


def _bench(pages: int, testweb: Path | None, topic: dict | None, name: str | None, concurrency: int, strategy: str,
           hosts: int, work: Path, processes: int | None, order: str | None, near_duplicates: bool) -> dict:
    server = ServedTestWeb(testweb) if testweb else _SyntheticServer(pages, hosts)
    def configured(budget: int) -> tuple[Path, CrawlConfig]:
        return _bench_config(budget, server, testweb, topic, name, concurrency, strategy, work, processes, order,
                             near_duplicates)

    try:
        out = work / "crawl"
        path, config = configured(pages)
        started = _cpu_seconds(server.process.pid)  # loading the web's map is not serving it
        usage, wall, watch = _crawl(path, out)
        server_cpu = _cpu_seconds(server.process.pid) - started
        start_usage, _, _ = _crawl(configured(1)[0], work / "start")  # what a crawl costs whatever its pages
        with closing(read_only(out)) as db:
            urls, first, last, fetched = Queries(db).fetch_summary()
            stages = json.loads(Queries(db).meta()["stage_seconds"])
            links_behind = crawl_status(db)["index_links_behind"]
        server_rate = asyncio.run(_request_rate(urls[:3000] * max(1, 3000 // max(1, len(urls))), server.host_map))
    finally:
        server.close()
    crawl_seconds = last - first
    cpu = usage.ru_utime + usage.ru_stime
    start_cpu = start_usage.ru_utime + start_usage.ru_stime
    cores_used = cpu / wall
    return {
        "web": str(testweb) if testweb else f"synthetic site of {pages} pages on {hosts} hosts",
        "pages": fetched,
        "pages_per_second": round(fetched / crawl_seconds, 1),
        "cpu_seconds_per_page": round(cpu / fetched, 5),
        "start_cpu_seconds": round(start_cpu, 2),  # a crawl of one page: start-up (imports, the critic's training), end
        "cpu_seconds_per_page_after_start": round(max(0.0, cpu - start_cpu) / max(1, fetched - 1), 5),
        "cores_used": round(cores_used, 2),  # the crawler's CPU seconds over its run, start-up included
        "pages_per_second_per_core": round(fetched / crawl_seconds / cores_used, 1),
        "peak_rss_mb": round(watch.peak_rss_bytes / 2**20, 1),  # all its processes together
        "peak_pss_mb": round(watch.peak_pss_bytes / 2**20, 1),  # the same, shared pages counted once
        "peak_rss_mb_largest_process": round(usage.ru_maxrss / 1024, 1),
        "crawl_seconds": round(crawl_seconds, 2),
        "crawler_cpu_seconds": round(cpu, 2),
        "crawl_process_cpu_seconds": round(watch.own_cpu, 2),
        "worker_cpu_seconds": round(cpu - watch.own_cpu, 2),
        "breakdown": {stage: {"seconds": seconds, "ms_per_page": round(1000 * seconds / fetched, 3)}
                      for stage, seconds in sorted(stages.items())},
        "index_links_behind": links_behind,  # at the end: rows of links whose anchor texts the search index has not read
        "server_cpu_seconds": round(server_cpu, 2),
        "server_requests_per_second": round(server_rate, 1),
        "concurrency": concurrency,
        "processes": config.fetch.process_count,
        "order": config.frontier.order,
        "strategy": strategy,
    }
