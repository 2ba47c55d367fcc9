"""Stopping and resuming the crawler process: nothing lost, nothing fetched twice."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter

import yaml

from focuscrawl.testweb.synthetic import build_site, make_app

CONCURRENCY = 4


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


def site_and_config(serve, tmp_path):
    site = build_site(pages=300, hosts=4, seed=5)
    server = serve(make_app(site))
    positives, negatives = site.examples("files", 6)
    for kind, texts in (("pos", positives), ("neg", negatives)):
        (tmp_path / kind).mkdir()
        for i, text in enumerate(texts):
            (tmp_path / kind / f"{i}.txt").write_text(text)
    config = {
        "seeds": [f"http://{h}/" for h in site.hosts],
        "topic": {"positive": ["pos"], "negative": ["neg"]},
        "strategy": "best-first",
        "budget": {"max_pages": 10_000},
        "politeness": {"min_interval": 0.03},
        "fetch": {"concurrency": CONCURRENCY, "loopback_only": True},
        "host_map": {"hosts": {h: f"127.0.0.1:{server.port}" for h in site.hosts}},
    }
    path = tmp_path / "crawl.yml"
    path.write_text(yaml.safe_dump(config))
    return site, server, path


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


def test_resume_after_kill_9_fetches_nothing_twice_and_loses_nothing(serve, tmp_path):
    site, server, config_path = site_and_config(serve, tmp_path)
    out = tmp_path / "crawl"
    process = start_crawl(config_path, out)
    wait_for_requests(server, 100, process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    status = json.loads(focuscrawl("status", out, "--json").stdout)
    assert status["state"] == "stopped" and 0 < status["pages_fetched"] < len(reachable_urls(site))
    resumed = focuscrawl("resume", out, "-q")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(focuscrawl("status", out, "--json").stdout)["state"] == "finished"
    assert_complete_and_once(site, server, out, in_flight_allowance=CONCURRENCY)


def test_sigterm_stops_cleanly_and_resume_completes(serve, tmp_path):
    site, server, config_path = site_and_config(serve, tmp_path)
    out = tmp_path / "crawl"
    process = start_crawl(config_path, out)
    wait_for_requests(server, 60, process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    status = json.loads(focuscrawl("status", out, "--json").stdout)
    assert status["state"] == "stopped" and status["stop_reason"] == "signal SIGTERM"
    assert focuscrawl("resume", out, "-q").returncode == 0
    assert_complete_and_once(site, server, out, in_flight_allowance=CONCURRENCY)
    assert os.path.exists(out / "models" / "critic.pkl")
