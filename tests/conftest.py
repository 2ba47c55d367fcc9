"""Real HTTP servers on 127.0.0.1 for the tests, each on its own event loop in a thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from aiohttp import web

from focuscrawl.config import validate_config


class LiveServer:
    """An aiohttp application served on a free loopback port; records every request it gets."""

    def __init__(self, app: web.Application):
        self.requests: list[tuple[float, str, str]] = []  # (monotonic time, host, path_qs)
        app.middlewares.append(self._record)
        self._app = app
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    @web.middleware
    async def _record(self, request: web.Request, handler):
        self.requests.append((time.monotonic(), request.host.partition(":")[0], request.path_qs))
        return await handler(request)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._runner = web.AppRunner(self._app, access_log=None, handler_cancellation=True, shutdown_timeout=0.1)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = self._runner.addresses[0][1]
        self._ready.set()
        self._loop.run_forever()

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def paths(self) -> list[str]:
        return [path for _, _, path in self.requests]

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def serve() -> Callable[[web.Application], LiveServer]:
    servers: list[LiveServer] = []

    def start(app: web.Application) -> LiveServer:
        server = LiveServer(app)
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
