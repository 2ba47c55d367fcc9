"""Site templates (focuscrawl.templates): learnt per host while crawling, left out of the judged
and stored texts, and out of the examples, whose sites' templates are learnt from pages they link to."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys

from aiohttp import web

from focuscrawl.crawler import Crawler, crawl_critic
from focuscrawl.fetch.hosts import Hosts
from focuscrawl.fetch.http import Fetcher
from focuscrawl.learn import Critic
from focuscrawl.parse import Page
from focuscrawl.templates import LEARN_PAGES, MIN_PAGES, SiteTemplates, leaf_keys, without_template
from focuscrawl.topics import PROBE_PAGES, train_critic

NAVIGATION = "Regular expressions and pattern matching: the regex tutorial"  # on every page of the site
FOOTER = "Copyright the cookbook authors"
REGEX = ["regex pattern match group capture quantifier alternation backtracking",
         "pattern syntax regex character class anchors lookahead greedy lazy match"]
COOKING = ["bake the bread dough with flour yeast butter and salt in the oven",
           "simmer the soup with onions carrots garlic pepper and fresh herbs"]


def template_site(pages: int) -> dict[str, str]:
    """A site whose every page carries the same navigation (about regexes) and footer; page i is
    about regexes when i is even, about cooking when odd, and links to the next four. Both are
    <div>s: a <nav> or a <footer> is never a page's text (``parse.NAVIGATION``)."""
    site = {}
    for i in range(pages):
        body = (REGEX if i % 2 == 0 else COOKING)[i // 2 % 2]
        links = "".join(f"<li><a href='/p{j}'>next</a></li>" for j in range(i + 1, min(pages, i + 5)))
        site[f"/p{i}"] = (f"<html><head><title>Page {i}</title></head><body><div class='menu'><p>{NAVIGATION}</p></div>"
                          f"<h1>Page {i}</h1><p>{body} number {i}</p><ul>{links}</ul><div class='foot'>{FOOTER}</div></body></html>")
    return site


def test_a_leaf_on_more_than_a_share_of_a_hosts_pages_is_its_template_once_enough_pages_are_counted():
    templates = SiteTemplates()
    keys = leaf_keys([NAVIGATION, FOOTER, "rare"])
    for n in range(MIN_PAGES - 1):
        templates.learn("a", [keys[0], keys[1]] + leaf_keys([f"page {n}"]))
    assert not templates.of("a")  # too few pages to tell
    templates.learn("a", keys)
    assert templates.of("a") == {keys[0], keys[1]}  # "rare" is on 1 of 5 pages
    for n in range(LEARN_PAGES):
        templates.learn("a", [keys[0]] + leaf_keys([f"other {n}"]))
    assert templates.of("a") == {keys[0]} and not templates.learning("a")  # the footer fell below the share
    assert templates.of("b") == frozenset() and templates.learning("b")


def test_leaf_keys_ignore_case_and_spacing_and_agree_between_processes_and_a_page_keeps_its_main_text():
    assert leaf_keys(["Home  Page\n", "home page", " ", ""]) == [leaf_keys(["home page"])[0]] * 2 + [0, 0]
    other = subprocess.run([sys.executable, "-c", "from focuscrawl.templates import leaf_keys;"
                            f"print(leaf_keys([{NAVIGATION!r}])[0])"], capture_output=True, text=True, check=True)
    assert int(other.stdout) == leaf_keys([NAVIGATION])[0]  # not Python's hash, salted per process
    page = Page(url="http://a/", title="A", leaves=["nav", "body", "", "nav"], text="nav body nav")
    nav = frozenset(leaf_keys(["nav"]))
    assert without_template(page, nav).text == "body" and without_template(page, nav).leaves == ["body"]
    assert without_template(page, frozenset(leaf_keys(["nav", "body"]))) is None  # all template: kept whole
    assert without_template(page, frozenset(leaf_keys(["other"]))) is None  # nothing to leave out


def examples(tmp_path, texts: list[str], name: str) -> list[str]:
    paths = []
    for i, text in enumerate(texts):
        path = tmp_path / f"{name}{i}.txt"
        path.write_text(text)
        paths.append(str(path))
    return paths


def test_a_crawl_judges_and_stores_pages_without_their_sites_template(serve, make_config, tmp_path):
    server = serve(template_site(16))
    topic = {"positive": examples(tmp_path, REGEX, "regex"), "negative": examples(tmp_path, COOKING, "cooking")}
    texts = {}
    for on in (True, False):
        config = make_config(seeds=[f"http://127.0.0.1:{server.port}/p0"], strategy="best-first", topic=topic,
                             text={"site_templates": "all" if on else "examples"}, fetch={"concurrency": 1})
        directory = tmp_path / f"crawl-{on}"
        asyncio.run(Crawler.create(config, directory).run())
        db = sqlite3.connect(directory / "crawl.db")
        rows = db.execute("SELECT u.url, d.text, d.relevance FROM documents d JOIN urls u ON u.id = d.url_id"
                          " ORDER BY d.fetch_id").fetchall()
        texts[on] = rows
        assert len(rows) == 16
        if on:
            critic = crawl_critic(directory)
            for url, text, relevance in rows[MIN_PAGES:]:  # the template is known from the 5th page on
                assert NAVIGATION not in text and FOOTER not in text and f"Page {url.rsplit('p', 1)[1]}" in text
                assert relevance == critic.predict_proba([text])[0]  # judged as stored
            assert all(NAVIGATION in text for _, text, _ in rows[:MIN_PAGES])
    assert all(NAVIGATION in text and FOOTER in text for _, text, _ in texts[False])


def test_the_examples_lose_their_sites_template_learnt_from_pages_they_link_to(serve, make_config, tmp_path):
    site = template_site(16)
    asked = []

    async def handler(request):
        asked.append(request.path)
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        if request.path not in site:
            raise web.HTTPNotFound()
        return web.Response(text=site[request.path], content_type="text/html")

    server = serve(handler)
    base = f"http://127.0.0.1:{server.port}"

    async def trained(on: bool) -> Critic:
        config = make_config(seeds=[f"{base}/p0"], topic={"positive": [f"{base}/p0", f"{base}/p2"],
                                                          "negative": [f"{base}/p1"]},
                             text={"site_templates": "examples" if on else "none"})
        async with Fetcher(config, Hosts(config)) as fetcher:
            return await train_critic(config, fetcher)

    with_templates = asyncio.run(trained(True))
    probed = {path for path in asked if path not in ("/robots.txt", "/p0", "/p1", "/p2")}
    assert len(probed) == PROBE_PAGES - 3  # the site's three examples, then pages they link to
    positives, negatives = with_templates.examples_
    assert all(NAVIGATION not in text and FOOTER not in text for text in positives + negatives)
    assert "Page 0" in positives[0] and "regex" in positives[0]
    asked.clear()
    plain = asyncio.run(trained(False))
    assert set(asked) <= {"/robots.txt", "/p0", "/p1", "/p2"}  # nothing probed
    assert all(NAVIGATION in text for text in plain.examples_[0])
