"""The test web's link graph, and how many of its links survive being served over HTTP.

Every page is parsed once; each ``<a href>`` is resolved twice: on disk (relative to the file,
as a browser opening the file would) and over HTTP (relative to the page's URL, through the
server's routing and redirects). Pages and page-to-page links go to ``testweb.db``. Pages that
only say "moved" (a quick ``<meta>`` refresh: 14 k in the default web, mostly rustdoc's) are
redirects, as the crawler treats them: links reach their targets, and they belong to no topic.
"""

from __future__ import annotations

import posixpath
import re
import sqlite3
from collections import Counter
from functools import lru_cache
from multiprocessing import get_context
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

from selectolax.lexbor import LexborHTMLParser

from focuscrawl.fetch.urls import canonical_url
from focuscrawl.parse import DecodeError, decode_html, head_elements, html_tree, meta_refresh
from focuscrawl.testweb.build import connect
from focuscrawl.testweb.webmap import WebMap

GRAPH_SCHEMA = """
DROP TABLE IF EXISTS pages;
DROP TABLE IF EXISTS links;
CREATE TABLE pages (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, package TEXT NOT NULL, url TEXT NOT NULL,
                    refresh TEXT);  -- where a redirect stub's <meta> refresh leads (NULL: a real page)
CREATE TABLE links (source INTEGER NOT NULL, target INTEGER NOT NULL, PRIMARY KEY (source, target)) WITHOUT ROWID;
CREATE INDEX pages_url ON pages (url);
"""
_REFRESH_HINT = re.compile(rb"http-equiv\s*=\s*[\"']?refresh", re.IGNORECASE)
_webmap: WebMap | None = None
_resolver: Resolver | None = None


class Resolver:
    """Memoised routing of URLs to the page files they reach (following redirects)."""

    def __init__(self, webmap: WebMap):
        self.webmap = webmap
        self.refresh = redirect_stubs(webmap)
        self.reach = lru_cache(maxsize=200_000)(self._reach)

    def _reach(self, url: str) -> str | None:
        for _ in range(5):
            parts = urlsplit(url)
            found = self.webmap.locate(parts.hostname or "", parts.path or "/")
            if found is None:
                return None
            kind, target = found
            if kind == "file" and target not in self.refresh:
                return target
            url = self.refresh[target] if kind == "file" else urljoin(url, target)
        return None


    def past_stub(self, path: str) -> str | None:
        """The page a file stands for: itself, or where a redirect stub leads."""
        return self.reach(self.refresh[path]) if path in self.refresh else path


def redirect_stubs(webmap: WebMap) -> dict[str, str]:
    """Redirect stub pages and where their refresh leads (empty before the link graph is built)."""
    try:
        return dict(webmap.db.execute("SELECT path, refresh FROM pages WHERE refresh IS NOT NULL"))
    except sqlite3.OperationalError:  # no link graph yet, or one from before stubs were recorded
        return {}


def _tree(path: Path) -> LexborHTMLParser | None:
    """The page as the crawler's parser reads it (None: unreadable or not text)."""
    try:
        return html_tree(decode_html(path.read_bytes())[0])
    except (OSError, DecodeError):
        return None


def _hrefs(path: Path, url: str) -> list[str]:
    """The page's hrefs; under a <base href> they are made absolute, as a browser would."""
    tree = _tree(path)
    if tree is None:
        return []
    hrefs = [href.strip() for a in tree.css("a[href]") if (href := a.attributes["href"])]
    base = tree.css_first("base[href]")
    if base is None:
        return hrefs
    try:
        base_url = urljoin(url, (base.attributes["href"] or "").strip())
        return [href if href.startswith("#") else urljoin(base_url, href) for href in hrefs]
    except ValueError:
        return hrefs


def _refresh_of(path: str) -> tuple[str, str | None]:
    """(page, where its quick <meta> refresh leads, if it is a redirect stub)."""
    file = _webmap.root / path
    with open(file, "rb") as handle:
        if not _REFRESH_HINT.search(handle.read(4096)):
            return path, None
    tree = _tree(file)
    return path, (meta_refresh(head_elements(tree.root), _webmap.url_of(path)) if tree is not None else None)


