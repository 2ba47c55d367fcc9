"""Search and ranking (BINGO! thesis §2.4.12, §4.1): the best BM25 matches of the query are the
candidates; each gets the attributes of eq. 4.1 — BM25, the classifier's confidence, HITS
authority and hub, PageRank, the topic-weighted ("intelligent") PageRank of eqs. 4.19–4.20,
recency and inverse recency of Last-Modified — every attribute normalised to unit length over
the candidates (as the thesis's evaluation did), and the score is their weighted sum with the
user's weights."""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse

from focuscrawl.search.query import ParsedQuery, QueryError, parse_query, quoted
from focuscrawl.store.search_index import SearchIndex
from focuscrawl.text import Analyzer, stopword_set, word_counts

ATTRIBUTES = ("bm25", "confidence", "authority", "hub", "pagerank", "topic_pagerank", "recency", "inverse_recency")
DEFAULT_WEIGHTS = {"bm25": 1.0, "confidence": 0.5, "authority": 0.25, "hub": 0.0, "pagerank": 0.0,
                   "topic_pagerank": 0.0, "recency": 0.0, "inverse_recency": 0.0}
PAGE_SIZE = 25  # results per page, as BINGO!'s evaluation showed them
CANDIDATES = 1000  # the best BM25 matches that are re-ranked
STOP_WORDS = stopword_set("en")  # left out of queries: the index's stems are English (FTS5's Porter)
SIMILAR_WORDS, SIMILAR_CANDIDATES = 30, 200  # a similarity search's query words and the pages it compares


@dataclass
class Results:
    query: str
    page: int
    total: int  # candidates found (at most CANDIDATES)
    weights: dict[str, float]
    hits: list[dict] = field(default_factory=list)  # the page's results, best first

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // PAGE_SIZE))

    @property
    def capped(self) -> bool:
        return self.total >= CANDIDATES


class Search:
    def __init__(self, index: SearchIndex):
        self.index = index

    def search(self, text: str, weights: dict[str, float] | None = None, page: int = 1, within: str | None = None,
               stems: bool = True, topic: str | None = None, host: str | None = None, mime: str | None = None,
               since: float | None = None, until: float | None = None) -> Results:
        """One page of results (page 0: all of them); ``within``: the previous query, searched
        together with this one."""
        weights = checked_weights(weights)
        ranked = self.ranked(text, weights, within, stems, topic, host, mime, since, until)
        first = (max(page, 1) - 1) * PAGE_SIZE
        shown = ranked[first:first + PAGE_SIZE] if page else ranked
        details = self.index.details([hit["url_id"] for hit in shown]
                                     + [folded for hit in shown for folded in hit["near_duplicates"]])
        return Results(text, page, len(ranked), weights, [
            {**details[hit["url_id"]], **hit, "near_duplicates": [
                {key: details[folded][key] for key in ("url_id", "url", "title")}
                for folded in hit["near_duplicates"] if folded in details]}
            for hit in shown if hit["url_id"] in details])

    def ranked(self, text: str, weights: dict[str, float] | None = None, within: str | None = None,
               stems: bool = True, topic: str | None = None, host: str | None = None, mime: str | None = None,
               since: float | None = None, until: float | None = None) -> list[dict]:
        """Every candidate of the query, ranked (url id, score, topic, normalised attributes)."""
        parsed = parse_query(text, STOP_WORDS)
        if within:
            parsed = parsed.combined(parse_query(within, STOP_WORDS))
        try:
            matches = self.index.matches(parsed.match(), CANDIDATES, topic, host, mime, since, until, parsed.parts())
        except sqlite3.OperationalError as error:
            raise QueryError(f"query {text!r} cannot be searched: {error}") from None
        if not stems:
            matches = self._with_surface_words(matches, parsed)
        return self._folded(self.rank(matches, checked_weights(weights)))

    def _folded(self, ranked: list[dict]) -> list[dict]:
        """Each group of near-duplicates (``focuscrawl organise duplicates``) shown once, at its
        best-ranked page, the others folded under it (their url ids in ``near_duplicates``)."""
        originals = self.index.near_duplicates.originals([hit["url_id"] for hit in ranked])
        groups: dict[int, dict] = {}
        kept = []
        for hit in ranked:
            group = originals.get(hit["url_id"], hit["url_id"])
            if group in groups:
                groups[group]["near_duplicates"].append(hit["url_id"])
            else:
                groups[group] = {**hit, "near_duplicates": []}
                kept.append(groups[group])
        return kept

    def rank(self, matches: list[tuple[int, float]], weights: dict[str, float]) -> list[dict]:
        """The candidates' url ids with their attributes and score, best first (eq. 4.1)."""
        if not matches:
            return []
        ranking = self.index.ranking([url_id for url_id, _ in matches])
        kept = [(url_id, bm25) for url_id, bm25 in matches if url_id in ranking]
        raw = np.array([(bm25, *ranking[url_id][1:]) for url_id, bm25 in kept], dtype=float).reshape(len(kept), 7)
        columns = attribute_matrix(raw)
        scores = columns @ np.array([weights[name] for name in ATTRIBUTES])
        order = np.argsort(-scores, kind="stable")
        return [{"url_id": kept[i][0], "score": float(scores[i]), "topic": ranking[kept[i][0]][0],
                 "attributes": dict(zip(ATTRIBUTES, columns[i].tolist()))} for i in order.tolist()]

    def any_of(self, words: list[str], weights: dict[str, float] | None = None) -> list[dict]:
        """Every page holding any of the words (stems), ranked, with the details of each."""
        if not words:
            return []
        matches = self.index.matches(" OR ".join(map(quoted, words)), CANDIDATES)
        ranked = self.rank(matches, checked_weights(weights))
        details = self.index.details([hit["url_id"] for hit in ranked])
        return [{**details[hit["url_id"]], **hit} for hit in ranked if hit["url_id"] in details]

    def similar(self, url_id: int, count: int = PAGE_SIZE) -> list[dict]:
        """BINGO!'s similarity search: pages whose term vectors are nearest the page's by cosine.
        The page's most frequent words fetch the candidates from the index (any of them), then
        the candidates' TF-IDF vectors (IDF over the candidates and the page) are compared."""
        texts = self.index.texts([url_id])
        if url_id not in texts:
            return []
        analyzer, stop = Analyzer(), STOP_WORDS
        own = analyzer.term_frequencies(" ".join(texts[url_id]))
        words = [word for word, _ in Counter(word_counts(" ".join(texts[url_id]))).most_common(200)
                 if len(word) > 2 and word not in stop][:SIMILAR_WORDS]
        if not words:
            return []
        matches = self.index.matches(" OR ".join(map(quoted, words)), SIMILAR_CANDIDATES)
        others = [other for other, _ in matches if other != url_id]
        candidate_texts = self.index.texts(others)
        vectors = [own] + [analyzer.term_frequencies(" ".join(candidate_texts[other])) for other in others]
        similarity = _cosines(vectors)
        best = np.argsort(-similarity, kind="stable")[:count]
        details = self.index.details([others[i] for i in best.tolist()])
        return [{**details[others[i]], "similarity": float(similarity[i])} for i in best.tolist() if others[i] in details]

    def _with_surface_words(self, matches: list[tuple[int, float]], parsed: ParsedQuery) -> list[tuple[int, float]]:
        """Only pages whose title or text hold every required word as typed (the index holds stems)."""
        patterns = [re.compile(r"(?<!\w)" + r"\W+".join(map(re.escape, term.split())) + r"(?!\w)", re.IGNORECASE)
                    for term in parsed.surface_terms()]
        texts = self.index.texts([url_id for url_id, _ in matches])
        return [(url_id, score) for url_id, score in matches
                if all(p.search(texts[url_id][0]) or p.search(texts[url_id][1]) for p in patterns)]


