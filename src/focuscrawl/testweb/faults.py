"""The fault web: a real server on 127.0.0.1 that behaves like the worst of the web.

Every behaviour a crawler has to survive is one address here, reached through a host map like
the test web: resets mid-body, a tarpit, a server that never answers, compression bombs, an
endless body, redirect loops and long chains, lying types and charsets, crawler traps (an
endless calendar, session ids, ever deeper relative links), 5xx storms, 429 with Retry-After,
a 50 MB page, a page of 100 000 links, robots.txt that hangs, fails, is huge or is HTML, and
malformed or international links. ``focuscrawl testweb faults`` serves it and writes a crawl
config for it; the tests and ``benchmarks/faults.py`` crawl it.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import zlib
from functools import lru_cache
from pathlib import Path

import yaml
from aiohttp import web

DOMAIN = "faults.test"
HOSTS = ("www", "calendar", "sessions", "deep", "storm", "busy", "silent",
         "robots-slow", "robots-5xx", "robots-huge", "robots-html", "xn--bcher-kva")  # the last is bücher, an IDN
HUGE_BYTES = 50_000_000
MANY_LINKS = 100_000
BOMB_BYTES = 200_000_000  # inflated; about 200 KB on the wire
RETRY_AFTER = 2  # seconds a busy host asks for
CHUNK = 65536
SLOW = {"silent", "robots-slow"}  # hosts where the named address never answers

PAGE_FAULTS = {  # path on www -> what it does, linked from the front page
    "/reset": "connection reset in the middle of the body",
    "/tarpit": "a byte a second, for hours",
    "/hang": "accepts the request and never answers",
    "/gzip-bomb": "200 MB of zeros in 200 KB of gzip",
    "/deflate-bomb": "the same as deflate",
    "/endless": "a body without end",
    "/loop/a": "a redirect loop",
    "/chain/0": "a chain of 30 redirects",
    "/type/wrong": "HTML served as image/png",
    "/type/missing": "no Content-Type at all",
    "/type/binary": "binary noise served as text/html",
    "/charset/lie": "Latin-1 bytes declared UTF-8",
    "/charset/utf16": "UTF-16 declared UTF-8 in a meta tag",
    "/charset/mixed": "UTF-8, Latin-1 and CP1252 in one page",
    "/charset/nul": "NUL bytes in the text",
    "/huge": "50 MB with a Content-Length",
    "/huge-chunked": "50 MB without one",
    "/links": "100 000 links",
    "/malformed": "malformed and international links",
}


def url(host: str, path: str = "/") -> str:
    return f"http://{host}.{DOMAIN}{path}"


def page(title: str, text: str, links: list[str] = ()) -> str:
    items = "".join(f'<li><a href="{html.escape(link)}">{html.escape(link)}</a></li>' for link in links)
    return (f"<!DOCTYPE html><html><head><title>{html.escape(title)}</title></head><body><h1>{html.escape(title)}</h1>"
            f"<p>{html.escape(text)}</p><ul>{items}</ul></body></html>")


def front_page() -> str:
    links = [url("www", path) for path in PAGE_FAULTS]
    links += [url("calendar", "/2026/11/"), url("sessions", "/?PHPSESSID=0123456789abcdef0123456789abcdef"), url("deep", "/a/a/a/"), url("storm", "/"),
              url("busy", "/"), url("silent", "/"), url("xn--bcher-kva", "/")]
    links += [url(f"robots-{kind}", "/") for kind in ("slow", "5xx", "huge", "html")]
    return page("The fault web", "Every link here is something a crawler has to survive. "
                + " ".join(f"{path}: {what}." for path, what in PAGE_FAULTS.items()), links)


@lru_cache(maxsize=2)
def bomb(wbits: int) -> bytes:
    """``BOMB_BYTES`` of zeros compressed (31: gzip, 15: zlib deflate), built once."""
    packer, zeros = zlib.compressobj(9, zlib.DEFLATED, wbits), bytes(CHUNK * 16)
    return b"".join(packer.compress(zeros) for _ in range(BOMB_BYTES // len(zeros))) + packer.flush()


async def _forever() -> None:
    await asyncio.Event().wait()


async def _stream(request: web.Request, headers: dict, chunks, pause: float = 0.0) -> web.StreamResponse:
    response = web.StreamResponse(headers=headers)
    response.content_type = headers.get("Content-Type", "text/html")
    await response.prepare(request)
    for chunk in chunks:
        await response.write(chunk)
        await asyncio.sleep(pause)
    await response.write_eof()
    return response


def _filler(total: int | None):
    """HTML in chunks: ``total`` bytes, or without end."""
    line = page("filler", "a line of a page that never ends " * 100).encode()
    sent = 0
    while total is None or sent < total:
        yield line
        sent += len(line)


async def _www(request: web.Request, path: str) -> web.StreamResponse:
    if path == "/reset":
        response = web.StreamResponse(headers={"Content-Length": "200000", "Content-Type": "text/html"})
        await response.prepare(request)
        await response.write(b"<html><body>" + b"x" * 5000)
        request.transport.abort()
        return response
    if path == "/tarpit":
        return await _stream(request, {"Content-Length": "10000"}, (b"x" for _ in range(10000)), pause=1.0)
    if path == "/hang":
        await _forever()
    if path in ("/gzip-bomb", "/deflate-bomb"):
        gzip = path == "/gzip-bomb"
        return web.Response(body=bomb(31 if gzip else 15), content_type="text/html",
                            headers={"Content-Encoding": "gzip" if gzip else "deflate"})
    if path == "/endless":
        return await _stream(request, {}, _filler(None))
    if path in ("/huge", "/huge-chunked"):
        headers = {"Content-Length": str(HUGE_BYTES)} if path == "/huge" else {}
        return await _stream(request, headers, (chunk[:HUGE_BYTES] for chunk in _huge_chunks()))
    if path.startswith(("/loop/", "/chain/")):
        return _redirect(path)
    if path.startswith(("/type/", "/charset/")):
        return _lying(path)
    if path == "/links":
        return web.Response(text=page("100 000 links", "A page of links.", [f"/many/{i}" for i in range(MANY_LINKS)]),
                            content_type="text/html")
    if path == "/malformed":
        return web.Response(text=_malformed_links(), content_type="text/html")
    if path == "/":
        return web.Response(text=front_page(), content_type="text/html")
    return web.Response(text=page(f"www {path}", "An ordinary page of the fault web."), content_type="text/html")


def _huge_chunks():
    filler, sent = b"<p>" + b"huge page text " * 4000 + b"</p>", 0
    yield b"<html><body>"
    while sent < HUGE_BYTES:
        yield filler
        sent += len(filler)


def _redirect(path: str) -> web.Response:
    if path.startswith("/loop/"):
        raise web.HTTPFound("/loop/b" if path == "/loop/a" else "/loop/a")
    step = path.removeprefix("/chain/")
    if step.isdigit() and int(step) < 30:
        raise web.HTTPMovedPermanently(f"/chain/{int(step) + 1}")
    return web.Response(text=page("the end of the chain", "Thirty redirects lead here."), content_type="text/html")


def _lying(path: str) -> web.Response:
    """Bodies whose type or charset is wrong, or missing."""
    text = page(path, "Crème brûlée, naïve façade, smörgåsbord — “quoted” – dashes.")
    bodies = {
        "/type/wrong": (text.encode(), "image/png"),
        "/type/missing": (text.encode(), None),
        "/type/binary": (bytes(range(256)) * 200, "text/html"),
        "/charset/lie": (text.encode("latin-1", "replace"), "text/html; charset=utf-8"),
        "/charset/utf16": (text.replace("<head>", '<head><meta charset="utf-8">').encode("utf-16"), "text/html"),
        "/charset/mixed": (text.encode() + "é latin".encode("latin-1") + "“cp1252”".encode("cp1252"), "text/html"),
        "/charset/nul": (text.replace("Crème", "Cr\0me\0\0").encode(), "text/html"),
    }
    if path not in bodies:
        raise web.HTTPNotFound()
    body, content_type = bodies[path]
    if content_type is None:
        return _Untyped(body=body)
    return web.Response(body=body, headers={"Content-Type": content_type})


class _Untyped(web.Response):
    """A response without Content-Type, which aiohttp would otherwise add."""

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        self.headers.popall("Content-Type", None)


def _malformed_links() -> str:
    links = ["http://[::1", "http://exa mple.faults.test/", "http://www.faults.test:99999/", "http://%zz/",
             "javascript:alert(1)", "mailto:someone@faults.test", "http://bücher.faults.test/idn",
             "http://xn--bcher-kva.faults.test/punycode", "http://www.faults.test/" + "a" * 5000,
             "http://www.faults.test/%E0%A4%A", "http:///no-host", "//www.faults.test/scheme-relative",
             "http://user:pass@www.faults.test/credentials", "http://WWW.FAULTS.TEST/UPPER", "\0http://nul/",
             "http://www.faults.test/\u202eevil", "http://[fe80::1%25eth0]/", "http://0x7f.0.0.1/", "ftp://www.faults.test/"]
    return page("malformed links", "Links no browser would follow as written.", links)


def _trap(host: str, request: web.Request) -> web.Response:
    """Pages that generate new URLs for ever: a calendar, session ids, relative links one level deeper."""
    if host == "calendar":
        parts = [int(p) for p in request.path.strip("/").split("/") if p.isdigit()][:2] or [2026, 11]
        year, month = (parts + [1])[:2]
        before = (year, month - 1) if month > 1 else (year - 1, 12)
        after = (year, month + 1) if month < 12 else (year + 1, 1)
        links = [f"/{y}/{m:02d}/" for y, m in (before, after)]
        return web.Response(text=page(f"{year}-{month:02d}", "A month of the endless calendar.", links),
                            content_type="text/html")
    if host == "sessions":  # the same three pages under ever new session ids
        token = hashlib.md5(request.path_qs.encode()).hexdigest()
        links = [f"{path}?PHPSESSID={token}" for path in ("/", "/about", "/contact")]
        return web.Response(text=page(f"session {request.path}", "The same pages under a new session id.", links),
                            content_type="text/html")
    return web.Response(text=page(f"deep {request.path}", "One level deeper.", ["a/", "b/"]), content_type="text/html")


def make_app() -> web.Application:
    """One application for every host of the fault web, told apart by the Host header."""
    counts: dict[str, int] = {}

    async def handle(request: web.Request) -> web.StreamResponse:
        host = request.host.partition(":")[0].removesuffix(f".{DOMAIN}")
        path = request.path
        if path == "/robots.txt":
            return await _robots(host)
        if host == "silent":
            await _forever()
        if host in ("calendar", "sessions", "deep"):
            return _trap(host, request)
        if host == "storm":
            raise web.HTTPServiceUnavailable(text="storm")
        if host == "busy":
            counts[request.path_qs] = counts.get(request.path_qs, 0) + 1
            if counts[request.path_qs] == 1:  # each page once: come back later, as told
                raise web.HTTPTooManyRequests(headers={"Retry-After": str(RETRY_AFTER)})
            return web.Response(text=page(f"busy {path}", "Answered on the second try.", ["/next"] if path == "/" else []),
                                content_type="text/html")
        if host == "www":
            return await _www(request, path)
        return web.Response(text=page(f"{host} {path}", "An ordinary page.", ["/one", "/two"] if path == "/" else []),
                            content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    return app


async def _robots(host: str) -> web.StreamResponse:
    if host in SLOW:
        await _forever()
    if host == "robots-5xx":
        raise web.HTTPInternalServerError()
    if host == "robots-huge":
        rules = "User-agent: *\n" + "".join(f"Disallow: /secret-{i}/\n" for i in range(500_000))
        return web.Response(text=rules, content_type="text/plain")
    if host == "robots-html":
        return web.Response(text=front_page(), content_type="text/html")
    return web.Response(text="User-agent: *\nDisallow: /private/\n", content_type="text/plain")


def crawl_config(port: int, max_pages: int = 300) -> dict:
    """A crawl config (as data) that reaches every host of the fault web on ``port``; breadth-first,
    because the fault web has no topic."""
    return {"seeds": [url("www")], "strategy": "bfs", "budget": {"max_pages": max_pages},
            "host_map": {"hosts": {f"{name}.{DOMAIN}": f"127.0.0.1:{port}" for name in HOSTS}}}


async def serve(port: int = 0, config: Path | None = None, max_pages: int = 300, ready=None) -> None:
    """Serve the fault web until cancelled; ``config`` gets a crawl config for it."""
    runner = web.AppRunner(make_app(), access_log=None, handler_cancellation=True, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    port = runner.addresses[0][1]
    if config:
        config.write_text(yaml.safe_dump(crawl_config(port, max_pages), sort_keys=False))
    if ready:
        ready(port)
    try:
        await _forever()
    finally:
        await runner.cleanup()
