"""Real HTTP servers on 127.0.0.1 for the tests, and a fast loopback-only config."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from aiohttp import web

from focuscrawl.config import validate_config
from focuscrawl.testweb.server import ThreadedServer


@pytest.fixture
def serve() -> Callable[[web.Application], ThreadedServer]:
    servers: list[ThreadedServer] = []

    def start(app: web.Application) -> ThreadedServer:
        server = ThreadedServer(app)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def fast_config(**overrides):
    """A fast, loopback-only config for tests; nested dicts override section by section."""
    data = {
        "politeness": {"min_interval": 0.0},
        "fetch": {"loopback_only": True, "retries": 1, "backoff": 0.01, "connect_timeout": 2,
                  "read_timeout": 2, "total_timeout": 5, "concurrency": 8},
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
