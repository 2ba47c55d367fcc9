"""The apprentice (Chakrabarti, Punera & Subramanyam 2002): it learns from the source page's DOM
which links lead to relevant pages, before they are fetched, and then sets the frontier's
priorities.

Features (§2.2.1–2.2.2): the leaves of page u are numbered left to right (``parse`` does it,
empty leaves included); the anchor of link (u, v) spans leaves l..r; a term in leaf m is at DOM
offset d = m − l left of it, 0 inside, m − r right of it, and ⟨t, d⟩ for |d| ≤ d_max is a
feature. Learner (§2.3): multinomial naive Bayes over ⟨t, d⟩ with two buckets of v's critic
score split at the median of the scores so far ("equally probable intervals": a critic that
likes most pages still leaves the apprentice something to tell apart), predicting Pr(high);
instances are added as their targets get judged, without retraining from scratch. Online use (§3.7): best-first until the first batch has been learnt,
then every queued URL is re-scored (the best of its incoming links) and new links are scored
by the apprentice.

Term ids live in the crawl database (``apprentice_terms``) so that stored link features stay
meaningful across resumes; the counts are saved in it with the batch that changed them.
"""

from __future__ import annotations

import pickle
import sqlite3
from contextlib import closing

from pathlib import Path

import numpy as np
from warcio.archiveiterator import ArchiveIterator

from focuscrawl.learn import ModelError
from focuscrawl.parse import DecodeError, parse_html
from focuscrawl.store import open_existing
from focuscrawl.text import Analyzer, LeafTerms

HIGH = 0.5  # the default split between 'low' and 'high' targets


class TermIds:
    """term -> id, persisted in the crawl database as terms appear (inside the page's transaction)."""

    def __init__(self, db: sqlite3.Connection):
        """Build again after a rolled-back transaction: the ids it gave out were lost with it."""
        self.db = db
        self.ids = dict(db.execute("SELECT term, id FROM apprentice_terms"))
        self.next_id = max(self.ids.values(), default=-1) + 1

    def __call__(self, terms: list[str]) -> list[int]:
        new = [t for t in dict.fromkeys(terms) if t not in self.ids]
        if new:
            start, self.next_id = self.next_id, self.next_id + len(new)
            self.ids.update((t, start + i) for i, t in enumerate(new))
            self.db.executemany("INSERT INTO apprentice_terms (term, id) VALUES (?, ?)", [(t, self.ids[t]) for t in new])
        return [self.ids[t] for t in terms]


def link_features(leaf_terms: LeafTerms, spans: list[tuple[int, int]], term_ids,
                  d_max: int = 5) -> list[np.ndarray]:
    """⟨t, d⟩ feature ids (term id · (2·d_max + 1) + d + d_max) of every link, given its leaf span
    and the page's ``Analyzer.leaf_terms``; the windows of all links gathered with array arithmetic."""
    if not spans:
        return []
    position = leaf_terms.leaf
    ids = np.array(term_ids(leaf_terms.vocabulary), dtype=np.int64)[leaf_terms.codes]
    starts = np.array([s for s, _ in spans])
    ends = np.array([e for _, e in spans])
    low = np.searchsorted(position, starts - d_max, "left")
    high = np.searchsorted(position, ends + d_max, "right")
    lengths = high - low
    owner = np.repeat(np.arange(len(spans)), lengths)
    offsets_in_window = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    token = np.repeat(low, lengths) + offsets_in_window
    leaf = position[token]
    offset = np.where(leaf < starts[owner], leaf - starts[owner], np.where(leaf > ends[owner], leaf - ends[owner], 0))
    features = ids[token] * (2 * d_max + 1) + offset + d_max
    ends = np.cumsum(lengths).tolist()
    return [features[start:end] for start, end in zip([0, *ends[:-1]], ends)]


def class_features(topic: str | None, term_ids, d_max: int = 5) -> np.ndarray:
    """§3.8: the critic's class of u and all its prefixes ('/', '/Science', '/Science/Math', …),
    the same for every link of u; a two-class critic's classes are 'relevant' and 'other'."""
    parts = (topic or "").strip("/").split("/") if topic else []
    names = ["§class:/"] + [f"§class:/{'/'.join(parts[:i])}" for i in range(1, len(parts) + 1)]
    return np.array(term_ids(names), dtype=np.int64) * (2 * d_max + 1) + d_max


