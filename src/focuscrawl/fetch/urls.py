"""URL canonicalisation and admission: one spelling per page, and the rules for what to queue."""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from urllib.parse import urlsplit, urlunsplit

from w3lib.url import canonicalize_url

from focuscrawl.config import CrawlConfig

DEFAULT_PORTS = {"http": 80, "https": 443}
HOSTED_SCHEMES = frozenset({"ftp", "http", "https", "ws", "wss"})  # WHATWG's special schemes but file: a URL has a host
# session ids in URLs make one page look like endless new ones (a crawler trap): the names of the
# common frameworks, and "sid" when its value is a token rather than, say, a story number
SESSION_NAMES = re.compile(r"(?i)^(jsessionid|phpsessid|sessionid|session_id|aspsessionid[a-z]{8}|cfid|cftoken)$")
SESSION_TOKEN = re.compile(r"(?i)^(sid|s)$")
TOKEN_VALUE = re.compile(r"^[0-9A-Za-z]{16,}$")
PATH_SESSION = re.compile(r"(?i);jsessionid=[^/?#]*")
HOSTNAME = re.compile(r"[a-z0-9_.-]+|[0-9a-f:.]+(%[0-9a-z_.-]+)?")  # a DNS name (IDNs in punycode) or an IPv6 address
# a URL w3lib and the rules below leave as it is: http(s), a lower-case host of ASCII labels (as IDNA
# gives them back) whose last is not a number, no port, a path of characters safe in a path (no
# escape, no ';' parameters) and no '.' or '..' segment, no query, no fragment; most links of a
# site's pages look so. A host whose last label is a number ("0", "1.2.3", "a.1", "x.0x7f") is an
# IPv4 address to WHATWG's URL parser, and so to w3lib from 2.6: written out ("http://0.0.0.0/"),
# or refused ("a.1" is no address: ValueError)
PLAIN_URL = re.compile(r"https?://(?:[a-z0-9_-]{1,63}\.)*(?!(?:[0-9]+|0x[0-9a-f]*)/)[a-z0-9_-]{1,63}"
                       r"/[A-Za-z0-9._~!$&'()*+,=:@/-]*\Z")
DOT_SEGMENT = re.compile(r"/\.\.?(?:/|\Z)")


@lru_cache(maxsize=65536)
def canonical_url(url: str) -> str:
    """w3lib's canonical form (sorted query, no fragment, normalised escapes), without a default port
    or session ids (:func:`canonicalized`). Cached: navigation links repeat on every page of a site,
    and w3lib is the parser's slowest step; a plain URL (``PLAIN_URL``: 96 % of the URLs the test
    web's crawls meet) is canonical already, and is not parsed. Raises ValueError for a URL w3lib
    refuses (a port out of range; from w3lib 2.6, a host ending in a number that is no IPv4 address),
    and for a URL of a ``HOSTED_SCHEMES`` scheme without a host."""
    if PLAIN_URL.match(url) and not DOT_SEGMENT.search(url):
        return url
    return canonicalized(url)


def canonicalized(url: str) -> str:
    """:func:`canonical_url`, worked out whatever the URL."""
    url = canonicalize_url(url.strip())
    for _ in range(3 if "%" in url else 0):  # a stray '%' before an escape ('%%30') becomes a new escape
        again = canonicalize_url(url)
        if again == url:
            break
        url = again
    parts = urlsplit(url)
    if not parts.hostname and parts.scheme in HOSTED_SCHEMES:  # w3lib 2.6 makes "http://:80/x" "http:///x",
        raise ValueError(f"{url!r} has no host")  # which it reads again as "http://x/"
    path, query = parts.path, parts.query
    if ";" in path:
        path = PATH_SESSION.sub("", path)
    if query and ("ss" in query.lower() or "sid=" in query.lower() or "cf" in query.lower()):
        query = "&".join(pair for pair in query.split("&") if not _session_pair(pair))
    default_port = parts.port is not None and DEFAULT_PORTS.get(parts.scheme) == parts.port
    if default_port or (path, query) != (parts.path, parts.query):
        host = parts.netloc
        if default_port:
            host = parts.hostname or ""
            host = f"[{host}]" if ":" in host else host
        url = urlunsplit((parts.scheme, host, path, query, ""))
    return url


def _session_pair(pair: str) -> bool:
    name, _, value = pair.partition("=")
    return bool(SESSION_NAMES.match(name) or (SESSION_TOKEN.match(name) and TOKEN_VALUE.match(value)))


@lru_cache(maxsize=65536)
def host_of(url: str) -> str:
    """The politeness key: host[:port] as written in the URL, lower case (cached: a site's
    navigation links come back on every page)."""
    return urlsplit(url).netloc.lower().rpartition("@")[2]


class UrlRules:
    """Decides whether a discovered URL may be queued; answers with the reason it may not."""

    def __init__(self, config: CrawlConfig):
        self.max_url_length = config.fetch.max_url_length
        self.max_host_length = config.fetch.max_host_length
        self.max_segments, self.max_repeats = config.urls.max_path_segments, config.urls.max_segment_repeats
        self.allow = [re.compile(p) for p in config.urls.allow]
        self.deny = [re.compile(p) for p in config.urls.deny]
        self._verdicts: dict[str, str | None] = {}

    def rejection(self, url: str) -> str | None:
        """Why ``url`` may not be queued (None: it may). A site's navigation links come back on
        every page, so each URL is judged once (the memory is dropped when it grows large)."""
        try:
            return self._verdicts[url]
        except KeyError:
            if len(self._verdicts) >= 65536:
                self._verdicts.clear()
            verdict = self._verdicts[url] = self._judge(url)
            return verdict

    def _judge(self, url: str) -> str | None:
        if len(url) > self.max_url_length:
            return f"URL longer than {self.max_url_length}"
        try:
            parts = urlsplit(url)
            hostname = parts.hostname
            parts.port  # noqa: B018 - raises on a malformed port
        except ValueError as err:
            return f"malformed URL: {err}"
        if parts.scheme not in DEFAULT_PORTS:
            return f"scheme {parts.scheme!r} is not crawled"
        if not hostname:
            return "no host"
        if not HOSTNAME.fullmatch(hostname):
            return f"malformed host {hostname!r}"
        if parts.username is not None:
            return "credentials in the URL: not sent to any server"
        if len(hostname) > self.max_host_length:
            return f"host longer than {self.max_host_length}"
        trap = self._trap(parts.path)
        if trap:
            return trap
        if self.allow and not any(p.search(url) for p in self.allow):
            return "matches no allow pattern"
        for pattern in self.deny:
            if pattern.search(url):
                return f"matches deny pattern {pattern.pattern!r}"
        return None

    def _trap(self, path: str) -> str | None:
        """Paths that only a crawler trap makes: too deep, or one segment again and again."""
        segments = [segment for segment in path.split("/") if segment]
        if len(segments) > self.max_segments:
            return f"crawler trap: more than urls.max_path_segments {self.max_segments} path segments"
        if len(segments) > self.max_repeats and max(Counter(segments).values()) > self.max_repeats:
            return f"crawler trap: a path segment repeated more than urls.max_segment_repeats {self.max_repeats} times"
        return None
