"""HTTP fetching: host map, politeness per request, robots.txt, redirects, caps, retries.

One call, :meth:`Fetcher.fetch`, turns a URL into a :class:`Response`, never raising for
network trouble: what went wrong is in ``Response.error``. Every exchange on the wire is kept
so the archive can record requests and responses exactly as they happened.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
import zlib
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from urllib.parse import urljoin, urlsplit, urlunsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from protego import Protego

from focuscrawl.config import CrawlConfig
from focuscrawl.fetch.addresses import AddressPolicy
from focuscrawl.fetch.hosts import BAD, Hosts
from focuscrawl.fetch.urls import UrlRules, canonical_url, host_of

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
ROBOTS_MAX_BYTES = 500_000  # RFC 9309 §2.5: at least 500 KiB are parsed; the rest of a longer file is ignored
ROBOTS_MAX_REDIRECTS = 5  # RFC 9309 §2.3.1.2
ACCEPT = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.1"
ERROR_PAGE_BYTES = 65536
INFLATED_TOO_LARGE = "decompressed body exceeds"  # a gzip/deflate body past its cap: refused, like a large one


class PolicyRefusal(OSError):
    """An address the configuration forbids (loopback_only)."""


@dataclass(slots=True)
class Exchange:
    """One request and its response as they crossed the wire (body as received, maybe compressed)."""

    url: str
    request_headers: dict[str, str]
    status: int = 0
    reason: str = ""
    http_version: str = "HTTP/1.1"
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    raw_body: bytes = b""
    truncated: bool = False


@dataclass(slots=True)
class Response:
    url: str
    final_url: str
    started_at: float
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    mime: str = ""
    charset: str | None = None
    body: bytes = b""
    error: str | None = None
    redirects: list[tuple[int, str, str]] = field(default_factory=list)
    redirect_to: str | None = None  # a redirect to another host, left for the frontier
    exchanges: list[Exchange] = field(default_factory=list)
    attempts: int = 0
    seconds: float = 0.0
    refused: bool = False  # not fetched by our own rules (robots.txt, policy, MIME type, size): not a page fetch

    @property
    def ok_html(self) -> bool:
        return self.error is None and self.status is not None and 200 <= self.status < 300


class _AttemptFailed(Exception):
    def __init__(self, reason: str, transient: bool, host_failure: bool, refused: bool = False):
        super().__init__(reason)
        self.reason, self.transient, self.host_failure, self.refused = reason, transient, host_failure, refused


class HostMapResolver(AbstractResolver):
    """Sends mapped host names to their loopback mirrors; with loopback_only, nothing else leaves;
    an address the crawl may not reach (:class:`.addresses.AddressPolicy`) is refused after DNS."""

    def __init__(self, host_map: dict[str, str], loopback_only: bool, policy: AddressPolicy | None = None):
        self.host_map = {name: address.rpartition(":") for name, address in host_map.items()}
        self.loopback_only = loopback_only
        self.policy = policy or AddressPolicy(loopback_only=loopback_only)
        self.fallback = DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        mapped = self.host_map.get(host.lower())
        if mapped:
            address, _, mapped_port = mapped
            found = [ResolveResult(hostname=host, host=address.strip("[]"), port=int(mapped_port), family=socket.AF_INET,
                                   proto=0, flags=socket.AI_NUMERICHOST)]
        elif self.loopback_only and host.lower() != "localhost":
            raise PolicyRefusal(f"host {host} is not in the host map and fetch.loopback_only is set")
        else:
            found = await self.fallback.resolve(host, port, family)
        for result in found:  # every address: a name may resolve to a public and a private one
            reason = self.policy.refusal(result["host"])
            if reason:
                raise PolicyRefusal(f"host {host}: {reason}")
        return found

    async def close(self) -> None:
        await self.fallback.close()


class Fetcher:
    def __init__(self, config: CrawlConfig, hosts: Hosts):
        self.config = config
        self.hosts = hosts
        self.rules = UrlRules(config)
        self.user_agent = config.politeness.user_agent
        self.obey_robots = config.politeness.robots
        self._robots: dict[str, Protego | str | None] = {}  # origin -> rules, or why everything is disallowed
        self._robots_pending: dict[str, asyncio.Future] = {}
        self.sitemaps: dict[str, list[str]] = {}  # origin -> sitemap URLs named by its robots.txt
        self.session: aiohttp.ClientSession | None = None
        self.policy = AddressPolicy(config.fetch.allow_networks, config.fetch.allow_loopback, config.fetch.loopback_only)

    async def __aenter__(self) -> Fetcher:
        fetch = self.config.fetch
        connector = aiohttp.TCPConnector(
            limit=fetch.concurrency + 8,
            ttl_dns_cache=fetch.dns_cache_seconds or None,
            use_dns_cache=fetch.dns_cache_seconds > 0,
            resolver=HostMapResolver(self.config.host_map.hosts, fetch.loopback_only, self.policy),
        )
        timeout = aiohttp.ClientTimeout(total=fetch.total_timeout, sock_connect=fetch.connect_timeout, sock_read=fetch.read_timeout)
        leaving = aiohttp.TraceConfig()  # the last moment before a request is written: politeness's final word
        leaving.on_connection_create_end.append(self._leaving)
        leaving.on_connection_reuseconn.append(self._leaving)
        self.session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False,
                                             cookie_jar=aiohttp.DummyCookieJar(), trace_configs=[leaving])
        return self

    async def _leaving(self, session, context, params) -> None:
        await self.hosts.leave(context.trace_request_ctx)

    async def __aexit__(self, *exc) -> None:
        await self.session.close()

    # -- the public call -------------------------------------------------------------------

    async def fetch(self, url: str, follow_other_hosts: bool = False) -> Response:
        """Fetch a page: robots.txt, politeness, retries and redirects included.

        Redirects within the host are followed. One to another host ends the fetch with
        ``redirect_to`` set: the crawler queues the target, so the frontier keeps that host
        polite. One-off fetches (topic examples) pass ``follow_other_hosts``."""
        response = Response(url=url, final_url=url, started_at=time.time())
        clock = time.monotonic()
        limit = self.config.fetch.total_timeout
        try:
            async with asyncio.timeout(limit):  # a tarpit or a hanging robots.txt cannot hold a worker longer
                await self._follow(response, self._mime_caps, self.config.fetch.max_redirects, self.obey_robots,
                                   follow_other_hosts)
        except _AttemptFailed as failure:
            response.error, response.refused = failure.reason, failure.refused
        except TimeoutError:
            response.error = f"gave up after fetch.total_timeout {limit:g} s (retries and waits included)"
            response.refused = False
            if not (response.exchanges and response.exchanges[-1].status):  # a host that answers is not down
                self.hosts.record_failure(host_of(response.final_url))
        response.seconds = time.monotonic() - clock
        return response

    async def robots_refusal(self, url: str) -> str | None:
        """Why robots.txt of the URL's origin forbids it (None: allowed); fetched once per origin
        and shared by all workers."""
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        while origin not in self._robots:
            pending = self._robots_pending.get(origin)
            if pending is not None:  # another worker is loading it; if that fails, try ourselves
                await asyncio.shield(pending)
                continue
            pending = self._robots_pending[origin] = asyncio.get_running_loop().create_future()
            try:
                self._robots[origin] = await self._load_robots(origin)
            finally:
                del self._robots_pending[origin]
                pending.set_result(None)
        rules = self._robots[origin]
        if isinstance(rules, str):
            return rules
        return None if rules is None or rules.can_fetch(url, self.user_agent) else "disallowed by robots.txt"

    # -- internals --------------------------------------------------------------------------

    async def _load_robots(self, origin: str) -> Protego | str | None:
        """2xx: its rules (the first 500 KB of a longer file); 4xx: no rules; 5xx: everything
        disallowed, with the reason (RFC 9309 §2.3.1.3-4). Unreachable: the URL fails, not cached."""
        response = Response(url=origin + "/robots.txt", final_url=origin + "/robots.txt", started_at=time.time())
        try:
            await self._follow(response, lambda mime: ROBOTS_MAX_BYTES, ROBOTS_MAX_REDIRECTS, False, True)
        except _AttemptFailed as failure:  # the host is down or hangs: so would the page (tried again next time)
            raise _AttemptFailed(f"robots.txt unreachable: {failure.reason}", failure.transient, False,
                                 failure.refused) from None
        if response.status is not None and 500 <= response.status:
            return f"robots.txt answered {response.status}: everything disallowed"
        if response.status is None or not 200 <= response.status < 300:
            return None
        last = response.exchanges[-1]
        body = last.raw_body if last.truncated else response.body
        rules = Protego.parse(body.decode("utf-8", errors="replace"))
        self.hosts.set_crawl_delay(host_of(origin), rules.crawl_delay(self.user_agent))
        self.sitemaps[origin] = list(rules.sitemaps)
        return rules

    async def _follow(self, response: Response, caps, max_redirects: int, obey_robots: bool, other_hosts: bool) -> None:
        """Request ``response.url`` and follow its redirects, filling ``response``;
        ``final_url`` becomes the URL that answered without a redirect."""
        current, seen = response.url, {response.url}
        for _ in range(max_redirects + 1):
            refusal = await self.robots_refusal(current) if obey_robots else None
            if refusal:
                response.error, response.refused = refusal, True
                return
            exchange = await self._with_retries(current, response, caps)
            location = _header(exchange.response_headers, "location")
            if not (300 <= exchange.status < 400 and location):
                response.final_url = current
                return
            try:
                target = canonical_url(urljoin(current, location.strip()))
            except ValueError:
                response.error = f"redirect to a malformed URL: {location!r}"
                return
            response.redirects.append((exchange.status, current, target))
            reason = self.rules.rejection(target)
            if reason:
                response.error, response.refused = f"redirect to a URL not crawled ({reason}): {target}", True
                return
            if target in seen:
                response.error = f"redirect loop at {target}"
                return
            if not other_hosts and host_of(target) != host_of(current):
                response.redirect_to = target
                return
            seen.add(target)
            current = target
        response.error = f"more than {max_redirects} redirects"

    def _mime_caps(self, mime: str) -> int | None:
        """Byte cap for an allowed MIME type, None if the type is not crawled."""
        if mime not in self.config.fetch.mime_allow:
            return None
        caps = self.config.fetch.max_bytes
        return caps.get(mime, caps.get("*", 1_000_000))

    async def _with_retries(self, url: str, response: Response, caps) -> Exchange:
        """Transient failures (network, timeouts, 429/5xx) are tried again after 1, 2, 4 … × backoff,
        or after the server's Retry-After (capped like a Crawl-delay). A URL that still fails counts
        once against its host (BINGO! §2.3.8: a host failing three times is bad), so that one broken
        page, retried, does not exclude a whole site."""
        host = host_of(url)
        retries = self.config.fetch.retries
        attempt = 0
        while True:
            if self.hosts[host].status == BAD:
                raise _AttemptFailed(f"host {host} is marked bad after repeated failures", False, False, True)
            response.attempts += 1
            last_try = attempt == retries
            try:
                exchange = await self._attempt(url, response, caps)
            except _AttemptFailed as failure:
                if last_try or not failure.transient:
                    if failure.host_failure:
                        self.hosts.record_failure(host)
                    raise
            else:
                self.hosts.record_success(host)
                if last_try or exchange.status not in RETRY_STATUSES:
                    return exchange
                self.hosts.defer(host, _retry_after(exchange.response_headers))
            await asyncio.sleep(self.config.fetch.backoff * 2**attempt)
            attempt += 1

    def _wire_url(self, url: str) -> str:
        """https of a mapped host goes over plain http when the host map says so."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if parts.scheme == "https" and self.config.host_map.https_to_http and host in self.config.host_map.hosts:
            netloc = parts.netloc if parts.port not in (None, 443) else parts.netloc.rsplit(":443", 1)[0]
            return urlunsplit(("http", netloc, parts.path, parts.query, ""))
        try:  # an address in the URL: no DNS, so the policy is asked here
            ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            return url
        reason = self.policy.refusal(host)
        if reason:
            raise _AttemptFailed(reason, False, False, True)
        return url

    async def _attempt(self, url: str, response: Response, caps) -> Exchange:
        """One request on the wire; fills ``response`` with what it learned. A failure counts against
        the host only if it sent no answer: a stall or reset in one page's body is that page's fault."""
        request_headers = {"User-Agent": self.user_agent, "Accept": ACCEPT, "Accept-Encoding": "gzip, deflate"}
        exchange = Exchange(url, request_headers)
        response.exchanges.append(exchange)
        host = host_of(url)
        await self.hosts.wait_turn(host)
        try:
            async with self.session.get(self._wire_url(url), headers=request_headers, allow_redirects=False,
                                        trace_request_ctx=host) as resp:
                self.hosts.answered(host)
                exchange.status = resp.status
                exchange.reason = (resp.reason or "").encode("ascii", "replace").decode("ascii")
                exchange.http_version = f"HTTP/{resp.version.major}.{resp.version.minor}"
                exchange.response_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in resp.raw_headers]
                response.status, response.headers = resp.status, {k.lower(): v for k, v in exchange.response_headers}
                response.mime, response.charset, response.body, response.error = "", None, b"", None
                response.refused = False
                if 300 <= resp.status < 400 and "location" in response.headers:
                    return exchange
                response.mime = resp.content_type if "content-type" in response.headers else "text/html"
                response.charset = resp.charset
                cap = caps(response.mime)
                if cap is None and not 200 <= resp.status < 300:  # an error page, kept for the archive whatever its type
                    cap = ERROR_PAGE_BYTES
                response.refused = True  # until the body is read: a type or size we do not take
                if cap is None:
                    response.error = f"MIME type {response.mime} is not in fetch.mime_allow"
                    return exchange
                if resp.content_length is not None and resp.content_length > cap:
                    response.error = f"body of {resp.content_length} bytes exceeds the {cap}-byte cap for {response.mime}"
                    return exchange
                exchange.raw_body, exchange.truncated = await _read_capped(resp.content, cap)
                if exchange.truncated:
                    response.error = f"body exceeds the {cap}-byte cap for {response.mime}; download aborted"
                    return exchange
                response.body, response.error = _decode_content(exchange.raw_body, response.headers.get("content-encoding", ""), cap)
                response.refused = response.error is not None and response.error.startswith(INFLATED_TOO_LARGE)
                return exchange
        except PolicyRefusal as err:
            raise _AttemptFailed(str(err), False, False, True) from None
        except aiohttp.ConnectionTimeoutError:
            raise _AttemptFailed(f"timeout: no connection within {self.config.fetch.connect_timeout:g} s", True, True) from None
        except aiohttp.SocketTimeoutError:
            raise _AttemptFailed(f"timeout: silent for {self.config.fetch.read_timeout:g} s", True, not exchange.status) from None
        except asyncio.TimeoutError:
            raise _AttemptFailed(f"timeout: no answer within {self.config.fetch.total_timeout:g} s", True,
                                 not exchange.status) from None
        except aiohttp.ClientConnectorError as err:
            if isinstance(err.os_error, PolicyRefusal):
                raise _AttemptFailed(str(err.os_error), False, False, True) from None
            raise _AttemptFailed(f"cannot connect: {err.os_error.strerror or err.os_error}", True, True) from None
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as err:
            raise _AttemptFailed(f"connection broken: {type(err).__name__}: {err}", True, not exchange.status) from None
        except (aiohttp.ClientError, ValueError) as err:  # malformed responses, URLs aiohttp refuses
            raise _AttemptFailed(f"bad response: {type(err).__name__}: {err}", False, False) from None


