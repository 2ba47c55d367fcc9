"""The portal's search engine (BINGO! thesis §2.4.12, §4.1): BINGO!'s query syntax, BM25
candidates from the crawl's FTS5 index (:mod:`focuscrawl.store.search_index`), re-ranked by a
weighted sum of normalised attributes (eq. 4.1)."""

from focuscrawl.search.engine import ATTRIBUTES, DEFAULT_WEIGHTS, PAGE_SIZE, Results, Search
from focuscrawl.search.query import ParsedQuery, QueryError, parse_query

__all__ = ["ATTRIBUTES", "DEFAULT_WEIGHTS", "PAGE_SIZE", "ParsedQuery", "QueryError", "Results", "Search", "parse_query"]
