"""Whole crawls against real loopback servers: politeness, links, storage, strategies."""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
from itertools import repeat
from pathlib import Path

import numpy as np
import pytest
from aiohttp import web
from warcio.archiveiterator import ArchiveIterator

from focuscrawl import judging, text
from focuscrawl.apprentice import Apprentice
from focuscrawl.crawler import Crawler
from focuscrawl.judging import JUDGES_PREFIX, HandedJudges, Judge, JudgePool
from focuscrawl.learn import Critic
from focuscrawl.parse import parse_html
from focuscrawl.store import CrawlDirError
from focuscrawl.store.link_rows import link_rows
from focuscrawl.testweb.synthetic import build_site, make_app, topic_config, true_harvest
from focuscrawl.text import Analyzer, RecentFrequencies


def crawl(config, directory) -> sqlite3.Connection:
    asyncio.run(Crawler.create(config, directory).run())
    return sqlite3.connect(directory / "crawl.db")


def chain_site(n: int) -> dict[str, str]:
    return {f"/p{i}": f"<html><body><p>page {i}</p><a href='/p{i + 1}'>next</a></body></html>" for i in range(n)}


def test_min_interval_between_requests_to_one_host_is_respected(serve, make_config, tmp_path):
    server = serve(chain_site(6))
    config = make_config(seeds=[server.url("/p0")], politeness={"min_interval": 0.2, "per_host_connections": 2})
    crawl(config, tmp_path / "c")
    starts = [t for t, _, _ in server.requests]
    assert len(starts) == 1 + 6 + 1  # robots.txt, six pages, the 404 at the end of the chain
    assert min(b - a for a, b in zip(starts, starts[1:])) >= 0.19


def test_a_worker_that_fails_looking_for_a_url_passes_its_turn_on(serve, make_config, tmp_path):
    """The workers wait for a URL in turn (``crawler.Turns``): the one the politeness timer wakes,
    with nothing in flight, is the only one looking. When looking raises (a database error), the
    worker ends, and the next one looks: the crawl goes on to its end instead of waiting forever."""
    server = serve(chain_site(4))
    crawler = Crawler.create(make_config(seeds=[server.url("/p0")], politeness={"min_interval": 0.3}), tmp_path / "c")
    frontier, failed = crawler.frontier, []
    next_ready = frontier.next_ready

    def failing_once():
        if not failed and frontier.done >= 2 and frontier.in_flight == 0 and frontier.seconds_to_next() == 0.0:  # woken by the timer
            failed.append(frontier.done)
            raise sqlite3.OperationalError("database is locked")
        return next_ready()

    frontier.next_ready = failing_once
    asyncio.run(asyncio.wait_for(crawler.run(), 30))
    db = sqlite3.connect(tmp_path / "c" / "crawl.db")
    assert failed and db.execute("SELECT COUNT(*) FROM fetches WHERE status = 200").fetchone() == (4,)


def test_a_host_is_asked_again_no_sooner_than_min_interval_after_it_answered(serve, make_config, tmp_path):
    """A slow host: the interval runs from its answer too (as Heritrix's delay runs from the end of
    a fetch), so a request that reached the server late is never followed closer than the interval."""
    latency, interval = 0.3, 0.2
    pages = {"/": "".join(f"<a href='/p{i}'>{i}</a>" for i in range(6)), **{f"/p{i}": f"page {i}" for i in range(6)}}

    async def slow(request):
        await asyncio.sleep(latency)
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        return web.Response(text=pages[request.path], content_type="text/html")

    server = serve(slow)
    crawl(make_config(seeds=[server.url("/")], politeness={"min_interval": interval, "per_host_connections": 1}),
          tmp_path / "c")
    arrivals = [t for t, _, _ in server.requests]
    assert len(arrivals) == 8  # robots.txt, the root, six pages
    gaps_after_answers = [b - (a + latency) for a, b in zip(arrivals, arrivals[1:])]
    assert min(gaps_after_answers) >= interval - 0.01


