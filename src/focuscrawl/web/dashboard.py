"""The crawl dashboard: what a crawl directory says about its crawl (running or not), and
controlling it. Stop is SIGTERM to the crawl's process, which stops as after Ctrl-C (everything
committed stays; resume goes on); pause is SIGUSR1 (the process waits, fetches in flight end),
and resume of a paused crawl SIGUSR2; resume of a stopped crawl starts ``focuscrawl resume``
with the crawl's own config, so nothing is fetched outside the crawl's rules."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import closing
from pathlib import Path

from focuscrawl.store import CrawlDir, CrawlDirError, Queries, crawl_status, lock_directory, read_only

SERIES_POINTS = 400  # harvest-log entries a chart gets at most (evenly thinned)


class ControlError(ValueError):
    """A stop or resume that cannot be done now, with why."""


def dashboard_state(directory: Path) -> dict:
    """Status figures, errors by kind, hosts, and the harvest log as series for the charts."""
    with closing(read_only(directory)) as db:
        state = crawl_status(db)
        queries = Queries(db)
        state["failures_by_reason"] = [{"reason": reason, "count": count} for reason, count in queries.failures_by_reason()]
        state["hosts"] = [{"host": host, "fetched": fetched, "queued": queued, "status": status or "ok"}
                          for host, fetched, queued, status in queries.hosts_by_pages()]
        meta = queries.meta()
    state["series"] = harvest_series(CrawlDir(directory).harvest_log)
    state["pid"] = int(meta.get("pid", 0) or 0) if state["state"] in ("running", "paused") else None
    return state


def harvest_series(path: Path) -> list[dict]:
    """The harvest log's entries (pages, harvest rate, frontier, pages per topic, time), thinned."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a kill
            continue
        entries.append({key: entry.get(key) for key in ("pages", "harvest_rate", "frontier", "topics", "time")})
    step = max(1, -(-len(entries) // SERIES_POINTS))
    thinned = entries[::step]
    if entries and thinned[-1] is not entries[-1]:
        thinned.append(entries[-1])
    return thinned


def stop_crawl(directory: Path) -> int:
    """Ask the running (or paused) crawl to stop (SIGTERM); returns its process id."""
    return _signal(directory, signal.SIGTERM, ("running", "paused"), "stopped")


def pause_crawl(directory: Path) -> int:
    """Ask the running crawl to pause (SIGUSR1); returns its process id."""
    return _signal(directory, signal.SIGUSR1, ("running",), "paused")


def _signal(directory: Path, signum: int, states: tuple[str, ...], done: str) -> int:
    state = dashboard_state(directory)
    if state["state"] not in states or not state["pid"] or not _crawled_now(directory):
        raise ControlError(f"the crawl in {directory} is not {' or '.join(states)} ({state['state']})")
    try:
        os.kill(state["pid"], signum)
    except OSError as error:
        raise ControlError(f"the crawl in {directory} could not be {done}: {error}") from None
    return state["pid"]


def _crawled_now(directory: Path) -> bool:
    """Whether a process holds the crawl's lock (a recorded pid may belong to another process by now)."""
    try:
        lock_directory(directory).close()
    except CrawlDirError:
        return True
    return False


def resume_crawl(directory: Path, allow_loopback: bool = False) -> int:
    """Let a paused crawl go on (SIGUSR2), or start ``focuscrawl resume`` on a crawl that is not
    running, refusing loopback addresses unless allowed; returns the crawl's process id."""
    state = dashboard_state(directory)
    if state["state"] == "paused":
        return _signal(directory, signal.SIGUSR2, ("paused",), "resumed")
    if state["state"] == "running":
        raise ControlError(f"the crawl in {directory} is running already")
    log = open(CrawlDir(directory).resume_output, "ab")
    guard = [] if allow_loopback else ["--refuse-loopback"]
    process = subprocess.Popen([sys.executable, "-m", "focuscrawl", "resume", str(directory), "-q", *guard],
                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    return process.pid