async def _read_capped(stream: aiohttp.StreamReader, cap: int) -> tuple[bytes, bool]:
    body = bytearray()
    async for chunk in stream.iter_any():
        body += chunk
        if len(body) > cap:
            return bytes(body[:cap]), True
    return bytes(body), False


def _decode_content(raw: bytes, encoding: str, cap: int) -> tuple[bytes, str | None]:
    """gzip/deflate (all gzip members) with a cap on the inflated size, so a small bomb cannot
    fill memory; a truncated or corrupt stream is an error, not a silently short page."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return raw, None
    if encoding not in ("gzip", "x-gzip", "deflate"):
        return b"", f"unsupported Content-Encoding {encoding!r}"
    # deflate is zlib-wrapped by the standard, raw in some servers: try both
    for wbits in (31,) if encoding != "deflate" else (15, -15):
        body, rest = bytearray(), raw
        try:
            while rest:
                inflater = zlib.decompressobj(wbits)
                body += inflater.decompress(rest, cap + 1 - len(body))
                if len(body) > cap:
                    return b"", f"{INFLATED_TOO_LARGE} the {cap}-byte cap"
                if not inflater.eof:
                    return b"", f"truncated {encoding} body"
                rest = inflater.unused_data.lstrip(b"\0")
        except zlib.error:
            continue
        return bytes(body), None
    return b"", f"corrupt {encoding} body"


def _retry_after(headers: list[tuple[str, str]]) -> float:
    """Seconds a Retry-After header asks for (a number or an HTTP date); 0 without one."""
    value = (_header(headers, "retry-after") or "").strip()
    if value.isdigit():
        return float(value)
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError):
        return 0.0


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None