def test_crawl_delay_from_robots_is_honoured_up_to_the_cap(serve, make_config, tmp_path):
    server = serve(chain_site(4), robots="User-agent: *\nCrawl-delay: 0.25\n")
    crawl(make_config(seeds=[server.url("/p0")]), tmp_path / "a")
    gaps = [b - a for (a, _, _), (b, _, _) in zip(server.requests, server.requests[1:])]
    assert min(gaps) >= 0.24
    capped = serve(chain_site(4), robots="User-agent: *\nCrawl-delay: 60\n")
    crawl(make_config(seeds=[capped.url("/p0")], politeness={"crawl_delay_cap": 0.1}), tmp_path / "b")
    assert len(capped.requests) == 6


def test_robots_disallowed_pages_are_recorded_and_never_requested(serve, make_config, tmp_path):
    pages = {"/": "<a href='/private/x'>x</a><a href='/private/ok'>ok</a><a href='/a.pdf'>pdf</a><a href='/pub'>p</a>",
             "/private/x": "secret", "/private/ok": "fine", "/pub": "public"}
    server = serve(pages, robots="User-agent: *\nDisallow: /private/\nAllow: /private/ok\nDisallow: /*.pdf$\n")
    db = crawl(make_config(seeds=[server.url("/")]), tmp_path / "c")
    assert sorted(server.paths()) == ["/", "/private/ok", "/pub", "/robots.txt"]
    refused = {url.rpartition("/")[2] for (url,) in db.execute("SELECT url FROM fetches WHERE error = 'disallowed by robots.txt'")}
    assert refused == {"x", "a.pdf"}


def test_exact_duplicates_are_recognised_and_not_expanded(serve, make_config, tmp_path):
    same = "<html><body><p>the same words</p><a href='/only-from-copy'>x</a></body></html>"
    pages = {"/": "<a href='/one'>1</a> <a href='/two'>2</a>", "/one": same, "/two": same, "/only-from-copy": "leaf"}
    server = serve(pages)
    db = crawl(make_config(seeds=[server.url("/")]), tmp_path / "c")
    rows = dict(db.execute("SELECT u.url, d.duplicate_of FROM documents d JOIN urls u ON u.id = d.url_id"))
    assert rows[server.url("/one")] is None
    original_id = db.execute("SELECT id FROM urls WHERE url = ?", (server.url("/one"),)).fetchone()[0]
    assert rows[server.url("/two")] == original_id
    assert server.paths().count("/only-from-copy") == 1


def test_nofollow_links_and_pages_are_not_followed(serve, make_config, tmp_path):
    pages = {
        "/": "<a rel='nofollow' href='/hidden'>h</a><a href='/meta'>m</a><a href='/noindex'>n</a>",
        "/meta": "<html><head><meta name='robots' content='nofollow'></head><body><a href='/hidden2'>h</a></body></html>",
        "/noindex": "<html><head><meta name='robots' content='noindex'></head><body><p>words</p><a href='/kept'>k</a></body></html>",
        "/hidden": "x", "/hidden2": "x", "/kept": "kept",
    }
    server = serve(pages)
    db = crawl(make_config(seeds=[server.url("/")]), tmp_path / "c")
    assert "/hidden" not in server.paths() and "/hidden2" not in server.paths()
    assert "/kept" in server.paths()
    text, noindex = db.execute(
        "SELECT d.text, d.noindex FROM documents d JOIN urls u ON u.id = d.url_id WHERE u.url = ?", (server.url("/noindex"),)
    ).fetchone()
    assert text is None and noindex == 1
    assert db.execute("SELECT COUNT(*) FROM links WHERE nofollow = 1").fetchone()[0] == 2


def test_a_nofollow_target_is_still_crawled_when_a_followable_link_finds_it(serve, make_config, tmp_path):
    pages = {"/": "<a rel='nofollow' href='/t'>t</a><a href='/b'>b</a>", "/b": "<a href='/t'>t</a>", "/t": "target"}
    server = serve(pages)
    crawl(make_config(seeds=[server.url("/")]), tmp_path / "c")
    assert server.paths().count("/t") == 1


