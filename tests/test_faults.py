"""The fault web crawled as a user would (the command line), with short timeouts: the crawl ends
at its budget, every fault leaves a fetch with its reason, traps are cut, and ``status`` says
what happened. ``benchmarks/faults.py`` crawls it at default settings."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest
import yaml

from focuscrawl.testweb import faults
from focuscrawl.testweb.server import ThreadedServer

BUDGET = 120


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    """One crawl of the fault web shared by the tests below: (crawl directory, server)."""
    server = ThreadedServer(faults.make_app())
    directory = tmp_path_factory.mktemp("faults")
    config = faults.crawl_config(server.port, BUDGET)
    config["politeness"] = {"min_interval": 0.0}
    # total_timeout leaves room for the loop being busy parsing the page of 100 000 links (processes: 1):
    # 5 MB of /huge-chunked must reach its cap before the timer gives up, even on a loaded 2-core machine
    config["fetch"] = {"connect_timeout": 1, "read_timeout": 2, "total_timeout": 8, "retries": 1, "backoff": 0.01,
                       "concurrency": 16, "processes": 1}
    (directory / "faults.yml").write_text(yaml.safe_dump(config))
    try:
        finished = subprocess.run([sys.executable, "-m", "focuscrawl", "crawl", str(directory / "faults.yml"),
                                   "--out", str(directory / "crawl"), "--quiet"],
                                  capture_output=True, text=True, timeout=240)  # a hang fails the test
        assert finished.returncode == 0, finished.stderr
        assert "Traceback" not in finished.stderr
        yield directory / "crawl", server
    finally:
        server.stop()


def outcomes(directory) -> dict[str, tuple]:
    """URL -> (status, error, refused) of its last fetch; skipped URLs -> (None, skip reason, None)."""
    with sqlite3.connect(directory / "crawl.db") as db:
        rows = db.execute("SELECT u.url, f.status, f.error, f.refused FROM fetches f JOIN urls u ON u.id = f.url_id"
                          " ORDER BY f.id").fetchall()
        skipped = db.execute("SELECT url, skip_reason FROM urls WHERE skip_reason IS NOT NULL").fetchall()
    found = {url: (None, reason, None) for url, reason in skipped}
    found.update({url: (status, error, refused) for url, status, error, refused in rows})
    return found


def test_every_fault_of_the_web_leaves_a_fetch_with_its_reason(crawled):
    directory, _ = crawled
    seen = outcomes(directory)
    www = {path: seen[faults.url("www", path)] for path in faults.PAGE_FAULTS}
    expected = {
        "/reset": "connection broken", "/tarpit": "gave up after fetch.total_timeout 8 s", "/hang": "timeout",
        "/gzip-bomb": "decompressed body exceeds", "/deflate-bomb": "decompressed body exceeds",
        "/endless": "download aborted", "/loop/a": "redirect loop", "/chain/0": "more than 5 redirects",
        "/type/wrong": "MIME type image/png is not in fetch.mime_allow",
        "/huge": "body of 50000000 bytes exceeds", "/huge-chunked": "download aborted",
        "/type/binary": "cannot decode body",
    }
    for path, reason in expected.items():
        assert reason in (www[path][1] or ""), (path, www[path])
    refusals = {"/gzip-bomb", "/deflate-bomb", "/endless", "/type/wrong", "/huge", "/huge-chunked"}
    assert {path for path, (_, _, refused) in www.items() if refused} == refusals
    for path in ("/type/missing", "/charset/lie", "/charset/utf16", "/charset/mixed",
                 "/charset/nul", "/links", "/malformed"):
        assert www[path][:2] == (200, None), (path, www[path])
    assert seen[faults.url("storm")][0] == 503
    assert seen[faults.url("silent")][1].startswith(("robots.txt unreachable: timeout", "gave up after"))
    assert seen[faults.url("robots-slow")][1].startswith(("robots.txt unreachable: timeout", "gave up after"))
    assert seen[faults.url("robots-5xx")][1:] == ("robots.txt answered 500: everything disallowed", 1)
    for host in ("robots-huge", "robots-html", "busy", "xn--bcher-kva"):
        assert seen[faults.url(host)][:2] == (200, None), host
    assert not any("internal error" in (error or "") for _, error, _ in seen.values())


def test_the_crawl_ends_at_its_budget_and_status_tells_what_went_wrong(crawled):
    directory, _ = crawled
    shown = subprocess.run([sys.executable, "-m", "focuscrawl", "status", str(directory)],
                           capture_output=True, text=True, check=True).stdout
    assert "stop_reason: budget: max_pages 120" in shown
    for reason in ("HTTP 503", "refused: MIME type image/png", "refused: robots.txt answered 500", "redirect loop"):
        assert any(line.startswith("failure: ") and reason in line for line in map(str.strip, shown.splitlines())), reason
    assert "http://" not in "".join(line for line in shown.splitlines() if "failure:" in line)  # grouped, not per URL


def test_traps_are_cut_and_malformed_links_never_reach_the_frontier(crawled):
    directory, _ = crawled
    with sqlite3.connect(directory / "crawl.db") as db:
        urls = [url for (url,) in db.execute("SELECT url FROM urls WHERE skip_reason IS NULL")]
        trap_skips = db.execute("SELECT COUNT(*) FROM urls WHERE skip_reason LIKE 'crawler trap:%'").fetchone()[0]
    sessions = [url for url in urls if url.startswith(faults.url("sessions", ""))]
    assert len(sessions) <= 4 and not any("PHPSESSID" in url for url in sessions)  # one URL per page, whatever the id
    assert trap_skips > 0  # relative links ever deeper
    assert len([url for url in urls if "/many/" in url]) == faults.MANY_LINKS  # the page of 100 000 links, all queued
    assert faults.url("xn--bcher-kva", "/idn") in urls  # an IDN link in its ASCII form
    assert all(url.startswith(("http://", "https://")) and " " not in url and "\0" not in url and "@" not in url
               for url in urls)


def test_a_429_is_tried_again_only_after_its_retry_after(crawled):
    _, server = crawled
    asked = [when for when, host, path in server.requests if host == "busy.faults.test" and path == "/"]
    assert len(asked) == 2 and asked[1] - asked[0] >= faults.RETRY_AFTER - 0.05