def _page_links(path: str) -> tuple[str, list[str], Counter]:
    """(page, pages it links to, counts of how its links resolve)."""
    webmap = _webmap
    resolver = _resolver
    url = webmap.url_of(path)
    counts: Counter = Counter()
    targets = []
    for href in _hrefs(webmap.root / path, url):
        if href.startswith(("#", "javascript:", "mailto:", "data:")):
            continue
        try:
            target = _route(webmap, resolver, path, url, href, counts)
        except ValueError:  # an href no URL parser accepts
            counts["malformed"] += 1
            continue
        if target:
            targets.append(target)
    return path, sorted(set(targets)), counts


def _route(webmap: WebMap, resolver: Resolver, path: str, url: str, href: str, counts: Counter) -> str | None:
    """The page an href of ``path`` reaches over HTTP, counting how it resolves."""
    parts = urlsplit(href)
    if parts.scheme in ("http", "https"):
        if (parts.hostname or "") not in webmap.by_host:
            counts["outside_web"] += 1
            return None
        counts["absolute_into_web"] += 1
        target = resolver.reach(canonical_url(href))
        counts["absolute_into_web_resolved"] += target is not None
        return target
    if parts.scheme or parts.netloc:
        return None
    disk = parts.path if parts.path.startswith("/") else posixpath.join("/" + posixpath.dirname(path), parts.path)
    on_disk = webmap.resolve(posixpath.normpath(unquote(disk)).lstrip("/")) if parts.path else path
    if on_disk is None:
        counts["broken_on_disk"] += 1
        return None
    counts["on_disk"] += 1
    target = resolver.reach(canonical_url(urljoin(url, href)))
    counts["on_disk_and_http"] += target == resolver.past_stub(on_disk)
    return target


def _init(directory: str) -> None:
    global _webmap, _resolver
    _webmap = WebMap(Path(directory))
    _resolver = Resolver(_webmap)


def build_link_graph(directory: Path, processes: int = 2, progress=None) -> dict:
    """Parse every page of the test web; fill ``pages`` and ``links``; return the link report."""
    webmap = WebMap(directory)
    db = connect(directory)
    db.executescript(GRAPH_SCHEMA)
    pages = [(path, package) for path, package in db.execute("SELECT path, package FROM files WHERE page = 1 ORDER BY path")]
    db.executemany("INSERT INTO pages (path, package, url) VALUES (?, ?, ?)",
                   [(path, package, webmap.url_of(path, package)) for path, package in pages])
    db.commit()  # the workers read pages through their own connections
    ids = dict(db.execute("SELECT path, id FROM pages"))
    with get_context("fork").Pool(processes, initializer=_init, initargs=(str(directory),)) as pool:
        stubs = [(target, path) for path, target in pool.imap_unordered(_refresh_of, [p for p, _ in pages], 256) if target]
    db.executemany("UPDATE pages SET refresh = ? WHERE path = ?", stubs)
    db.commit()  # before the workers' resolvers load the stubs
    totals: Counter = Counter()
    with get_context("fork").Pool(processes, initializer=_init, initargs=(str(directory),)) as pool:
        for done, (path, targets, counts) in enumerate(pool.imap_unordered(_page_links, [p for p, _ in pages], 64), 1):
            totals.update(counts)
            source = ids[path]
            db.executemany("INSERT OR IGNORE INTO links VALUES (?, ?)",
                           [(source, ids[t]) for t in targets if t in ids and ids[t] != source])
            if progress and done % 2000 == 0:
                progress(done, len(pages))
    db.commit()
    report = dict(totals)
    report["pages"] = len(pages)
    report["redirect_stubs"] = len(stubs)
    report["page_links"] = db.execute("SELECT COUNT(*) FROM links").fetchone()[0]
    report["http_over_disk"] = round(totals["on_disk_and_http"] / totals["on_disk"], 4) if totals["on_disk"] else None
    return report