def test_a_pages_links_to_one_url_differ_only_by_their_own_nofollow(serve, make_config, tmp_path):
    """Each URL of a page is looked at once; a link's own rel="nofollow" still holds for that link."""
    pages = {"/": "<a rel='nofollow' href='/t'>t</a><a href='/t#x'>t again</a><a rel='nofollow' href='/n'>n</a>"
                  "<a rel='nofollow' href='/n'>n again</a><a href='/t'>t</a>",
             "/t": "target", "/n": "never"}
    server = serve(pages)
    db = crawl(make_config(seeds=[server.url("/")]), tmp_path / "c")
    assert server.paths().count("/t") == 1 and "/n" not in server.paths()
    assert db.execute("SELECT state, skip_reason FROM urls WHERE url = ?", (server.url("/n"),)).fetchone()[1] == "nofollow"
    assert sorted(db.execute("SELECT anchor_text, nofollow FROM links l JOIN urls u ON u.id = l.target_id"
                             " WHERE u.url = ?", (server.url("/t"),))) == [("t", 1), ("t again\nt", 0)]
    assert db.execute("SELECT anchor_text, nofollow FROM links l JOIN urls u ON u.id = l.target_id WHERE u.url = ?",
                      (server.url("/n"),)).fetchall() == [("n\nn again", 1)]  # a row per target and nofollow


def test_a_running_crawl_keeps_its_start_ups_objects_out_of_garbage_collection_and_thaws_them_after(
        serve, make_config, tmp_path):
    """While pages are fetched, what the crawl made before (libraries, models, frontier) is frozen
    (``judging.heap_frozen``) and the youngest generation is collected less often; a fork inside a
    frozen heap leaves it frozen; after the crawl, nothing is and the thresholds are Python's again."""
    frozen_while_serving, young_while_serving = [], []

    async def page(request):
        frozen_while_serving.append(gc.get_freeze_count())
        young_while_serving.append(gc.get_threshold()[0])
        return web.Response(text="<p>words</p><a href='/next'>next</a>", content_type="text/html")

    server = serve(page)
    thresholds = gc.get_threshold()
    crawl(make_config(seeds=[server.url("/")], budget={"max_pages": 3}), tmp_path / "c")
    assert len(frozen_while_serving) >= 3 and all(count > 1000 for count in frozen_while_serving[1:])
    assert young_while_serving[1:] and set(young_while_serving[1:]) == {judging.YOUNG_OBJECTS}
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds
    with judging.heap_frozen():
        outer = gc.get_freeze_count()
        with judging.heap_frozen():
            pass
        assert gc.get_freeze_count() >= outer > 0 and gc.get_threshold()[0] == judging.YOUNG_OBJECTS
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds


def test_broken_and_undecodable_pages_do_not_stop_the_crawl(serve, make_config, tmp_path):
    pages = {
        "/": "<html><body><div><p>unclosed <b>bold <a href='/bin'>bin</a> <a href=/latin>latin</a><table><td>cell",
        "/bin": bytes(range(1, 32)) * 300,
        "/latin": "<html><body><p>Café déjà vu</p><a href='/end'>end</a></body></html>".encode("windows-1252"),
        "/end": "<p>the end</p>",
    }
    server = serve(pages, headers={"/latin": {"Content-Type": "text/html; charset=windows-1252"}})
    db = crawl(make_config(seeds=[server.url("/")]), tmp_path / "c")
    errors = dict(db.execute("SELECT url, error FROM fetches"))
    assert errors[server.url("/bin")].startswith("cannot decode body")
    assert errors[server.url("/latin")] is None and "/end" in server.paths()
    assert "Café déjà vu" in db.execute("SELECT text FROM documents WHERE text LIKE 'Caf%'").fetchone()[0]


def test_max_depth_and_deny_patterns_limit_the_crawl(serve, make_config, tmp_path):
    pages = {**chain_site(5), "/p1": "<a href='/p2'>n</a><a href='/skip-me'>s</a>", "/skip-me": "x"}
    server = serve(pages)
    config = make_config(seeds=[server.url("/p0")], budget={"max_depth": 2}, urls={"deny": ["skip-me"]})
    db = crawl(config, tmp_path / "c")
    assert sorted(p for p in server.paths() if p != "/robots.txt") == ["/p0", "/p1", "/p2"]
    reasons = dict(db.execute("SELECT url, skip_reason FROM urls WHERE state = 3"))
    assert reasons[server.url("/p3")] == "beyond max depth"
    assert reasons[server.url("/skip-me")].startswith("matches deny pattern")


