"""Real HTTP servers on 127.0.0.1 for the tests, and a fast loopback-only config."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Union

import numpy as np
import pytest
from aiohttp import web

from focuscrawl.config import validate_config
from focuscrawl.testweb.postgres import PostgresUnavailable, ThrowawayPostgres
from focuscrawl.testweb.server import ThreadedServer


ALLOW_ALL = "User-agent: *\nAllow: /\n"
Site = Union[web.Application, dict, Callable[[web.Request], Awaitable[web.StreamResponse]]]


def pages_app(pages: dict[str, str | bytes], robots: str | None = ALLOW_ALL,
              headers: dict[str, dict] | None = None) -> web.Application:
    """Serves path -> HTML and ``robots`` at /robots.txt (None: 404); anything else is 404.
    ``headers``: extra response headers per path."""

    async def handle(request):
        if request.path == "/robots.txt" and robots is not None:
            return web.Response(text=robots, content_type="text/plain")
        if request.path not in pages:
            raise web.HTTPNotFound()
        body, extra = pages[request.path], (headers or {}).get(request.path, {})
        if isinstance(body, bytes):
            return web.Response(body=body, headers={"Content-Type": "text/html", **extra})
        return web.Response(text=body, content_type="text/html", headers=extra or None)

    return handler_app(handle)


def handler_app(handler) -> web.Application:
    """One handler answers every GET."""
    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    return app


@pytest.fixture
def serve() -> Callable[..., ThreadedServer]:
    """Starts a real server on 127.0.0.1 for the test: ``serve(app)``, ``serve({path: html},
    robots=..., headers=...)`` (``pages_app``) or ``serve(handler)`` (``handler_app``)."""
    servers: list[ThreadedServer] = []

    def start(site: Site, **options) -> ThreadedServer:
        if isinstance(site, dict):
            site = pages_app(site, **options)
        elif not isinstance(site, web.Application):
            site = handler_app(site)
        server = ThreadedServer(site)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def pytest_collection_modifyitems(items) -> None:
    """Tests that start a loopback server are marked ``network``."""
    for item in items:
        if "serve" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.network)


def near_copy_site() -> dict[str, str]:
    """Two pages whose texts differ by two words (/v1, /v2), each linking to a page of its own."""
    import numpy as np

    rng = np.random.default_rng(9)
    text = " ".join(rng.choice([f"term{i}" for i in range(300)], 500))
    changed = text.split()
    changed[10:12] = ["revised", "wording"]
    return {"/": '<a href="/v1">v1</a> <a href="/v2">v2</a>',
            "/v1": f'<p>{text}</p><a href="/v1/more">more</a>',
            "/v2": f'<p>{" ".join(changed)}</p><a href="/v2/more">more</a>',
            "/v1/more": "<p>the first copy's own page</p>", "/v2/more": "<p>the second copy's own page</p>"}


def fast_config(**overrides):
    """A fast, loopback-only config for tests; nested dicts override section by section."""
    data = {
        "politeness": {"min_interval": 0.0},
        "fetch": {"loopback_only": True, "retries": 1, "backoff": 0.01, "connect_timeout": 2,
                  "read_timeout": 2, "total_timeout": 5, "concurrency": 8,
                  "processes": 1},  # a worker pool's start-up would dominate these small crawls; its own tests ask for it
        "strategy": "bfs",
        "budget": {"max_pages": 1000},
        "store": {"warc": True},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return validate_config(data, "test")


@pytest.fixture
def make_config():
    return fast_config


@pytest.fixture
def critic_crawl(serve, make_config, tmp_path):
    """A best-first crawl with a critic of a synthetic four-topic site, indexed, with the site."""
    from focuscrawl.crawler import Crawler
    from focuscrawl.search.indexing import index_crawl
    from focuscrawl.testweb.synthetic import build_site, make_app, topic_config

    site = build_site(pages=200, hosts=4, seed=3)
    server = serve(make_app(site))
    config = topic_config(site, server.port, tmp_path / "examples", strategy="best-first", budget={"max_pages": 80},
                          **make_config(seeds=["http://x/"]).model_dump(include={"politeness", "fetch"}))
    directory = tmp_path / "crawl"
    asyncio.run(Crawler.create(config, directory).run())
    index_crawl(directory)  # link analysis for the authority order
    return directory, site


@pytest.fixture(scope="session")
def postgres_dsn():
    """A PostgreSQL server for the shared backend: ``FOCUSCRAWL_PG``, or a throw-away cluster on a
    Unix socket. Without PostgreSQL installed the tests skip, except in CI, where they fail."""
    if os.environ.get("FOCUSCRAWL_PG"):
        yield os.environ["FOCUSCRAWL_PG"]
        return
    try:
        cluster = ThrowawayPostgres()
    except PostgresUnavailable as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"{error}; install postgresql or set FOCUSCRAWL_PG")
    yield cluster.dsn
    cluster.stop()


def linking(store, rows: list[tuple[int, int, bytes, float]]) -> None:
    """(source, target, features, source's score) of links, recorded as the crawl records a page's:
    in the ``links`` table and as the apprentice's instances, with the source's latest fetch (0 if none)."""
    store.record_links([(source, target, None, 0, 0, 0) for source, target, _, _ in rows])
    for source, score in {source: score for source, _, _, score in rows}.items():  # a page has one score
        fetch_id = store.db.execute("SELECT IFNULL(MAX(id), 0) FROM fetches WHERE url_id = ?", (source,)).fetchone()[0]
        store.record_link_features(source, fetch_id, score, *instance_arrays(
            [(target, features) for s, target, features, _ in rows if s == source]))


def instance_arrays(links: list[tuple[int, bytes]]) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(target, features as stored) pairs as ``record_link_features`` takes a page's links:
    targets, every link's ids end to end, and where each link's ids begin."""
    lengths = [len(features) // 4 for _, features in links]
    return ([target for target, _ in links], np.frombuffer(b"".join(features for _, features in links), dtype=np.uint32),
            np.cumsum([0, *lengths]))


def learnt_at_once(store) -> list:
    """The instances ``store.new_instances`` gives, marked learnt in the same unit (as a batch of
    the apprentice's keeps them): their rows."""
    instances = store.new_instances()
    store.mark_learnt(instances)
    return instances.rows


def running(pid: int) -> bool:
    """Whether the process runs (not gone, nor a zombie left for whoever adopted it to reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False