def cocitation_features(spans: list[tuple[int, int]], targets: list[str], judged: dict[int, bool], term_ids,
                        d_max: int = 5) -> list[np.ndarray]:
    """§2.2.3: for link i, every link j of the page to another target, within d_max leaves, whose
    target was already judged gives ⟨HIGH|LOW, d⟩, d the DOM offset of j's anchor from i's.
    ``judged``: link index -> whether its target was judged high."""
    empty = np.zeros(0, dtype=np.int64)
    if not judged:
        return [empty] * len(spans)
    high_id, low_id = term_ids(["§cocited:HIGH", "§cocited:LOW"])
    others = np.array(sorted(judged))
    other_start = np.array([spans[j][0] for j in others])
    term = np.where([judged[j] for j in others], high_id, low_id)
    starts = np.array([s for s, _ in spans])[:, None]
    ends = np.array([e for _, e in spans])[:, None]
    offset = np.where(other_start < starts, other_start - starts, np.where(other_start > ends, other_start - ends, 0))
    target = np.array(targets, dtype=object)
    near = (np.abs(offset) <= d_max) & (target[others][None, :] != target[:, None])  # never a link's own target
    features = term[None, :] * (2 * d_max + 1) + offset + d_max
    return [features[i][near[i]] for i in range(len(spans))]


class Apprentice:
    """Two-class multinomial naive Bayes over ⟨t, d⟩ (eqs. 1–2), grown instance by instance."""

    def __init__(self, d_max: int = 5):
        self.d_max = d_max
        self.counts = np.zeros((2, 0))  # [low, high] × feature
        self.instances = np.zeros(2)
        self.split = HIGH  # the bucket boundary of the latest batch

    @property
    def trained(self) -> bool:
        return bool(np.all(self.instances > 0))

    def add(self, features: Links, relevance: np.ndarray, threshold: float = HIGH, copies: np.ndarray | None = None) -> None:
        """Instances: the features of links (u, v) and the critic's Pr(c*|v); a target at or above
        ``threshold`` is 'high' (the crawler passes the median score, §2.3's equally probable buckets).
        ``copies``: how many links each instance stands for (the same as adding it that many times)."""
        if not len(features):
            return
        copies = np.ones(len(features), dtype=np.int64) if copies is None else np.asarray(copies, dtype=np.int64)
        self.split = threshold
        relevance = np.asarray(relevance)
        labels = relevance > threshold  # ties at the median go low (many pages may share the lowest score) ...
        if labels.all() or not labels.any():
            labels = relevance >= threshold  # ... unless that leaves one bucket empty
        labels = labels.astype(int)
        columns, lengths = _flatten(features)
        width = max(self.counts.shape[1], int(columns.max(initial=-1)) + 1)
        if width > self.counts.shape[1]:
            self.counts = np.pad(self.counts, ((0, 0), (0, width - self.counts.shape[1])))
        label_of_feature, copies_of_feature = np.repeat(labels, lengths), np.repeat(copies, lengths)
        for label in (0, 1):
            mine = label_of_feature == label
            self.counts[label] += np.bincount(columns[mine], copies_of_feature[mine], minlength=width)
            self.instances[label] += int(copies[labels == label].sum())
        self._weights = None

    def _log_ratio(self) -> np.ndarray:
        """log q_high,t − log q_low,t (eq. 1) for every feature, and a 0 after them; 0 for features
        never seen in training, which are no evidence either way (cached until the next ``add``)."""
        if getattr(self, "_weights", None) is None:
            seen = self.counts.sum(axis=0) > 0
            vocabulary = max(int(seen.sum()), 1)  # |T| of eq. 1
            log_q = np.log1p(self.counts) - np.log(vocabulary + self.counts.sum(axis=1, keepdims=True))
            self._weights = np.append(np.where(seen, log_q[1] - log_q[0], 0.0), 0.0)  # last: ids beyond the counts
        return self._weights

    def score(self, features: Links) -> np.ndarray:
        """Pr(high | link) for each link (the prior alone for a link without learnt features)."""
        if not len(features):
            return np.zeros(0)
        columns, lengths = _flatten(features)
        weights = self._log_ratio()
        evidence = np.bincount(np.repeat(np.arange(len(lengths)), lengths),
                               weights[np.minimum(columns, len(weights) - 1)], minlength=len(lengths))
        log_odds = evidence + np.log(self.instances[1] / self.instances[0])
        return 1.0 / (1.0 + np.exp(-np.clip(log_odds, -500, 500)))

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_weights"}

    def dumps(self) -> bytes:
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def loads(data: bytes) -> Apprentice:
        try:
            apprentice = pickle.loads(data)
        except Exception as err:  # noqa: BLE001 - any unpickling failure means a bad model
            raise ModelError(f"the crawl's apprentice is not usable: {type(err).__name__}: {err}") from None
        if not isinstance(apprentice, Apprentice):
            raise ModelError(f"the crawl's apprentice holds a {type(apprentice).__name__}")
        return apprentice