def test_warc_holds_a_request_and_a_response_per_fetch(serve, make_config, tmp_path):
    server = serve(chain_site(3))
    crawl(make_config(seeds=[server.url("/p0")]), tmp_path / "c")
    records = []
    for path in sorted((tmp_path / "c" / "warc").glob("*.warc.gz")):
        with open(path, "rb") as stream:
            for record in ArchiveIterator(stream):
                records.append((record.rec_type, record.rec_headers.get_header("WARC-Target-URI"),
                                record.content_stream().read() if record.rec_type == "response" else b""))
    responses = {uri: body for kind, uri, body in records if kind == "response"}
    requests = {uri for kind, uri, _ in records if kind == "request"}
    assert set(responses) == requests == {server.url(p) for p in ("/robots.txt", "/p0", "/p1", "/p2", "/p3")} - {server.url("/robots.txt")}
    assert b"page 1" in responses[server.url("/p1")]


def synthetic_crawl(serve, make_config, tmp_path, strategy: str, budget: int) -> float:
    """Share of truly on-topic pages among the first ``budget`` fetches of a 4-topic site."""
    site = build_site(pages=400, hosts=4, seed=3)
    server = serve(make_app(site))
    config = topic_config(site, server.port, tmp_path / "examples", strategy=strategy, budget={"max_pages": budget},
                          **make_config(seeds=["http://x/"]).model_dump(include={"politeness", "fetch"}))
    db = crawl(config, tmp_path / strategy)
    fetched = [url for (url,) in db.execute("SELECT url FROM fetches WHERE status = 200 ORDER BY id")]
    return true_harvest(site, fetched, "networking")


def test_best_first_collects_more_on_topic_pages_than_breadth_first(serve, make_config, tmp_path):
    best_first = synthetic_crawl(serve, make_config, tmp_path, "best-first", 120)
    breadth_first = synthetic_crawl(serve, make_config, tmp_path, "bfs", 120)
    assert best_first > breadth_first + 0.15, (best_first, breadth_first)


def test_per_host_connection_limit_holds_under_many_workers(serve, make_config, tmp_path):
    live = {"now": 0, "most": 0}

    async def slow_page(request):
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\nSitemap: http://example.org/sitemap.xml\n")
        live["now"] += 1
        live["most"] = max(live["most"], live["now"])
        await asyncio.sleep(0.1)
        live["now"] -= 1
        links = "".join(f"<a href='/p{i}'>p</a>" for i in range(12)) if request.path == "/" else ""
        return web.Response(text=f"<html><body>{links}</body></html>", content_type="text/html")

    server = serve(slow_page)
    config = make_config(seeds=[server.url("/")], fetch={"concurrency": 16}, politeness={"per_host_connections": 3})
    db = crawl(config, tmp_path / "c")
    assert live["most"] == 3
    assert db.execute("SELECT url FROM sitemaps").fetchall() == [("http://example.org/sitemap.xml",)]


def test_language_check_rejects_foreign_pages_without_following_their_links(serve, make_config, tmp_path):
    pages = {
        "/": "<p>This is the page about the network and all of the things that it does for us.</p>"
             "<a href='/de'>de</a>",
        "/de": "<p>Das ist die Seite über das Netz und alles, was es für uns tut, und es ist nicht mehr als das.</p>"
               "<a href='/behind-de'>x</a>",
        "/behind-de": "x",
    }
    server = serve(pages)
    config = make_config(seeds=[server.url("/")], text={"language_check": True, "min_stopword_score": 1})
    db = crawl(config, tmp_path / "c")
    scores = dict(db.execute("SELECT u.url, d.language_score FROM documents d JOIN urls u ON u.id = d.url_id"))
    assert scores[server.url("/")] > 0 > scores[server.url("/de")]
    assert db.execute("SELECT relevance FROM documents WHERE language_score < 0").fetchone() == (0.0,)
    assert "/behind-de" not in server.paths()