def _cosines(vectors: list[dict[str, int]]) -> np.ndarray:
    """Cosine of the first term vector with each of the others, over log-TF × IDF weights."""
    vocabulary = {term: i for i, term in enumerate({term for vector in vectors for term in vector})}
    rows, cols, values = [], [], []
    for row, vector in enumerate(vectors):
        rows += [row] * len(vector)
        cols += [vocabulary[term] for term in vector]
        values += [1.0 + np.log(count) for count in vector.values()]
    matrix = sparse.csr_matrix((values, (rows, cols)), shape=(len(vectors), len(vocabulary)))
    document_frequency = np.bincount(matrix.indices, minlength=len(vocabulary))
    matrix = matrix @ sparse.diags(np.log((1 + len(vectors)) / (1 + document_frequency)) + 1.0)
    norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    return (matrix[1:] @ matrix[0].T).toarray().ravel() / (norms[1:] * norms[0])


def checked_weights(weights: dict[str, float] | None) -> dict[str, float]:
    """The default weights with the user's over them; an unknown attribute is an error."""
    unknown = set(weights or {}) - set(ATTRIBUTES)
    if unknown:
        raise QueryError(f"unknown ranking attribute {sorted(unknown)[0]!r}: one of {', '.join(ATTRIBUTES)}")
    checked = dict(DEFAULT_WEIGHTS)
    for name, value in (weights or {}).items():
        try:
            checked[name] = float(value)
        except (TypeError, ValueError):
            raise QueryError(f"the weight of {name} is not a number: {value!r}") from None
    return checked


def attribute_matrix(raw: np.ndarray) -> np.ndarray:
    """From candidates × (bm25, confidence, modified_at, hub, authority, pagerank,
    confidence_pagerank) to candidates × ATTRIBUTES, each column normalised to unit length (a
    column that is zero throughout stays zero). Recency is the Last-Modified date scaled to
    [0, 1] over the candidates; inverse recency is one minus it."""
    bm25, confidence, modified, hub, authority, pagerank, confidence_pagerank = raw.T
    span = np.ptp(modified) if len(raw) else 0.0
    recency = (modified - modified.min()) / span if span > 0 else np.ones(len(raw))
    inverse = 1.0 - recency if span > 0 else np.ones(len(raw))
    columns = np.column_stack([bm25, confidence, authority, hub, pagerank, confidence_pagerank, recency, inverse])
    lengths = np.linalg.norm(columns, axis=0)
    return columns / np.where(lengths > 0, lengths, 1.0)


__all__ = ["ATTRIBUTES", "DEFAULT_WEIGHTS", "PAGE_SIZE", "QueryError", "Results", "Search", "parse_query"]
