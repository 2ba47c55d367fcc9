"""Serve the test web over HTTP on loopback: one port, every site told apart by its Host header."""

from __future__ import annotations

import asyncio
import mimetypes
import time
from pathlib import Path

import yaml
from aiohttp import web

from focuscrawl.testweb.webmap import WebMap

CHUNK = 16384


def robots_txt(webmap: WebMap, host: str) -> str:
    rules = webmap.robots.get(host, [])
    return "User-agent: *\n" + "".join(f"Disallow: {rule}\n" for rule in rules) + ("" if rules else "Disallow:\n")


def make_app(webmap: WebMap, latency: float = 0.0, bandwidth: float | None = None,
             access_log: Path | None = None) -> web.Application:
    """``latency`` seconds before each answer; ``bandwidth`` bytes/s while sending a body;
    ``access_log``: a line per request as it arrives, to check politeness from the server's side:
    epoch seconds when its bytes were read (``ArrivalNoting``), seconds more until its handler
    ran (the server's own queue), Host, path."""

    async def handle(request: web.Request) -> web.StreamResponse:
        if latency:
            await asyncio.sleep(latency)
        host = request.host.rpartition(":")[0] if request.host.count(":") == 1 else request.host
        if request.path == "/robots.txt" and host in webmap.by_host:
            return web.Response(text=robots_txt(webmap, host), content_type="text/plain")
        found = webmap.locate(host, request.path)
        if found is None:
            raise web.HTTPNotFound()
        kind, target = found
        if kind == "redirect":
            raise web.HTTPMovedPermanently(target)
        path = webmap.root / target
        try:
            body = path.read_bytes()  # a page of the web is small and in the page cache: read on the loop
        except OSError:
            raise web.HTTPNotFound() from None
        if bandwidth is None:
            return web.Response(body=body, headers=_file_headers(path))
        return await _throttled(request, body, _file_headers(path), bandwidth)

    app = web.Application()
    if access_log is not None:
        log = open(access_log, "a", encoding="utf-8", buffering=1)

        @web.middleware
        async def record(request: web.Request, handler):
            now = time.time()
            arrived = getattr(request.transport and request.transport.get_protocol(), "arrived", now)
            log.write(f"{arrived:.6f} {now - arrived:.6f} {request.host.partition(':')[0]} {request.path_qs}\n")
            return await handler(request)

        app.middlewares.append(record)
        app.on_cleanup.append(lambda app: asyncio.to_thread(log.close))
    app.router.add_get("/{tail:.*}", handle)
    return app


class ArrivalNoting(asyncio.Protocol):
    """aiohttp's protocol for one connection, with the time its last bytes came in (``arrived``).
    The loop reaches a request's handler only after the handlers ahead of it: under a burst from
    several crawlers that was up to 38 ms later than the read, and two requests to one host would
    seem closer than they came."""

    def __init__(self, inner: asyncio.Protocol):
        self.inner, self.arrived = inner, 0.0

    def connection_made(self, transport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.arrived = time.time()
        self.inner.data_received(data)

    def eof_received(self):
        return self.inner.eof_received()

    def connection_lost(self, exc) -> None:
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


def _file_headers(path: Path) -> dict[str, str]:
    """The Content-Type of a file by its name; a compressed file is served as it is (gzip or
    bytes), as aiohttp's FileResponse did. Not FileResponse itself: its file operations in
    threads cost the server 1.0–1.4 ms of CPU per page against 0.3 ms read here, and the server
    shares the benchmarks' cores with the crawl."""
    content_type, encoding = mimetypes.guess_type(path.name)
    if encoding:
        content_type = "application/gzip" if encoding == "gzip" else None
    return {"Content-Type": content_type or "application/octet-stream"}


async def _throttled(request: web.Request, body: bytes, headers: dict[str, str], bandwidth: float) -> web.StreamResponse:
    response = web.StreamResponse(headers={**headers, "Content-Length": str(len(body))})
    await response.prepare(request)
    for start in range(0, len(body), CHUNK):
        await response.write(body[start:start + CHUNK])
        await asyncio.sleep(CHUNK / bandwidth)
    return response


def write_host_map(webmap: WebMap, port: int, path: Path | None = None) -> Path:
    """``DIR/hostmap.yml`` (or ``path``): the ``host_map`` section a crawl config needs to reach every site."""
    path = path or webmap.directory / "hostmap.yml"
    data = {"hosts": {host: f"127.0.0.1:{port}" for host in webmap.hosts()}, "https_to_http": True}
    path.write_text(yaml.safe_dump(data, sort_keys=True))
    return path


async def serve(webmap: WebMap, port: int = 0, latency: float = 0.0, bandwidth: float | None = None,
                ready=None, hostmap: Path | None = None, access_log: Path | None = None) -> None:
    runner = web.AppRunner(make_app(webmap, latency, bandwidth, access_log), access_log=None)
    await runner.setup()
    listening = await asyncio.get_running_loop().create_server(lambda: ArrivalNoting(runner.server()), "127.0.0.1",
                                                               port, backlog=1024)
    port = listening.sockets[0].getsockname()[1]
    hostmap = write_host_map(webmap, port, hostmap)
    if ready:
        ready(port, hostmap)
    try:
        await asyncio.Event().wait()
    finally:
        listening.close()
        await runner.cleanup()
