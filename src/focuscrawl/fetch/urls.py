"""URL canonicalisation and admission: one spelling per page, and the rules for what to queue."""

from __future__ import annotations

import re
from functools import lru_cache
from urllib.parse import urlsplit, urlunsplit

from w3lib.url import canonicalize_url

from focuscrawl.config import CrawlConfig

DEFAULT_PORTS = {"http": 80, "https": 443}


@lru_cache(maxsize=65536)
def canonical_url(url: str) -> str:
    """w3lib's canonical form (sorted query, no fragment, normalised escapes), without a default port.
    Cached: navigation links repeat on every page of a site, and w3lib is the parser's slowest step."""
    url = canonicalize_url(url.strip())
    parts = urlsplit(url)
    if parts.port is not None and DEFAULT_PORTS.get(parts.scheme) == parts.port:
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        url = urlunsplit((parts.scheme, host, parts.path, parts.query, ""))
    return url


def host_of(url: str) -> str:
    """The politeness key: host[:port] as written in the URL, lower case."""
    return urlsplit(url).netloc.lower().rpartition("@")[2]


class UrlRules:
    """Decides whether a discovered URL may be queued; answers with the reason it may not."""

    def __init__(self, config: CrawlConfig):
        self.max_url_length = config.fetch.max_url_length
        self.max_host_length = config.fetch.max_host_length
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
        if len(hostname) > self.max_host_length:
            return f"host longer than {self.max_host_length}"
        if self.allow and not any(p.search(url) for p in self.allow):
            return "matches no allow pattern"
        for pattern in self.deny:
            if pattern.search(url):
                return f"matches deny pattern {pattern.pattern!r}"
        return None