Links = list[np.ndarray] | list[bytes]  # each link's feature ids, as arrays or packed (as stored)


def _flatten(features: Links) -> tuple[np.ndarray, np.ndarray]:
    """All feature ids in one array, and the number of each link's; packed links are joined
    and read in one go (re-scoring the frontier reads tens of thousands at a time)."""
    if isinstance(features[0], bytes):
        lengths = np.fromiter(map(len, features), dtype=np.int64, count=len(features)) // 4
        return np.frombuffer(b"".join(features), dtype=np.uint32).astype(np.int64), lengths
    lengths = np.fromiter(map(len, features), dtype=np.int64, count=len(features))
    return (np.concatenate(features).astype(np.int64) if lengths.sum() else np.zeros(0, dtype=np.int64)), lengths


def pack(features: list[np.ndarray]) -> list[bytes]:
    """Each link's feature ids as stored: uint32 bytes, converted in one go for the page."""
    if not features:
        return []
    data = np.concatenate(features).astype(np.uint32).tobytes()
    ends = (np.cumsum([len(f) for f in features]) * 4).tolist()
    return [data[start:end] for start, end in zip([0, *ends[:-1]], ends)]


def median_score(db: sqlite3.Connection) -> float:
    """The median critic score of the pages judged so far: the boundary of the two buckets."""
    count = db.execute("SELECT COUNT(relevance) FROM documents").fetchone()[0]
    if not count:
        return HIGH
    row = db.execute("SELECT relevance FROM documents WHERE relevance IS NOT NULL ORDER BY relevance LIMIT 1 OFFSET ?",
                     (count // 2,)).fetchone()
    return float(row[0])


def crawl_instances(directory: Path, analyzer: Analyzer, term_ids, d_max: int) -> tuple[list[np.ndarray], np.ndarray, list[str]]:
    """Instances from a finished crawl, its pages re-read from the WARC archive (§3.5): the
    features of every link (u, v) whose both ends were judged, the critic's score of v, and u."""
    with closing(open_existing(directory)) as db:  # by the URL asked for and the URL a redirect ended at
        relevance = dict(db.execute(
            "SELECT u.url, d.relevance FROM documents d JOIN urls u ON u.id = d.url_id WHERE d.relevance IS NOT NULL"
            " UNION ALL SELECT f.final_url, d.relevance FROM documents d JOIN fetches f ON f.id = d.fetch_id"
            " WHERE d.relevance IS NOT NULL"))
    features: list[np.ndarray] = []
    labels: list[float] = []
    sources: list[str] = []
    for path in sorted((Path(directory) / "warc").glob("*.warc.gz")):
        with open(path, "rb") as handle:
            for record in ArchiveIterator(handle):
                url = record.rec_headers.get_header("WARC-Target-URI")
                if record.rec_type != "response" or url not in relevance or not record.http_headers \
                        or not record.http_headers.get_statuscode().startswith("2"):
                    continue
                try:
                    page = parse_html(record.content_stream().read(), url)
                except DecodeError:
                    continue
                links = [link for link in page.links if link.url in relevance and link.url != url]
                features += link_features(analyzer.leaf_terms(page.leaves),
                                          [(link.leaf_start, link.leaf_end) for link in links], term_ids, d_max)
                labels += [relevance[link.url] for link in links]
                sources += [url] * len(links)
    return features, np.array(labels), sources