def test_max_seconds_ends_the_run_and_records_why(serve, make_config, tmp_path):
    server = serve(chain_site(50))
    config = make_config(seeds=[server.url("/p0")], politeness={"min_interval": 0.1}, budget={"max_seconds": 0.5})
    crawl(config, tmp_path / "c")
    meta = dict(sqlite3.connect(tmp_path / "c" / "crawl.db").execute("SELECT key, value FROM meta"))
    assert meta["state"] == "finished" and meta["stop_reason"] == "budget: max_seconds 0.5"
    assert 2 <= len(server.requests) <= 8


def test_a_host_gone_bad_is_dropped_and_the_crawl_still_ends(serve, make_config, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    links = "".join(f"<a href='http://down.test/{i}'>d</a>" for i in range(3))
    pages = {"/": f"{links}<a href='/more'>more</a>", "/more": "<a href='http://down.test/late'>late</a>"}
    server = serve(pages)
    config = make_config(seeds=[server.url("/")], fetch={"retries": 0, "concurrency": 1},
                         host_map={"hosts": {"down.test": f"127.0.0.1:{closed_port}"}})
    db = crawl(config, tmp_path / "c")
    assert db.execute("SELECT COUNT(*) FROM urls WHERE state IN (0, 1)").fetchone() == (0,)
    assert db.execute("SELECT status FROM hosts WHERE host = 'down.test'").fetchone() == ("bad",)
    skipped = {url for (url,) in db.execute("SELECT url FROM urls WHERE skip_reason = 'host marked bad'")}
    assert "http://down.test/late" in skipped  # found after the host went bad: never queued


def test_redirect_to_another_host_goes_through_the_frontier(serve, make_config, tmp_path):
    target = serve({"/landing": "<p>landed</p>"})

    async def moved(request):
        if request.path == "/robots.txt":
            raise web.HTTPNotFound()
        raise web.HTTPMovedPermanently("http://mirror.test/landing")

    origin = serve(moved)
    config = make_config(seeds=[origin.url("/old")], host_map={"hosts": {"mirror.test": f"127.0.0.1:{target.port}"}})
    db = crawl(config, tmp_path / "c")
    rows = db.execute("SELECT url, status, redirects FROM fetches ORDER BY id").fetchall()
    assert [(url, status) for url, status, _ in rows] == [(origin.url("/old"), 301), ("http://mirror.test/landing", 200)]
    assert db.execute("SELECT COUNT(*) FROM links WHERE anchor_text IS NULL").fetchone() == (1,)


def test_a_meta_refresh_stub_is_a_redirect_not_a_document(serve, make_config, tmp_path):
    server = serve({
        "/": "<a href='/old.html'>the old page</a>",
        "/old.html": "<head><meta http-equiv='refresh' content='0;URL=new.html'></head>"
                     "<p>Redirecting to <a href='elsewhere.html'>elsewhere</a></p>",
        "/new.html": "<p>the page itself</p>",
        "/elsewhere.html": "<p>never fetched: the stub's own links are not followed</p>",
    })
    db = crawl(make_config(seeds=[server.url("/")]), tmp_path / "c")
    fetched = [url for (url,) in db.execute("SELECT url FROM fetches ORDER BY id")]
    assert fetched == [server.url("/"), server.url("/old.html"), server.url("/new.html")]
    documents = {url for (url,) in db.execute("SELECT u.url FROM documents d JOIN urls u ON u.id = d.url_id")}
    assert documents == {server.url("/"), server.url("/new.html")}


def test_malformed_responses_are_recorded_and_the_crawl_goes_on(serve, make_config, tmp_path):
    async def odd(request):
        if request.path == "/bad-location":
            return web.Response(status=302, headers={"Location": "http://127.0.0.1:99999/x"})
        if request.path == "/reason":
            return web.Response(status=200, reason="Très bien", text="<p>ok</p>", content_type="text/html")
        if request.path == "/":
            return web.Response(text="<a href='/bad-location'>a</a><a href='/reason'>b</a><a href='/end'>c</a>",
                                content_type="text/html")
        return web.Response(text="<p>end</p>", content_type="text/html")

    server = serve(odd)
    db = crawl(make_config(seeds=[server.url("/")]), tmp_path / "c")
    errors = dict(db.execute("SELECT url, error FROM fetches"))
    assert errors[server.url("/bad-location")].startswith("redirect to")
    assert errors[server.url("/reason")] is None and server.url("/end") in errors
    assert db.execute("SELECT COUNT(*) FROM urls WHERE state IN (0, 1)").fetchone() == (0,)


def test_one_process_at_a_time_per_crawl_directory(serve, make_config, tmp_path):
    server = serve(chain_site(2))
    first = Crawler.create(make_config(seeds=[server.url("/p0")]), tmp_path / "c")
    with pytest.raises(CrawlDirError, match="another focuscrawl process"):
        Crawler.open(tmp_path / "c")
    asyncio.run(first.run())
    asyncio.run(Crawler.open(tmp_path / "c").run())


def test_a_retrained_critic_reaches_the_running_judging_workers_without_starting_new_ones(make_config):
    """A new critic is handed to the workers through a file they read once (new workers would
    stall the crawl for their imports); the next page is judged by it."""
    site = build_site(pages=40, hosts=1, seed=3)
    positives, negatives = site.examples("networking", 8)
    critic = Critic("svm-linear").fit(positives, negatives)
    inverted = Critic("svm-linear").fit(negatives, positives)
    page = site.render(next(i for i, p in enumerate(site.pages) if p.topic == "networking")).encode()
    config = make_config(seeds=["http://x/"])
    pool = JudgePool(2)

    async def judge_twice():
        pool.use(Judge(config, critic, apprentice=False))
        first = await pool.judge(page, "http://x/a.html", "utf-8", "")
        workers = pool._pool.pids
        pool.use(Judge(config, inverted, apprentice=False))
        second = await pool.judge(page, "http://x/a.html", "utf-8", "")
        return first, second, workers, pool._pool.pids

    try:
        first, second, workers_before, workers_after = asyncio.run(judge_twice())
        folder = pool._handed.folder
    finally:
        pool.close()
    assert first.judgement.relevance > 0.5 > second.judgement.relevance
    assert workers_after == workers_before
    assert not folder.exists()  # the handed-over critics go with the pool


def test_a_judging_worker_that_dies_with_pages_waiting_is_replaced_once_and_every_page_is_judged(make_config):
    """Each page that was waiting on the killed worker is judged in the crawl's process; the
    first of them starts new workers, the others use them (a pool each would start processes)."""
    body = b"<html><body><p>" + b"routers and switches " * 200 + b"</p></body></html>"
    pool = JudgePool(3)  # two workers, forked: no loop runs yet
    pool.use(Judge(make_config(seeds=["http://x/"]), None, apprentice=False))
    victim = next(iter(pool._pool.pids))

    async def judge_while_one_dies():
        os.kill(victim, signal.SIGSTOP)  # the pages queue on it
        pages = [asyncio.ensure_future(pool.judge(body, f"http://x/{i}.html", "utf-8", "")) for i in range(8)]
        stopped = next(worker for worker in pool._pool._workers if worker.process.pid == victim)
        while len(stopped.waiting) < 2:
            await asyncio.sleep(0.01)
        first = pool._pool
        os.kill(victim, signal.SIGKILL)
        return first, await asyncio.gather(*pages)

    try:
        first, judged = asyncio.run(judge_while_one_dies())
        assert all(page.page is not None and "routers" in page.page.text for page in judged)
        assert pool._stopping == [first] and pool._pool is not first and victim not in pool._pool.pids
    finally:
        pool.close()


def test_a_judging_worker_judges_again_and_analyses_from_the_terms_of_the_pages_it_judged_last(
        make_config, monkeypatch):
    """A judging worker judges a stored page again (or analyses it for a step) from the terms it
    worked out when it judged the page: no second analysis, the same terms and judgements; the
    first pages judged are forgotten past its share. (The worker's functions, called here.)"""
    site = build_site(pages=40, hosts=1, seed=3)
    positives, negatives = site.examples("networking", 8)
    critic = Critic("svm-linear").fit(positives, negatives)
    handed = HandedJudges()
    handed.hand_over(Judge(make_config(seeds=["http://x/"]), critic, apprentice=False))
    folder = str(handed.folder)
    monkeypatch.setattr(judging, "_worker_recent", RecentFrequencies(pages=2))
    monkeypatch.setattr(judging, "_worker_parts", {})
    monkeypatch.setattr(judging, "_worker_version", 0)  # the judge handed over as version 1 is read first
    stored = [judging._judge_in_worker(1, folder, site.render(i).encode(), f"http://x/{i}.html", "utf-8", "",
                                       frozenset(), False).page.text for i in range(3)]
    handed.remove()  # read once: the worker judges with what it read
    analysed, word_counts = [], text.word_counts
    monkeypatch.setattr(text, "word_counts", lambda words: analysed.append(words) or word_counts(words))
    again = judging._judge_again_in_worker(1, folder, list(enumerate(stored)))
    frequencies = judging._frequencies_in_worker("en", True, stored)
    assert analysed == [stored[0], stored[0]]  # the oldest was forgotten; the others are remembered
    np.testing.assert_allclose([relevance for relevance, *_ in again], critic.predict_proba(stored))
    assert frequencies == [Analyzer("en", stem=True).term_frequencies(words) for words in stored]


def test_a_page_judged_without_the_apprentice_comes_back_with_its_links_grouped_as_the_crawl_stores_them(
        make_config):
    """A judged page goes back to the crawl's process with a link per target and nofollow (its
    menu and index link the same pages again and again), and the crawl stores the same rows as
    from each of its links; with the apprentice, which scores each link, every link goes back."""
    links = ("<a href='/t'>t</a><a rel='nofollow' href='/t'>t hidden</a><a href='/u#x'>u</a>"
             "<a href='/t#y'>t again</a><a href='/u'></a><a href='/t'>t</a><a href='/v'>v</a>")
    config = make_config(seeds=["http://x/"])

    def rows(page) -> list[tuple]:
        urls, anchors, starts, ends, nofollows = page.link_columns()
        ids = {url: i for i, url in enumerate(sorted(set(urls)))}
        return link_rows(1, map(ids.get, urls), anchors, starts, ends,
                         repeat(1) if page.nofollow else map(int, nofollows))

    for head in ("", "<meta name='robots' content='nofollow'>"):
        body = f"<html><head>{head}</head><body><p>{links}</p></body></html>".encode()
        parsed = parse_html(body, "http://x/a.html", "utf-8", "")
        judged = Judge(config, None, apprentice=False)(body, "http://x/a.html", "utf-8", "")
        assert parsed.link_count == 7 and judged.page.link_count == (3 if head else 4)
        assert rows(judged.page) == rows(parsed)
    assert Judge(config, None, apprentice=True)(body, "http://x/a.html", "utf-8", "").page.link_count == 7


def test_a_new_apprentice_model_reaches_the_workers_without_the_critic_handed_over_again(make_config, monkeypatch):
    """Each batch of learning gives the judges a new apprentice model: only it is written and
    read again, not the critic (megabytes pickled); a version's files go once no page sent with
    it is still being judged. (The pool's hand-over and a worker's reading of it, called here.)"""
    site = build_site(pages=40, hosts=1, seed=3)
    critic = Critic("svm-linear").fit(*site.examples("networking", 8))
    config = make_config(seeds=["http://x/"])
    monkeypatch.setattr(judging, "_worker_parts", {})
    monkeypatch.setattr(judging, "_worker_version", 0)

    def judge_with(model: Apprentice | None) -> Judge:
        judge = Judge(config, critic, apprentice=True)
        judge.link_model = model  # (a model not yet trained would not be handed over by the pipeline)
        return judge

    handed = HandedJudges()
    try:
        handed.hand_over(judge_with(Apprentice(5)))
        files = lambda: sorted(path.name for path in handed.folder.iterdir())  # noqa: E731
        assert files() == ["1.pickle", "critic-1.pickle", "link_model-1.pickle"]
        model = Apprentice(5)
        with handed.sending() as (version, folder):  # a page sent with the first version, being judged
            handed.hand_over(judge_with(model))
            assert files() == ["1.pickle", "2.pickle", "critic-1.pickle", "link_model-1.pickle", "link_model-2.pickle"]
            first = judging._current_judge(version, folder)
        assert files() == ["2.pickle", "critic-1.pickle", "link_model-2.pickle"]
        with handed.sending() as (version, folder):
            second = judging._current_judge(version, folder)
        handed.hand_over(judge_with(None))  # (judged in the crawl's process for a while)
        handed.hand_over(judge_with(model))  # the same model again: its file was removed, so it is written again
        assert files() == ["4.pickle", "critic-1.pickle", "link_model-4.pickle"]
        third = judging._current_judge(4, folder)
    finally:
        handed.remove()
    assert version == 2 and second is not first
    assert second.critic is first.critic  # read once
    assert not hasattr(second.critic, "examples_")  # without its training texts: judging needs none
    assert second.link_model is not first.link_model and isinstance(second.link_model, Apprentice)
    assert third.critic is first.critic and isinstance(third.link_model, Apprentice)
    np.testing.assert_allclose(second.critic.predict_proba(["a socket"]), critic.predict_proba(["a socket"]))


def test_the_judges_a_killed_crawl_left_behind_are_removed_by_the_next_and_a_running_crawls_are_kept(make_config):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid is free now: a crawl that was killed
    left = Path(tempfile.mkdtemp(prefix=f"{JUDGES_PREFIX}{gone.pid}-"))
    (left / "1.pickle").write_bytes(b"a critic and its examples")
    running = Path(tempfile.mkdtemp(prefix=f"{JUDGES_PREFIX}{os.getppid()}-"))
    config = make_config(seeds=["http://x/"])
    pool = JudgePool(2)
    try:
        pool.use(Judge(config, None, apprentice=False))
        assert pool._handed.folder.exists() and not left.exists() and running.exists()
    finally:
        pool.close()
        shutil.rmtree(running)


def test_judging_workers_are_forked_from_a_crawl_with_one_thread_and_spawned_beside_others():
    """Forked workers skip the imports a spawned one pays (seconds of CPU per crawl), but a fork
    beside another thread could inherit a lock that thread holds, and one in a running event loop
    its signal handling: then they are spawned."""
    probe = ("import asyncio, threading, focuscrawl.judging as j\n"
             "async def in_a_loop(): return j.worker_context().get_start_method()\n"
             "print(j.worker_context().get_start_method(), asyncio.run(in_a_loop()))\n"
             "threading.Thread(target=threading.Event().wait, args=(2,), daemon=True).start()\n"
             "print(j.worker_context().get_start_method())")
    methods = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert methods.split() == ["fork", "spawn", "spawn"]


def test_pages_judged_in_worker_processes_are_the_pages_judged_here(serve, make_config, tmp_path):
    """fetch.processes moves parsing and judging into workers: one URL at a time, the crawl
    fetches the same pages in the same order and stores the same scores and links."""
    site = build_site(pages=200, hosts=2, seed=5)
    server = serve(make_app(site))
    stored = {}
    for processes in (1, 3):
        settings = make_config(seeds=["http://x/"], fetch={"concurrency": 1, "processes": processes})
        config = topic_config(site, server.port, tmp_path / f"examples-{processes}", strategy="best-first",
                              budget={"max_pages": 60}, **settings.model_dump(include={"politeness", "fetch"}))
        db = crawl(config, tmp_path / f"crawl-{processes}")
        stored[processes] = (
            db.execute("SELECT u.url, round(d.relevance, 9), d.title FROM documents d JOIN urls u ON u.id = d.url_id"
                       " JOIN fetches f ON f.id = d.fetch_id ORDER BY f.id").fetchall(),
            db.execute("SELECT COUNT(*), SUM(leaf_start) FROM links").fetchone())
    assert len(stored[1][0]) == 60 and stored[1] == stored[3]
