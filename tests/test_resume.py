"""Stopping and resuming the crawler process: nothing lost, nothing fetched twice."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import typer
from warcio.archiveiterator import ArchiveIterator
from warcio.warcwriter import WARCWriter

from conftest import running
from focuscrawl.cli import _run
from focuscrawl.config import dump_config, load_config
from focuscrawl.crawler import Crawler
from focuscrawl.store import WarcArchive, lock_directory
from focuscrawl.testweb.synthetic import build_site, make_app, topic_config

pytestmark = pytest.mark.slow

CONCURRENCY = 4
COMMIT_PAGES = 8
IN_FLIGHT = CONCURRENCY + COMMIT_PAGES - 1  # fetching or judging, or stored in a group not yet committed


def focuscrawl(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "focuscrawl", *map(str, args)], capture_output=True, text=True,
                          timeout=120, **kwargs)


def start_crawl(config_path, out) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "focuscrawl", "crawl", str(config_path), "--out", str(out), "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for_requests(server, count: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while len(server.requests) < count:
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, "the crawler made no progress"
        time.sleep(0.01)


def site_and_config(serve, tmp_path, processes: int = 1):
    site = build_site(pages=300, hosts=4, seed=5)
    server = serve(make_app(site))
    config = topic_config(site, server.port, tmp_path / "examples", topic="files", strategy="best-first",
                          budget={"max_pages": 10_000}, politeness={"min_interval": 0.03},
                          fetch={"concurrency": CONCURRENCY, "loopback_only": True, "processes": processes},
                          store={"commit_pages": COMMIT_PAGES})
    path = tmp_path / "crawl.yml"
    dump_config(config, path)
    return site, server, path


def workers_of(process: subprocess.Popen) -> list[int]:
    """The crawl's judging worker processes (its children)."""
    return [int(pid) for pid in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()]


def reachable_urls(site) -> set[str]:
    """Every page reachable from the host roots, which list each host's first 20 pages."""
    frontier = [i for host in site.hosts for i in [j for j, p in enumerate(site.pages) if p.host == host][:20]]
    seen = set(frontier)
    while frontier:
        for target in site.pages[frontier.pop()].links:
            if target not in seen:
                seen.add(target)
                frontier.append(target)
    return {site.pages[i].url for i in seen} | {f"http://{h}/" for h in site.hosts}


def assert_complete_and_once(site, server, directory, in_flight_allowance: int) -> None:
    db = sqlite3.connect(directory / "crawl.db")
    fetch_rows = Counter(url for (url,) in db.execute("SELECT url FROM fetches"))
    assert set(fetch_rows) == reachable_urls(site)  # nothing lost
    assert max(fetch_rows.values()) == 1  # every URL recorded once
    page_requests = Counter(f"{host}{path}" for _, host, path in server.requests if path != "/robots.txt")
    repeated = [url for url, count in page_requests.items() if count > 1]
    assert len(repeated) <= in_flight_allowance and max(page_requests.values()) <= 2, repeated


@pytest.mark.parametrize("signum, processes", [(signal.SIGKILL, 1), (signal.SIGTERM, 1), (signal.SIGINT, 1),
                                               (signal.SIGKILL, 2), (signal.SIGTERM, 2)],
                         ids=lambda value: value.name if isinstance(value, signal.Signals) else f"processes{value}")
