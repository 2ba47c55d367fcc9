"""The seed finder (BINGO! §2.4's and ACHE's): seed URLs for a new crawl from local indexes — a
previous crawl, or any crawl directory — found by a query in BINGO!'s syntax, or by a topic's
classifier: its most informative terms (the MI weights its previews use) fetch pages holding any
of them. Seeds are ranked by BM25 with authority and confidence, at most a few per host so
that a crawl starts from several sites."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

from focuscrawl.search.engine import Search
from focuscrawl.search.query import QueryError
from focuscrawl.store import SearchIndex, open_index

SEED_WEIGHTS = {"bm25": 1.0, "confidence": 0.5, "authority": 0.5}
CLASSIFIER_TERMS = 12  # the classifier's terms a search for its topic asks for


def classifier_terms(critic, topic: str | None = None, count: int = CLASSIFIER_TERMS) -> list[str]:
    """A critic's (or a taxonomy topic's) most informative terms for its topic."""
    if topic is not None:
        child = critic.child(topic) if hasattr(critic, "child") else None
        if child is None:
            raise QueryError(f"no topic {topic!r} in this taxonomy")
        weights = child.weights
    else:
        weights = getattr(critic, "preview_weights_", None)
        if weights is None:
            raise QueryError("this classifier has no term weights for one topic: give --topic with a taxonomy")
    return [term for term, _ in sorted(weights.items(), key=lambda item: -item[1])[:count]]


def find_seeds(directories: list[Path], query: str | None = None, terms: list[str] | None = None,
               count: int = 20, per_host: int = 2) -> list[dict]:
    """The best pages for the query (or any of the terms) over the crawls' indexes, URLs once,
    at most ``per_host`` per host."""
    found: list[dict] = []
    for directory in directories:
        with closing(open_index(directory).db) as db:
            search = Search(SearchIndex(db))
            found += search.search(query, SEED_WEIGHTS, page=0).hits if query else search.any_of(terms or [], SEED_WEIGHTS)
    seeds, per = [], {}
    for hit in sorted(found, key=lambda hit: -hit["score"]):
        if hit["url"] in {seed["url"] for seed in seeds} or per.get(hit["host"], 0) >= per_host:
            continue
        per[hit["host"]] = per.get(hit["host"], 0) + 1
        seeds.append({key: hit[key] for key in ("url", "title", "topic", "score")})
        if len(seeds) == count:
            break
    return seeds
