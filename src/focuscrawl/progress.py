"""What the live display and the harvest log show of a running crawl."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from focuscrawl.fetch.http import Response
from focuscrawl.frontier import Frontier


@dataclass
class Progress:
    """What the live display and the harvest log show."""

    pages: int  # URLs handled, resumes included
    fetched: int  # responses received
    errors: int
    relevance_sum: float
    scored: int
    frontier: int
    started: float
    pages_at_start: int
    topics: Counter = field(default_factory=Counter)  # pages assigned to each topic of a taxonomy
    refused: int = 0  # URLs our rules did not let us fetch (robots.txt, policy, MIME, size): not pages

    @classmethod
    def of(cls, store) -> Progress:
        """The figures of a crawl's store, to go on from (a resumed crawl's)."""
        fetched, errors, refused, _ = store.queries.fetch_counts()
        total, scored = store.relevance_totals()
        return cls(0, fetched, errors, total, scored, 0, time.monotonic(), 0, store.topic_counts(), refused)

    def recount(self, store) -> None:
        """The harvest figures again from the store (its pages were judged again)."""
        self.relevance_sum, self.scored = store.relevance_totals()
        self.topics = store.topic_counts()

    @property
    def harvest_rate(self) -> float | None:
        return self.relevance_sum / self.scored if self.scored else None

    @property
    def pages_per_second(self) -> float:
        elapsed = time.monotonic() - self.started
        return (self.pages - self.pages_at_start) / elapsed if elapsed > 0 else 0.0

    def count(self, response: Response, relevance: float | None, topic: str | None) -> None:
        """A handled URL: refused ones are neither fetches nor errors."""
        self.refused += response.refused
        self.fetched += response.status is not None and not response.refused
        self.errors += response.error is not None and not response.refused
        if relevance is not None:
            self.relevance_sum += relevance
            self.scored += 1
        if topic:
            self.topics[topic] += 1

    def update(self, frontier: Frontier) -> Progress:
        self.frontier, self.pages = frontier.size, frontier.done
        return self

    def entry(self, frontier: Frontier) -> dict:
        """A line of the harvest log."""
        self.update(frontier)
        return {"pages": self.pages, "fetched": self.fetched, "scored": self.scored, "harvest_rate": self.harvest_rate,
                "errors": self.errors, "refused": self.refused, "frontier": self.frontier,
                **({"topics": dict(self.topics)} if self.topics else {}), "time": round(time.time(), 3)}