def test_stop_then_resume_fetches_nothing_twice_and_loses_nothing(serve, tmp_path, signum, processes):
    """With worker processes too (``fetch.processes``): a page judged in a worker but not yet
    stored is in flight, fetched again on resume at most once."""
    site, server, config_path = site_and_config(serve, tmp_path, processes)
    out = tmp_path / "crawl"
    process = start_crawl(config_path, out)
    wait_for_requests(server, 80, process)
    workers = workers_of(process)
    assert len(workers) == processes - 1
    process.send_signal(signum)
    returncode = process.wait(timeout=30)
    status = json.loads(focuscrawl("status", out, "--json").stdout)
    assert status["state"] == "stopped" and 0 < status["pages_fetched"] < len(reachable_urls(site))
    if signum != signal.SIGKILL:
        assert returncode == 0 and status["stop_reason"] == f"signal {signum.name}"
    resumed = focuscrawl("resume", out, "-q")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(focuscrawl("status", out, "--json").stdout)["state"] == "finished"
    assert_complete_and_once(site, server, out, in_flight_allowance=IN_FLIGHT)
    if processes > 1:  # the killed crawl's workers do not outlive it
        deadline = time.monotonic() + 5
        while any(map(running, workers)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(map(running, workers)), "a judging worker outlived its crawl"


def test_a_killed_crawls_directory_is_free_at_once_though_its_forked_workers_still_run(serve, tmp_path):
    """Forked judging workers share the crawl's open files: were the directory's lock among them,
    a kill -9 would leave it held until they notice (a second or more), and `resume` refused."""
    _, server, config_path = site_and_config(serve, tmp_path, processes=2)
    out = tmp_path / "crawl"
    process = start_crawl(config_path, out)
    wait_for_requests(server, 40, process)
    workers = workers_of(process)
    assert workers and all(str(config_path).encode() in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in workers)
    process.kill()
    process.wait(timeout=30)
    lock_directory(out).close()  # raises CrawlDirError while anyone holds the lock (the workers: a second more)


class FillingDisk:
    """An archive file with room for ``room`` more bytes: a write that does not fit puts on disk
    what fits, then fails as a full disk does (ENOSPC)."""

    def __init__(self, file, room: int):
        self.file, self.room = file, room

    def write(self, data) -> int:
        if len(data) > self.room:
            self.file.write(bytes(data[:self.room]))
            self.file.flush()
            self.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)


@pytest.mark.parametrize("full", ["archive", "database"])
def test_a_full_disk_stops_the_crawl_with_one_line_and_a_resume_loses_nothing(serve, tmp_path, monkeypatch, capsys, full):
    site, server, config_path = site_and_config(serve, tmp_path)
    out = tmp_path / "crawl"
    crawler = Crawler.create(load_config(config_path), out)
    if full == "archive":
        opened = WarcArchive._open

        def open_filling(archive):
            opened(archive)
            archive._file = FillingDisk(archive._file, room=100_000)
            archive._writer = WARCWriter(archive._file, gzip=True)

        monkeypatch.setattr(WarcArchive, "_open", open_filling)
    else:  # a real SQLITE_FULL: the database may not grow by more than 30 pages of 4 KiB
        pages = crawler.store.db.execute("PRAGMA page_count").fetchone()[0]
        crawler.store.db.execute(f"PRAGMA max_page_count = {pages + 30}")
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level  # _run logs to the crawl's own file
    try:
        with pytest.raises(typer.Exit) as stopped:
            _run(crawler, quiet=True)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    monkeypatch.undo()
    assert stopped.value.exit_code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"error: {out}: the disk is full (") and f"focuscrawl resume {out}" in error
    status = json.loads(focuscrawl("status", out, "--json").stdout)
    assert 0 < status["pages_fetched"] < len(reachable_urls(site)) and status["errors"] == 0  # no page written off
    if full == "archive":
        assert status["stop_reason"].startswith("disk full: [Errno 28]")

    resumed = focuscrawl("resume", out, "-q")
    assert resumed.returncode == 0, resumed.stderr
    assert_complete_and_once(site, server, out, in_flight_allowance=IN_FLIGHT)
    archived = set()
    for path in sorted((out / "warc").glob("*.warc.gz")):
        with open(path, "rb") as handle:  # read to its end: no half-written record is left in it
            archived |= {r.rec_headers.get_header("WARC-Target-URI") for r in ArchiveIterator(handle)
                         if r.rec_type == "response"}
    db = sqlite3.connect(out / "crawl.db")
    assert {url for (url,) in db.execute("SELECT url FROM fetches WHERE status = 200")} <= archived


@pytest.mark.parametrize("stage", ["no tables", "no seeds"])
def test_a_crawl_killed_while_it_was_created_is_started_again_and_resume_says_so(serve, make_config, tmp_path, stage):
    from focuscrawl.store import CrawlDirError

    server = serve({"/": "<html><body><a href='/a'>a</a></body></html>", "/a": "<html><body>a</body></html>"})
    directory = tmp_path / "crawl"
    directory.mkdir()
    with sqlite3.connect(directory / "crawl.db") as db:  # what a kill leaves at each stage of creation
        if stage == "no seeds":
            db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    with pytest.raises(CrawlDirError, match="before its seeds were stored"):
        Crawler.open(directory)
    config = make_config(seeds=[server.url("/")])
    asyncio.run(Crawler.create(config, directory).run())
    with sqlite3.connect(directory / "crawl.db") as db:
        assert db.execute("SELECT COUNT(*) FROM fetches WHERE status = 200").fetchone()[0] == 2
