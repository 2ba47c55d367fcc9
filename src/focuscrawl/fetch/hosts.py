"""Per-host politeness clock and health: the one truth about when a host may be asked again."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from focuscrawl.config import CrawlConfig

OK, SLOW, BAD = "ok", "slow", "bad"


@dataclass(slots=True)
class Host:
    name: str
    interval: float
    next_start: float = 0.0  # monotonic time before which no request may start
    last_start: float = float("-inf")  # monotonic time the last request left
    active: int = 0  # page fetches in flight (the per-host connection limit)
    failures: int = 0  # consecutive network failures
    status: str = OK


class Hosts:
    """Registry of hosts. Every request to a host, robots.txt and redirects included,
    reserves a start time here, so the minimum interval holds however many workers run."""

    def __init__(self, config: CrawlConfig):
        self.min_interval = config.politeness.min_interval
        self.crawl_delay_cap = config.politeness.crawl_delay_cap
        self.connections = config.politeness.per_host_connections
        self.slow_after = config.fetch.slow_after_failures
        self.bad_after = config.fetch.bad_after_failures
        self._hosts: dict[str, Host] = {}
        self.newly_bad: list[str] = []  # hosts that turned bad, for the crawler to drop their queues

    def __getitem__(self, name: str) -> Host:
        host = self._hosts.get(name)
        if host is None:
            host = self._hosts[name] = Host(name, self.min_interval)
        return host

    def __iter__(self):
        return iter(self._hosts.values())

    def set_crawl_delay(self, name: str, delay: float | None) -> None:
        if delay:
            host = self[name]
            interval = max(self.min_interval, min(float(delay), self.crawl_delay_cap))
            if host.next_start:  # the request that brought the delay (robots.txt) counts too
                host.next_start += interval - host.interval
            host.interval = interval

    def reserve(self, name: str) -> float:
        """Book the next start slot of the host; returns how long to wait for it."""
        host = self[name]
        now = time.monotonic()
        start = max(now, host.next_start)
        host.next_start = start + host.interval
        return start - now

    def answered(self, name: str) -> None:
        """The host answered now: its next request also waits a whole interval from here (as
        Heritrix counts its delay from the end of a fetch), so a request that left late (a busy
        process, a slow connect) never reaches the server closer than the interval to the next."""
        host = self[name]
        host.next_start = max(host.next_start, time.monotonic() + host.interval)

    def defer(self, name: str, seconds: float) -> None:
        """The server asked for a pause (Retry-After): no request starts before it ends, nor before
        the Crawl-delay cap would allow."""
        if seconds > 0:
            host = self[name]
            host.next_start = max(host.next_start, time.monotonic() + min(seconds, self.crawl_delay_cap))

    async def wait_turn(self, name: str) -> None:
        delay = self.reserve(name)
        if delay > 0:
            await asyncio.sleep(delay)

    async def leave(self, name: str) -> None:
        """The request has its connection and goes out now, once a whole interval has passed since
        the last one left: a process that stalled past several slots (a long page, a database
        round trip) wakes their waiters together, and they must still leave one interval apart."""
        host = self[name]
        while (late := host.last_start + host.interval - time.monotonic()) > 0:
            await asyncio.sleep(late)
        host.last_start = now = time.monotonic()
        host.next_start = max(host.next_start, now + host.interval)

    def record_failure(self, name: str) -> str:
        """BINGO! §2.3.8: a failing host becomes slow, the third failure makes it bad."""
        host = self[name]
        host.failures += 1
        if host.failures >= self.bad_after:
            if host.status != BAD:
                self.newly_bad.append(name)
            host.status = BAD
        elif host.failures >= self.slow_after:
            host.status = SLOW
        return host.status

    def record_success(self, name: str) -> None:
        host = self[name]
        host.failures = 0
        if host.status == SLOW:
            host.status = OK

    def restore(self, name: str, failures: int, status: str, crawl_delay: float | None) -> None:
        host = self[name]
        host.failures, host.status = failures, status
        self.set_crawl_delay(name, crawl_delay)
