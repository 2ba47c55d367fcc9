"""Serve an aiohttp application on loopback from a background thread, recording requests.

Used by the tests (real servers, not mocks) and by ``focuscrawl demo``.
"""

from __future__ import annotations

import asyncio
import threading
import time

from aiohttp import web


class ThreadedServer:
    """An application on a free 127.0.0.1 port, on its own event loop in a daemon thread."""

    def __init__(self, app: web.Application, host: str = "127.0.0.1"):
        self.requests: list[tuple[float, str, str]] = []  # (monotonic time, Host without port, path?query)
        app.middlewares.append(self._record)
        self._app = app
        self._host = host
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="focuscrawl-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the local server did not start")

    @web.middleware
    async def _record(self, request: web.Request, handler):
        self.requests.append((time.monotonic(), request.host.partition(":")[0], request.path_qs))
        return await handler(request)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._runner = web.AppRunner(self._app, access_log=None, handler_cancellation=True, shutdown_timeout=0.1)
        self._loop.run_until_complete(self._runner.setup())
        self._loop.run_until_complete(web.TCPSite(self._runner, self._host, 0).start())
        self.port = self._runner.addresses[0][1]
        self._ready.set()
        self._loop.run_forever()

    def url(self, path: str = "/") -> str:
        return f"http://{self._host}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [path for _, _, path in self.requests]

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
