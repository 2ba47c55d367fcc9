"""The portal's search: the index a crawl keeps, BINGO!'s query syntax, the ranking, and
``focuscrawl serve`` as a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import io
import json
import os
import pickle
import re
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow.parquet
import pytest

from focuscrawl.crawler import Crawler
from focuscrawl.search import DEFAULT_WEIGHTS, QueryError, Search, parse_query
from focuscrawl.search.engine import attribute_matrix
from focuscrawl.search.indexing import index_crawl
from focuscrawl.store import Store, open_index

EVIL_TITLE = '<script>document.title="pwned"</script><b>Evil</b>'


def portal_site(listed: int = 30) -> dict[str, str]:
    """A small site: pages on sockets and databases, a page whose title and text carry HTML,
    and ``listed`` pages sharing the word 'inventory' (for paging)."""
    escaped = EVIL_TITLE.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    pages = {
        "/": "<title>Home</title><p>Start here.</p><a href='/a'>socket guide</a> <a href='/b'>logging</a>"
             " <a href='/c'>both</a> <a href='/evil'>evil</a> <a href='/list/0'>inventory</a>",
        "/a": "<title>Sockets</title><p>Sockets carry bytes between hosts over networks.</p><a href='/late'>more</a>",
        "/b": "<title>Write-ahead logging</title><p>A write ahead log keeps databases durable after crashes.</p>",
        "/c": "<title>Sockets and databases</title><p>A database server listens on a socket for clients.</p>",
        "/late": "<title>Late</title><p>Zebrafish swim here.</p><a href='/a'>unicorn handbook</a>"
                 " <a href='/a'>pegasus manual</a>",
        "/evil": f"<title>{escaped}</title><p>{escaped} tells about sockets.</p>",
    }
    for i in range(listed):
        pages[f"/list/{i}"] = (f"<title>Inventory item {i}</title><p>Inventory of warehouse shelf {i}: boxes.</p>"
                               + (f"<a href='/list/{i + 1}'>next shelf</a>" if i + 1 < listed else ""))
    return pages


@pytest.fixture
def portal_crawl(serve, make_config, tmp_path) -> tuple[Path, object]:
    server = serve(portal_site())
    directory = tmp_path / "crawl"
    config = make_config(seeds=[server.url("/")], strategy="bfs",
                         store={"commit_seconds": 60, "commit_pages": 1})  # its follower waits; a page indexed at once
    asyncio.run(Crawler.create(config, directory).run())
    return directory, server


def urls(results) -> list[str]:
    return [urllib.parse.urlsplit(hit["url"]).path for hit in results.hits]


def test_bingo_query_syntax_becomes_a_quoted_fts5_query():
    assert parse_query("socket").match() == '"socket"'
    assert parse_query('sock% -udp "write ahead log"').match() == '("write ahead log" AND "sock" *) NOT "udp"'
    assert parse_query("tcp/ip -pre%").match() == '("tcp ip") NOT "pre" *'
    assert parse_query("NOT OR").match() == '"NOT" AND "OR"'  # FTS5's own operators are words here
    for text in ("", "-x", '-"a b"', "%"):
        with pytest.raises(QueryError):
            parse_query(text)
    stop = frozenset({"the", "for"})
    assert parse_query('time for "for the win" -the', stop).match() == '"time" AND "for the win"'  # as BINGO!'s features
    with pytest.raises(QueryError, match="only stop words"):
        parse_query("for the", stop)


def test_a_crawl_indexes_its_pages_and_each_operator_finds_them(portal_crawl):
    directory, _ = portal_crawl
    search = Search(open_index(directory))
    assert search.index.size() == 36  # every page with text: the home page, five pages, 30 listed
    assert set(urls(search.search("socket"))) == {"/a", "/c", "/evil", "/"}  # '/': anchor text of its link
    assert set(urls(search.search("socket -database"))) == {"/a", "/evil", "/"}
    assert set(urls(search.search("datab%"))) == {"/b", "/c"}
    assert urls(search.search('"write ahead log"')) == ["/b"]
    assert set(urls(search.search("zebrafish"))) == {"/late"}
    assert set(urls(search.search("guide"))) == {"/a", "/"}  # /a by the anchor of the link to it
    assert "/b" in urls(search.search("logging"))  # stems: 'logging' and 'log'
    assert set(urls(search.search("log", stems=False))) == {"/b"}
    assert urls(search.search("logs", stems=False)) == []
    assert "/list/3" in urls(search.search("list"))  # the words of the URL


def test_anchors_of_links_found_after_a_page_was_indexed_reach_the_index(portal_crawl):
    directory, _ = portal_crawl
    # /a was indexed when fetched, before /late (which links to it as 'unicorn handbook') was:
    # the crawl gave /a that anchor as it stored the link
    index = open_index(directory)
    assert set(urls(Search(index).search("unicorn"))) == {"/a", "/late"} and index.anchors_behind() == 0
    assert set(urls(Search(index).search("pegasus"))) == {"/a", "/late"}  # the second link's, in the same row,
    assert urls(Search(index).search('"handbook pegasus"')) == ["/late"]  # and its own anchor text:
    assert index.db.execute("SELECT l.anchor_text FROM links l JOIN urls s ON s.id = l.source_id JOIN urls t"
                            " ON t.id = l.target_id WHERE s.url LIKE '%/late' AND t.url LIKE '%/a'"
                            ).fetchall() == [("unicorn handbook\npegasus manual",)]
    index.db.close()
    with sqlite3.connect(directory / "crawl.db") as db:  # as a crawl stopped before it took the anchors in
        db.execute("DELETE FROM late_anchors")
        db.execute("INSERT INTO late_anchor_index (late_anchor_index) VALUES ('rebuild')")
        db.execute("UPDATE meta SET value = '0' WHERE key = 'search_links_seen'")
    assert urls(Search(open_index(directory)).search("unicorn")) == ["/late"]  # its own text
    store = Store(directory, warc=False, search_index=True)  # the next crawl reads the links again, within its time
    store.follow_anchors(seconds=0.0)
    assert urls(Search(open_index(directory)).search("unicorn")) == ["/late"]  # no time: nothing done
    store.follow_anchors(seconds=5.0)
    store.close()
    index = open_index(directory)
    assert set(urls(Search(index).search("unicorn"))) == {"/a", "/late"}  # /a by its late anchors
    assert set(urls(Search(index).search("pegasus"))) == {"/a", "/late"}
    assert index.late.pages(10) != [] and index.anchors_behind() == 0
    index.db.close()
    assert index_crawl(directory)["indexed"] == 1  # a crawl not running: /a's late anchors folded into its row
    index = open_index(directory)
    assert index.late.pages(10) == [] and set(urls(Search(index).search("unicorn"))) == {"/a", "/late"}
    index.db.close()
    with sqlite3.connect(directory / "crawl.db") as db:  # as a crawl stopped before its follower got there
        db.execute("UPDATE meta SET value = '0' WHERE key = 'search_links_seen'")
    assert index_crawl(directory)["indexed"] == 0  # every anchor is in already
    assert set(urls(Search(open_index(directory)).search("unicorn"))) == {"/a", "/late"}
    assert index_crawl(directory)["indexed"] == 0  # nothing new
    rebuilt = index_crawl(directory, rebuild=True)
    assert rebuilt["indexed"] == 36 and rebuilt["pages_in_index"] == 36
    assert set(urls(Search(open_index(directory)).search("unicorn"))) == {"/a", "/late"}
    assert set(urls(Search(open_index(directory)).search("pegasus"))) == {"/a", "/late"}  # read from the table
    assert urls(Search(open_index(directory)).search('"handbook pegasus"')) == ["/late"]


def test_a_query_holds_for_a_page_and_its_late_anchors_together():
    from focuscrawl.store.search_index import SEARCH_SCHEMA, SearchIndex

    db = sqlite3.connect(":memory:")
    db.executescript("CREATE TABLE urls (id INTEGER PRIMARY KEY, url TEXT, host TEXT);"
                     " CREATE TABLE links (source_id, target_id, anchor_text);")
    db.executescript(SEARCH_SCHEMA)
    index = SearchIndex(db)
    for url_id, body in ((1, "python snakes"), (2, "python")):
        db.execute("INSERT INTO search_index (rowid, title, body, url_words, anchors) VALUES (?, '', ?, '', '')", (url_id, body))
    index.late.add(1, "python tutorial")
    index.late.add(2, "snakes")  # two batches of late anchors: two rows
    index.late.add(2, "tutorial")

    def found(text: str) -> set[int]:
        query = parse_query(text)
        return {url_id for url_id, _ in index.matches(query.match(), 100, parts=query.parts())}

    assert found("python -snakes") == set()  # 1 by its text, 2 by a late anchor
    assert found("snakes tutorial") == {1, 2}  # 1: text and anchor; 2: two anchor rows
    assert found("python -tut%") == set() and found("snak%") == {1, 2}
    assert {url_id for url_id, _ in index.matches('"tutorial" OR "zebra"', 100)} == {1, 2}  # a disjunction


def test_ranking_normalises_every_attribute_and_the_weights_decide_the_order(portal_crawl):
    directory, _ = portal_crawl
    # bm25, confidence, modified_at, hub, authority, pagerank, confidence_pagerank
    columns = attribute_matrix(np.array([[3.0, 0.5, 100.0, 0.2, 0.0, 0.1, 0.0], [4.0, 0.5, 300.0, 0.0, 0.0, 0.3, 0.0]]))
    assert np.allclose(np.linalg.norm(columns, axis=0), [1, 1, 0, 1, 1, 0, 1, 1])
    assert columns[:, 6].tolist() == [0.0, 1.0] and columns[:, 7].tolist() == [1.0, 0.0]  # recency, inverse recency
    search = Search(open_index(directory))
    newest = search.search("inventory", {"bm25": 0, "confidence": 0, "authority": 0, "recency": 1}).hits[0]
    oldest = search.search("inventory", {"bm25": 0, "confidence": 0, "authority": 0, "inverse_recency": 1}).hits[0]
    assert newest["modified_at"] >= oldest["modified_at"]
    with pytest.raises(QueryError, match="unknown ranking attribute 'fame'"):
        search.search("inventory", {"fame": 1})


def test_similar_pages_are_those_with_the_nearest_words(portal_crawl):
    directory, _ = portal_crawl
    search = Search(open_index(directory))
    shelf = next(hit for hit in search.search("inventory").hits if hit["url"].endswith("/list/3"))
    similar = search.similar(shelf["url_id"], count=10)
    assert len(similar) == 10 and all("/list/" in hit["url"] for hit in similar)
    assert shelf["url_id"] not in {hit["url_id"] for hit in similar}
    assert similar[0]["similarity"] >= similar[-1]["similarity"] > 0


def test_seeds_come_from_a_query_or_a_classifiers_terms_a_few_per_host(portal_crawl, serve):
    from types import SimpleNamespace

    from focuscrawl.search.seeds import classifier_terms, find_seeds

    directory, _ = portal_crawl
    assert len(find_seeds([directory], "socket", per_host=2)) == 2  # one host in this crawl
    assert {urllib.parse.urlsplit(s["url"]).path for s in find_seeds([directory], "socket", per_host=9)} == {"/a", "/c", "/evil", "/"}
    critic = SimpleNamespace(preview_weights_={"zebrafish": 0.9, "warehous": 0.5, "the": 0.01})
    assert classifier_terms(critic, count=2) == ["zebrafish", "warehous"]
    seeds = find_seeds([directory], terms=classifier_terms(critic, count=1), per_host=9)
    assert [urllib.parse.urlsplit(s["url"]).path for s in seeds] == ["/late"]
    with pytest.raises(QueryError, match="give --topic"):
        classifier_terms(SimpleNamespace())


@pytest.fixture
def portal(portal_crawl):
    """``focuscrawl serve`` on the crawl, as a user starts it; yields a GET function."""
    directory, _ = portal_crawl
    process = subprocess.Popen([sys.executable, "-m", "focuscrawl", "serve", str(directory), "--port", "0"],
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"})
    try:
        base = _wait_for_address(process)
        get = lambda path, **headers: _get(base + path, headers)  # noqa: E731
        get.base = base
        yield get
    finally:
        process.terminate()
        process.wait(10)


def _base_of(portal) -> str:
    return portal.base


def _wait_for_address(process) -> str:
    for line in process.stderr:
        found = re.search(r"serving on (http://\S+)/", line)
        if found:
            return found.group(1)
    raise AssertionError(f"serve ended without serving (exit {process.wait(5)})")


def _get(url: str, headers: dict) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_api_searches_pages_with_paging_and_explains_bad_queries(portal):
    status, body = portal("/api/search?q=inventory")
    first = json.loads(body)
    assert status == 200 and first["total"] == 31 and first["pages"] == 2 and len(first["results"]) == 25
    second = json.loads(portal("/api/search?q=inventory&page=2")[1])
    assert len(second["results"]) == 6
    assert not {r["url"] for r in first["results"]} & {r["url"] for r in second["results"]}
    within = json.loads(portal("/api/search?q=shelf&within=" + urllib.parse.quote("inventory -box"))[1])
    assert within["total"] == 0  # every listed page has 'boxes': the stem of 'box'
    status, body = portal("/api/search?q=" + urllib.parse.quote("-socket"))
    assert status == 400 and "needs at least one word" in json.loads(body)["detail"]
    status, body = portal("/api/search?q=inventory&w_fame=1")
    assert status == 400 and "unknown ranking attribute" in body
    assert portal("/api/search?q=inventory&since=yesterday")[0] == 400
    status, lines = portal("/api/search.jsonl?q=inventory")
    assert status == 200 and len(lines.splitlines()) == 31
    assert [json.loads(line)["url"] for line in lines.splitlines()[:25]] == [r["url"] for r in first["results"]]
    status, table = portal("/api/search.csv?q=inventory")
    assert status == 200 and table.splitlines()[0].startswith("url,title,topic,score") and len(table.splitlines()) == 32
    crawl_name = json.loads(portal("/api/crawls")[1])[0]["name"]
    status, collection = portal(f"/api/crawls/{crawl_name}/export.jsonl")
    fetched = [json.loads(line) for line in collection.splitlines()]
    assert status == 200 and len([row for row in fetched if row["status"] == 200]) == 36
    status, table = portal(f"/api/crawls/{crawl_name}/export.csv")
    assert table.splitlines()[0] == "url,final_url,status,error,depth,relevance,title,fetched_at" and len(table.splitlines()) == len(fetched) + 1
    with urllib.request.urlopen(_base_of(portal) + f"/api/crawls/{crawl_name}/export.parquet", timeout=10) as answer:
        assert answer.headers["Content-Type"] == "application/vnd.apache.parquet"
        assert pyarrow.parquet.read_table(io.BytesIO(answer.read())).to_pylist() == fetched
    with urllib.request.urlopen(_base_of(portal) + "/api/search.parquet?q=inventory", timeout=10) as answer:
        results = pyarrow.parquet.read_table(io.BytesIO(answer.read())).to_pylist()
    assert [row["url"] for row in results] == [json.loads(line)["url"] for line in lines.splitlines()]
    assert portal("/api/crawls", Host="rebound.example")[0] == 400  # a site whose name was pointed at 127.0.0.1
    spec = json.loads(portal("/openapi.json")[1])
    assert "/api/search" in spec["paths"] and "/api/crawls" in spec["paths"]
    crawls = json.loads(portal("/api/crawls")[1])
    assert crawls[0]["pages"] == 36


def test_crawled_html_is_shown_as_text_in_the_pages(portal):
    status, html = portal("/?q=evil")
    assert status == 200
    assert "<script>document.title" not in html and "<b>Evil</b>" not in html
    assert "&lt;script&gt;document.title=&#34;pwned&#34;&lt;/script&gt;&lt;b&gt;Evil&lt;/b&gt;" in html
    evil = json.loads(portal("/api/search?q=evil")[1])["results"][0]
    assert evil["title"] == EVIL_TITLE  # the API returns the text as crawled: JSON is not HTML
    crawl = json.loads(portal("/api/crawls")[1])[0]["name"]
    neighbours = json.loads(portal(f"/api/pages/{crawl}/{evil['url_id']}/neighbours")[1])
    assert [urllib.parse.urlsplit(p["url"]).path for p in neighbours["links_from"]] == ["/"]
    status, html = portal(f"/neighbours/{crawl}/{evil['url_id']}")
    assert status == 200 and "&lt;script&gt;" in html and "<script>" not in html
    graph = html[html.index('<svg id="link-graph"'):html.index("</svg>")]  # drawn: '/' links to it
    assert graph.count("<circle") == 2 and "&lt;script&gt;" in graph


def test_serve_needs_a_token_to_listen_beyond_loopback_and_then_asks_for_it(portal_crawl):
    directory, _ = portal_crawl
    refused = subprocess.run([sys.executable, "-m", "focuscrawl", "serve", str(directory), "--host", "0.0.0.0"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip() == ("error: --host 0.0.0.0 is reachable from other machines: give --token SECRET"
                                      " (every request must then carry it)")
    process = subprocess.Popen([sys.executable, "-m", "focuscrawl", "serve", str(directory), "--port", "0",
                                "--token", "s3cret"], stderr=subprocess.PIPE, text=True)
    try:
        base = _wait_for_address(process)
        assert _get(base + "/api/search?q=socket", {})[0] == 401
        assert _get(base + "/api/search?q=socket", {"Authorization": "Bearer wrong"})[0] == 401
        assert _get(base + "/api/search?q=socket", {"Authorization": "Bearer s3cret"})[0] == 200
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())  # keeps the cookie, as a browser
        with browser.open(base + "/?q=socket&token=s3cret", timeout=10) as page:  # the token moves into a cookie
            assert page.status == 200 and page.url == base + "/?q=socket" and "Sockets" in page.read().decode()
        with browser.open(base + "/crawls", timeout=10) as page:
            assert page.status == 200
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium (Debian's chromium and chromium-driver) through Selenium, started so that
    it reaches nothing beyond the pages it is sent to."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    binary, driver = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
    if not (binary.exists() and driver.exists()):
        if os.environ.get("CI"):
            pytest.fail("chromium and chromium-driver must be installed in CI (.ci/run installs them)")
        pytest.skip("Debian's chromium and chromium-driver are not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = str(binary)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1200,1000"):
        options.add_argument(flag)
    chrome = webdriver.Chrome(options=options, service=Service(str(driver)))
    try:
        yield chrome
    finally:
        chrome.quit()


@pytest.fixture
def portal_url(portal_crawl):
    directory, _ = portal_crawl
    process = subprocess.Popen([sys.executable, "-m", "focuscrawl", "serve", str(directory), "--port", "0"],
                               stderr=subprocess.PIPE, text=True)
    try:
        yield _wait_for_address(process)
    finally:
        process.terminate()
        process.wait(10)


def _wait_for_page(browser, previous_url: str) -> None:
    """Until the browser shows the next page, loaded: its address changed and its document is
    complete (waiting for an element of the old page to go stale races Chromium's own cleanup)."""
    from selenium.webdriver.support.wait import WebDriverWait

    WebDriverWait(browser, 10).until(lambda b: b.current_url != previous_url
                                     and b.execute_script("return document.readyState") == "complete")


def test_a_user_searches_with_each_operator_pages_on_and_sees_crawled_html_as_text(portal_url, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.wait import WebDriverWait

    def search(query: str) -> list[str]:
        browser.get(portal_url + "/")
        previous = browser.current_url
        browser.find_element(By.NAME, "q").send_keys(query, Keys.ENTER)
        _wait_for_page(browser, previous)
        return [urllib.parse.urlsplit(a.get_attribute("href")).path
                for a in browser.find_elements(By.CSS_SELECTOR, "ol.results .title a")]

    assert set(search("socket -database")) == {"/a", "/evil", "/"}
    assert set(search("datab%")) == {"/b", "/c"}
    assert search('"write ahead log"') == ["/b"]
    assert len(search("inventory")) == 25
    assert "page 1 of 2" in browser.find_element(By.CSS_SELECTOR, "p.meta").text
    previous = browser.current_url
    browser.find_element(By.CSS_SELECTOR, "nav.pages a[rel=next]").click()
    _wait_for_page(browser, previous)
    assert "page 2 of 2" in browser.find_element(By.CSS_SELECTOR, "p.meta").text
    assert len(browser.find_elements(By.CSS_SELECTOR, "ol.results > li")) == 6
    assert search("-socket") == []
    assert "needs at least one word" in browser.find_element(By.CSS_SELECTOR, ".error").text
    assert len(search("inventory")) == 25 and "ranking: default" in browser.find_element(By.CSS_SELECTOR, "p.meta").text
    first = browser.find_element(By.CSS_SELECTOR, "ol.results > li")
    first.find_element(By.CSS_SELECTOR, "button.mark[data-relevant=true]").click()
    WebDriverWait(browser, 10).until(lambda b: first.find_element(By.CSS_SELECTOR, ".marked").text == "marked relevant")
    previous = browser.current_url
    browser.find_element(By.CSS_SELECTOR, "nav.pages a[rel=next]").click()  # paging on: weights learnt from the mark
    _wait_for_page(browser, previous)
    assert "learnt from the marks of anonymous" in browser.find_element(By.CSS_SELECTOR, "p.meta").text
    assert search("evil")[0] == "/evil"
    shown = browser.find_element(By.CSS_SELECTOR, "ol.results .title a").text
    assert shown == EVIL_TITLE  # the markup as text: nothing of it ran or was rendered
    assert browser.title != "pwned" and not browser.find_elements(By.CSS_SELECTOR, "ol.results .title b")


def test_the_dashboard_reports_a_crawl_streams_it_and_refuses_forged_controls(portal, portal_crawl):
    directory, _ = portal_crawl
    crawl = json.loads(portal("/api/crawls")[1])[0]["name"]
    status, body = portal(f"/api/crawls/{crawl}/status")
    state = json.loads(body)
    assert status == 200 and state["state"] == "finished" and state["pages_fetched"] == 36
    assert state["series"] and state["series"][-1]["pages"] >= 30
    assert state["hosts"][0]["fetched"] == 36 and state["failures_by_reason"] == []
    status, html = portal(f"/crawls/{crawl}")
    assert status == 200 and 'name="csrf"' in html and "/static/dashboard.js" in html
    forged = urllib.request.Request(_base_of(portal) + f"/crawls/{crawl}/resume", data=b"csrf=guess", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(forged, timeout=10)
    assert refused.value.code == 403
    token = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
    stop = urllib.request.Request(_base_of(portal) + f"/crawls/{crawl}/stop", data=f"csrf={token}".encode(), method="POST")
    with urllib.request.urlopen(stop, timeout=10) as answer:  # followed to the dashboard, with why not
        assert "is not running" in answer.read().decode()
    with urllib.request.urlopen(_base_of(portal) + f"/api/crawls/{crawl}/events?every=0.5", timeout=10) as events:
        first = events.readline().decode()
        assert first.startswith("data: ") and json.loads(first[6:])["pages_fetched"] == 36


@pytest.mark.parametrize("allowed", [False, True])
def test_a_crawl_resumed_from_the_portal_refuses_loopback_unless_serve_allows_it(serve, make_config, tmp_path, allowed):
    from focuscrawl.config import dump_config

    site = serve({f"/{i}": f"<html><body><p>page {i}</p><a href='/{i + 1}'>next</a></body></html>" for i in range(40)})
    config = make_config(seeds=[site.url("/0")], budget={"max_pages": 5}, fetch={"loopback_only": False})
    dump_config(config, tmp_path / "crawl.yml")
    directory = tmp_path / "crawl"
    subprocess.run([sys.executable, "-m", "focuscrawl", "crawl", str(tmp_path / "crawl.yml"), "--out", str(directory),
                    "-q"], check=True)
    config.budget.max_pages = 10  # more to do; the portal resumes with the crawl's own config
    dump_config(config, directory / "config.yml")
    asked = len(site.paths())
    portal = subprocess.Popen([sys.executable, "-m", "focuscrawl", "serve", str(directory), "--port", "0",
                               *(["--allow-loopback"] if allowed else [])], stderr=subprocess.PIPE, text=True)
    try:
        base = _wait_for_address(portal)
        html = _get(base + "/crawls/crawl", {})[1]
        token = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
        resume = urllib.request.Request(base + "/crawls/crawl/resume", data=f"csrf={token}".encode(), method="POST")
        urllib.request.urlopen(resume, timeout=10).close()
        def ended() -> bool:
            state = json.loads(_get(base + "/api/crawls/crawl/status", {})[1])
            return state["state"] == "finished" and state["stop_reason"] != "budget: max_pages 5"
        _wait(ended)
    finally:
        portal.terminate()
        portal.wait(10)
    with sqlite3.connect(directory / "crawl.db") as db:
        refused = db.execute("SELECT error FROM fetches WHERE refused").fetchall()
    if allowed:
        assert refused == [] and len(site.paths()) > asked
    else:  # nothing was sent: each URL is refused with why (not counted as a fetch)
        assert len(site.paths()) == asked and refused
        assert all("is loopback, not allowed for this crawl" in error for (error,) in refused)


def test_the_dashboard_draws_the_harvest_chart_and_keeps_it_live(portal_url, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    browser.get(portal_url + "/crawls")
    browser.find_element(By.CSS_SELECTOR, "table.figures a").click()
    dashboard = WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "dashboard"))
    WebDriverWait(browser, 15).until(lambda b: int(dashboard.get_attribute("data-updates") or 0) >= 2)  # an event came
    assert browser.find_element(By.CSS_SELECTOR, '[data-field="pages_fetched"]').text == "36"
    labels = [text.text for text in browser.find_elements(By.CSS_SELECTOR, "svg#harvest-chart text")]
    assert "36 pages" in labels  # drawn to the last event's scale (this crawl has no critic: no harvest line)


def test_the_dashboard_follows_a_running_crawl_and_pauses_resumes_and_stops_it(serve, make_config, tmp_path, browser):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    from focuscrawl.config import dump_config
    from focuscrawl.testweb.synthetic import build_site, make_app, topic_config

    site = build_site(pages=300, hosts=2, seed=5)
    server = serve(make_app(site))
    fetch = make_config(seeds=["http://x/"]).model_dump(mode="json")["fetch"]
    config = topic_config(site, server.port, tmp_path / "examples", strategy="best-first", budget={"max_pages": 280},
                          politeness={"min_interval": 0.1}, fetch=fetch, harvest_log_every=5)
    dump_config(config, tmp_path / "crawl.yml")
    directory = tmp_path / "live"
    crawl = subprocess.Popen([sys.executable, "-m", "focuscrawl", "crawl", str(tmp_path / "crawl.yml"), "--out", str(directory),
                              "-q"], stderr=subprocess.DEVNULL)
    portal = None
    try:
        _wait(lambda: (directory / "harvest.jsonl").exists() and len((directory / "harvest.jsonl").read_text().splitlines()) >= 2)
        portal = subprocess.Popen([sys.executable, "-m", "focuscrawl", "serve", str(directory), "--port", "0"],
                                  stderr=subprocess.PIPE, text=True)
        browser.get(_wait_for_address(portal) + "/crawls/live")
        stale = (StaleElementReferenceException,)  # the live feed replaces the figures' elements as it redraws

        def field(name: str) -> str:  # found and read in one script: the feed may replace it in between
            read = "const e = document.querySelector(arguments[0]); return e ? e.innerText.trim() : null;"
            return WebDriverWait(browser, 5).until(lambda b: b.execute_script(read, f'[data-field="{name}"]'))

        def chart() -> list[str]:
            return [text.text for text in browser.find_elements(By.CSS_SELECTOR, "svg#harvest-chart text")]

        first, drawn = int(field("pages_fetched")), chart()
        WebDriverWait(browser, 30).until(lambda b: int(field("pages_fetched")) >= first + 10)  # the live feed goes on
        assert browser.find_elements(By.CSS_SELECTOR, "svg#harvest-chart polyline") and field("state") == "running"
        WebDriverWait(browser, 10, ignored_exceptions=stale).until(lambda b: chart() != drawn)  # redrawn to the new scale
        browser.find_element(By.XPATH, "//button[text()='Pause']").click()
        WebDriverWait(browser, 15).until(lambda b: field("state") == "paused")
        time.sleep(1.0)  # fetches in flight end
        paused_at = int(field("pages_fetched"))
        time.sleep(2.5)
        assert int(field("pages_fetched")) == paused_at
        assert crawl.poll() is None  # the process waits
        browser.find_element(By.XPATH, "//button[text()='Resume']").click()
        WebDriverWait(browser, 30).until(lambda b: int(field("pages_fetched")) > paused_at)
        browser.find_element(By.XPATH, "//button[starts-with(text(), 'Stop')]").click()
        assert crawl.wait(30) == 0
        WebDriverWait(browser, 15).until(lambda b: field("state") == "stopped")
    finally:
        for process in filter(None, (crawl, portal)):
            process.terminate()
            process.wait(10)


def _wait(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_feedback_teaches_the_ranking_and_profiles_are_aggregated_and_matched(portal_crawl):
    from focuscrawl.search.feedback import Personalisation, Profile, aggregate, learn_weights, match, similarity

    directory, _ = portal_crawl
    writable = open_index(directory, writable=True)
    search = Search(open_index(directory))
    ranked = search.ranked("inventory")
    newest_first = sorted(ranked, key=lambda hit: -hit["attributes"]["recency"])
    # a user who wants the newest shelves: marks the 5 newest relevant and the 5 oldest not
    for hit in newest_first[:5]:
        writable.marks.add_feedback("ann", "inventory", hit["url_id"], True)
    for hit in newest_first[-5:]:
        writable.marks.add_feedback("ann", "inventory", hit["url_id"], False)
    weights = learn_weights(search, [(q, u, r) for _, q, u, r in writable.marks.feedback("ann")])
    assert weights["recency"] > weights["inverse_recency"]
    personal = Personalisation(search)
    learnt, source = personal.weights_for("inventory", "ann", refining=True)
    assert learnt == personal.users["ann"].weights and "ann" in source
    top = [hit["url_id"] for hit in search.ranked("inventory", learnt)[:5]]
    assert set(top) == {hit["url_id"] for hit in newest_first[:5]}
    # a new query of someone else: the aggregated profile whose marked pages lead the default ranking
    for hit in ranked[:3]:
        writable.marks.add_feedback("cat", "inventory shelf", hit["url_id"], True)
    personal = personal.current()
    assert set(personal.users) == {"ann", "cat"} and len(personal.clusters) == 2
    weights, source = personal.weights_for("inventory", "bob", refining=False)
    assert "aggregated profile" in source and weights in [cluster.weights for cluster in personal.clusters]
    assert personal.weights_for("zebrafish", "bob", refining=False) == (dict(DEFAULT_WEIGHTS), "default")
    assert similarity(DEFAULT_WEIGHTS, DEFAULT_WEIGHTS) == 1.0
    a, b = Profile("a", {1, 2}, {3}), Profile("b", {3}, {1})
    a.weights, b.weights = {**DEFAULT_WEIGHTS, "recency": 1.0}, {**DEFAULT_WEIGHTS, "recency": 1.1}
    (merged,) = aggregate([a, b], k=1)
    assert merged.positive == {2} and merged.negative == set()  # contradicted pages leave both sets
    best, score = match([3, 1, 2], [a, b])
    assert best is b and score > 0
    writable.db.close()


def test_search_commands_explain_a_missing_crawl_or_index_in_one_line(portal_crawl, tmp_path):
    import sqlite3

    directory, _ = portal_crawl

    def focuscrawl(*args):
        return subprocess.run([sys.executable, "-m", "focuscrawl", *map(str, args)], capture_output=True, text=True,
                              timeout=60)

    missing = focuscrawl("search", tmp_path / "none", "socket")
    assert missing.returncode == 2 and missing.stderr == f"error: {tmp_path / 'none'}: not a crawl directory (no crawl.db)\n"
    with sqlite3.connect(directory / "crawl.db") as db:  # as a crawl made before the index
        db.execute("DROP TABLE search_index")
        db.execute("DROP TABLE search_docs")
    unindexed = focuscrawl("search", directory, "socket")
    assert unindexed.returncode == 2 and "no search index yet: run focuscrawl index" in unindexed.stderr
    assert "Traceback" not in unindexed.stderr and len(unindexed.stderr.splitlines()) == 1
    indexed = focuscrawl("index", directory)
    assert indexed.returncode == 0 and json.loads(indexed.stdout)["pages_in_index"] == 36
    found = focuscrawl("search", directory, "socket -database", "--json")
    assert {urllib.parse.urlsplit(hit["url"]).path for hit in json.loads(found.stdout)["results"]} == {"/a", "/evil", "/"}


def test_the_reviser_estimates_precision_and_retrains_the_critic_with_the_labels(critic_crawl):
    from focuscrawl.crawler import crawl_critic
    from focuscrawl.corrections import NOT_RELEVANT, RELEVANT
    from focuscrawl.search.reviser import estimated_precision, feature_space, retrain, review_list
    from focuscrawl.text import Analyzer

    directory, site = critic_crawl
    index = open_index(directory, writable=True)
    accepted = review_list(index, None, "confidence", 10)
    assert len(accepted) == 10 and accepted[0]["score"] >= accepted[-1]["score"] >= 0.5
    assert review_list(index, None, "authority", 5) and review_list(index, None, "hub", 5)
    truth = {page["url"]: site.topic_of(page["url"]) == "networking" for page in accepted}
    for page in accepted:
        index.marks.set_label(page["url_id"], RELEVANT if truth[page["url"]] else NOT_RELEVANT, "reviewer")
    estimate = estimated_precision(index)[RELEVANT]
    assert estimate["reviewed"] == 10 and estimate["precision"] == sum(truth.values()) / 10
    features = feature_space(directory, index, count=8)
    assert len(features) == 8 and features[0]["weight"] >= features[-1]["weight"] > 0
    assert sum(feature["term"] in Analyzer().terms(feature["context"]) for feature in features) >= 6  # shown in use
    index.db.close()
    before = crawl_critic(directory)
    outcome = retrain(directory)
    assert outcome["positives"] + outcome["negatives"] == 10 and outcome["judged"] >= 60
    after = crawl_critic(directory)  # saved in the crawl: a resumed crawl judges with it
    assert pickle.dumps(after) != pickle.dumps(before) and after.examples_ == before.examples_  # the originals stay
    texts = [text for url, text in _texts(directory, [p["url_id"] for p in accepted if truth[p["url"]]])]
    gain = np.mean([j.relevance for j in after.judge_texts(texts)]) - np.mean([j.relevance for j in before.judge_texts(texts)])
    assert gain > -0.05  # taught as positives, the reviewed pages are not judged worse
    with sqlite3.connect(directory / "crawl.db") as db:  # the search index ranks by the new judgements
        assert db.execute("SELECT COUNT(*) FROM documents d JOIN search_docs s ON s.url_id = d.url_id"
                          " WHERE s.confidence IS NOT d.relevance").fetchone()[0] == 0
    again = retrain(directory)  # every label every time: they replace the last ones, they do not pile up
    assert again["positives"] == outcome["positives"] and again["moved"] == 0
    top = features[0]["term"]
    assert top in after.feature_space()
    marks = open_index(directory, writable=True)
    marks.marks.exclude_term(top, True, "reviewer")
    retrain(directory)
    without = crawl_critic(directory)
    assert top not in without.feature_space() and top not in without.preview_weights_
    assert without.examples_ == before.examples_  # the originals keep the term: it can be included again
    marks.marks.exclude_term(top, False, "reviewer")
    marks.marks.set_indicator("", "xylophon", True, "reviewer")  # BINGO!'s indicators: a term no page holds
    marks.db.close()
    restricted = retrain(directory)
    assert top in crawl_critic(directory).feature_space()
    assert restricted["indicators"] == {"": ["xylophon"]} and restricted["moved"] >= 10
    with sqlite3.connect(directory / "crawl.db") as db:  # every page judged again: none is accepted now
        assert db.execute("SELECT MAX(relevance) FROM documents").fetchone()[0] < 0.5


def _texts(directory, url_ids):
    with sqlite3.connect(directory / "crawl.db") as db:
        return db.execute(f"SELECT url_id, text FROM documents WHERE url_id IN ({','.join('?' * len(url_ids))})",
                          url_ids).fetchall()


def test_a_reviewer_relabels_pages_in_the_browser_and_retrains_the_critic(critic_crawl, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    directory, _ = critic_crawl
    process = subprocess.Popen([sys.executable, "-m", "focuscrawl", "serve", str(directory), "--port", "0"],
                               stderr=subprocess.PIPE, text=True)
    try:
        base = _wait_for_address(process)
        browser.get(base + "/reviser/crawl?count=5")
        items = browser.find_elements(By.CSS_SELECTOR, "#review > li")
        assert len(items) == 5
        for item, verdict in zip(items[:2], ("relevant", "not relevant")):
            item.find_element(By.XPATH, f".//button[text()='{verdict}']").click()
            WebDriverWait(browser, 10).until(lambda b: item.find_element(By.CSS_SELECTOR, ".marked").text.startswith("reviewed"))
        browser.get(base + "/reviser/crawl?count=5")
        assert "2" in browser.find_element(By.CSS_SELECTOR, "#precision tr:nth-child(2) td:nth-child(2)").text
        browser.find_element(By.LINK_TEXT, "The topic's feature space").click()
        terms = WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#features > li"))
        assert len(terms) > 10
        terms_text = [item.get_attribute("data-term") for item in terms]
        terms[0].find_element(By.CSS_SELECTOR, "button.term").click()
        WebDriverWait(browser, 10).until(lambda b: terms[0].find_element(By.CSS_SELECTOR, ".marked").text == "excluded")
        terms[1].find_element(By.CSS_SELECTOR, "button.indicator").click()
        WebDriverWait(browser, 10).until(lambda b: terms[1].find_element(By.CSS_SELECTOR, ".marked").text == "indicator")
        browser.refresh()
        indicators = WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#indicators > li"))
        assert [item.get_attribute("data-term") for item in indicators] == [terms_text[1]]
        browser.back()
        browser.find_element(By.XPATH, "//button[starts-with(text(), 'Retrain')]").click()
        outcome = WebDriverWait(browser, 60).until(lambda b: b.find_element(By.ID, "outcome")).text
        assert outcome.startswith("Trained with 1 reviewed pages as positives and 1 as negatives")
    finally:
        process.terminate()
        process.wait(10)


def test_the_api_answers_as_its_openapi_description_says(portal):
    """Schemathesis generates requests from /openapi.json: no server error, and every status
    code, content type and response body is one the description documents."""
    schemathesis = Path(sys.executable).parent / "schemathesis"
    if not schemathesis.exists():
        pytest.skip("schemathesis is not installed (pip install -e '.[test]')")
    run = subprocess.run([str(schemathesis), "run", portal.base + "/openapi.json", "--max-examples", "15", "--seed", "1",
                          "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
                          "response_schema_conformance"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]
