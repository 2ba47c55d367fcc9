"""The apprentice (Chakrabarti, Punera & Subramanyam 2002): it learns from the source page's DOM
which links lead to relevant pages, before they are fetched, and then sets the frontier's
priorities.

Features (§2.2.1–2.2.2): the leaves of page u are numbered left to right (``parse`` does it,
empty leaves included); the anchor of link (u, v) spans leaves l..r; a term in leaf m is at DOM
offset d = m − l left of it, 0 inside, m − r right of it, and ⟨t, d⟩ for |d| ≤ d_max is a
feature. Learner (§2.3): multinomial naive Bayes over ⟨t, d⟩ with two buckets of v's critic
score split at the median of the scores so far ("equally probable intervals": a critic that
likes most pages still leaves the apprentice something to tell apart), predicting Pr(high);
instances are added as their targets get judged, without retraining from scratch. Online use
(§3.7): best-first until the apprentice is ready, then every queued URL is re-scored (the best
of its incoming links) and new links are scored by it. Beyond the paper, a ``Blend`` weighs its
estimate against best-first's (the source page's critic score), as learnt on links it scored
before learning them; the apprentice is ready once that blend is fitted, after its second batch.

A term's id is its hash (``term_ids``), the same in every process and crawl: the judging
processes make a page's features, and stored link features stay meaningful across resumes; the
counts are saved in the crawl database with the batch that changed them.
"""

from __future__ import annotations

import logging
import pickle
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import NamedTuple

import numpy as np
from warcio.archiveiterator import ArchiveIterator

from focuscrawl.learn import ModelError
from focuscrawl.parse import DecodeError, Page, parse_html
from focuscrawl.store import CrawlDir, Queries, open_existing
from focuscrawl.store.link_instances import gathered
from focuscrawl.text import Analyzer, LeafTerms

try:
    from focuscrawl._idtable import IdTable, taken, windows
except ImportError:  # not built (no C compiler at install): binary search, or pyarrow's hash set; numpy's windows
    IdTable = taken = windows = None

log = logging.getLogger(__name__)

HIGH = 0.5  # the default split between 'low' and 'high' targets
HASHED_LOOKUP = 100_000  # feature ids looked up at once from which a hash set beats binary search (``_lookup``)
URL_WORD = re.compile(r"[a-z]{2,}")


def term_ids(terms: list[str]) -> np.ndarray:
    """Each term's id: its CRC-32, the same in every process, worker and crawl, so the judging
    processes make a page's features and no table of ids is shared. Two of a crawl's terms rarely
    share an id (among 10⁵ terms, about a dozen pairs once folded by ``feature_ids``), which
    naive Bayes shrugs off."""
    return np.fromiter(map(zlib.crc32, (term.encode() for term in terms)), dtype=np.int64, count=len(terms))


def rehashing(terms: dict[str, int], d_max: int) -> Callable[[np.ndarray], np.ndarray]:
    """Old feature ids (by a crawl's term table, ``terms``: term -> id) -> hashed ones."""
    width = 2 * d_max + 1
    hashed = np.zeros(max(terms.values(), default=-1) + 2, dtype=np.int64)
    hashed[list(terms.values())] = term_ids(list(terms))
    return lambda ids: feature_ids(hashed[np.minimum(ids // width, len(hashed) - 1)], ids % width - d_max, d_max)


def feature_ids(term_id: np.ndarray, offset, d_max: int = 5) -> np.ndarray:
    """⟨t, d⟩'s id: t' · (2·d_max + 1) + d + d_max, with t' the term id folded so that the id fits
    a uint32 (as stored), and d still the id's remainder (the apprentice's report reads it)."""
    width = 2 * d_max + 1
    return np.asarray(term_id, dtype=np.int64) % (2**32 // width) * width + offset + d_max


class LinkWindows(NamedTuple):
    """Links' ⟨t, d⟩ feature ids end to end (32-bit): a page's windows, made where the page was
    judged (a worker process) and sent back with it, so the crawl's process only picks the links it
    wants; and the links picked, as their instances are stored (``taking``, ``pack``)."""

    features: np.ndarray  # link after link (uint32)
    bounds: np.ndarray  # link i's features are features[bounds[i]:bounds[i + 1]]

    def taking(self, wanted: list[int]) -> LinkWindows:
        """The windows of the links ``wanted`` (indices), gathered in one go (in C when ``_idtable``
        is built): a page's instances are stored so, one array (no bytes cut per link, then joined
        again for the row)."""
        if taken is not None:
            return LinkWindows(*taken(self.features, np.asarray(self.bounds, dtype=np.int32),
                                      np.asarray(wanted, dtype=np.int64)))
        at, bounds = gathered(self.bounds, wanted)
        return LinkWindows(self.features[at], bounds.astype(np.int32))


def link_windows(leaf_terms: LeafTerms, starts: Sequence[int], ends: Sequence[int], d_max: int = 5) -> LinkWindows:
    """The windows of all links (given their leaf spans: first and last leaves): in C when
    ``_idtable`` is built, else gathered with array arithmetic."""
    position = leaf_terms.leaf
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    term_id = term_ids(leaf_terms.vocabulary)[leaf_terms.codes]  # each token's
    if windows is not None:
        return LinkWindows(*windows(np.ascontiguousarray(position, dtype=np.int64), term_id, starts, ends, d_max))
    low = np.searchsorted(position, starts - d_max, "left")
    high = np.searchsorted(position, ends + d_max, "right")
    lengths = high - low
    bounds = np.r_[0, np.cumsum(lengths)]
    owner = np.repeat(np.arange(len(starts)), lengths)
    token = np.repeat(low - bounds[:-1], lengths) + np.arange(bounds[-1])
    leaf = position[token]
    offset = np.where(leaf < starts[owner], leaf - starts[owner], np.where(leaf > ends[owner], leaf - ends[owner], 0))
    features = feature_ids(term_id[token], offset, d_max)
    return LinkWindows(features.astype(np.uint32), bounds.astype(np.int32))


def page_link_windows(analyzer: Analyzer, page, d_max: int = 5) -> LinkWindows:
    """``link_windows`` of all the page's links, kept on the page (made where it was judged)."""
    key = ("link windows", analyzer.language, analyzer.stem, d_max)
    if key not in page.terms:
        _, _, starts, ends, _ = page.link_columns()  # (not ``page.links``: a Link made per link cost more than the windows)
        page.terms[key] = link_windows(analyzer.page_terms(page), starts, ends, d_max)
    return page.terms[key]


def wanted_features(windows: LinkWindows, wanted: list[int]) -> list[np.ndarray]:
    """The ⟨t, d⟩ feature ids of the links ``wanted`` (indices into the page's links)."""
    features, bounds = windows.features.astype(np.int64), windows.bounds.tolist()
    return [features[bounds[i]:bounds[i + 1]] for i in wanted]


def class_features(topic: str | None, d_max: int = 5) -> np.ndarray:
    """§3.8: the critic's class of u and all its prefixes ('/', '/Science', '/Science/Math', …),
    the same for every link of u; a two-class critic's classes are 'relevant' and 'other'."""
    parts = (topic or "").strip("/").split("/") if topic else []
    names = ["§class:/"] + [f"§class:/{'/'.join(parts[:i])}" for i in range(1, len(parts) + 1)]
    return feature_ids(term_ids(names), 0, d_max)


def url_features(urls: list[str], d_max: int = 5) -> list[np.ndarray]:
    """Beyond the paper: the words of each link's target URL (host, path and query; letters
    only, each once) as ⟨§url:word, 0⟩. A URL often names its page's subject (documentation
    sites above all), and it is known before the fetch; ACHE's link classifier uses it too."""
    words = [list(dict.fromkeys(URL_WORD.findall(url.partition("://")[2].partition("#")[0].lower()))) for url in urls]
    ids = feature_ids(term_ids([f"§url:{word}" for link in words for word in link]), 0, d_max)
    return _pieces(ids, [len(link) for link in words])


def page_link_features(analyzer: Analyzer, page, wanted: list[int], d_max: int = 5,
                       url_words: bool = False, topic: str | None = None,
                       judged: dict[int, bool] | None = None) -> list[np.ndarray]:
    """The one recipe of a link's instance, for the crawl and for offline instances alike: the
    features of the page's links ``wanted`` (indices into ``page.links``): ⟨t, d⟩, and the
    optional families: the words of the target's URL, the page's class (``topic``), and the
    links near it to targets already judged (``judged``: link index -> high)."""
    features = wanted_features(page_link_windows(analyzer, page, d_max), wanted)
    if topic is not None:
        page_class = class_features(topic, d_max)
        features = [np.concatenate([f, page_class]) for f in features]
    if url_words:
        words = url_features([page.links[i].url for i in wanted], d_max)
        features = [np.concatenate([f, w]) for f, w in zip(features, words)]
    if judged is not None:
        spans = [(link.leaf_start, link.leaf_end) for link in page.links]
        cocited = cocitation_features(spans, [link.url for link in page.links], judged, d_max)
        features = [np.concatenate([f, cocited[i]]) for f, i in zip(features, wanted)]
    return features


def page_link_rows(analyzer: Analyzer, page, wanted: list[int], d_max: int = 5, url_words: bool = False,
                   topic: str | None = None, judged: dict[int, bool] | None = None) -> LinkWindows:
    """``page_link_features`` as stored, link after link in one array; without the optional
    families, gathered straight from the page's windows (the crawl's process records them for
    every page)."""
    if url_words or topic is not None or judged is not None:
        return pack(page_link_features(analyzer, page, wanted, d_max, url_words, topic, judged))
    return page_link_windows(analyzer, page, d_max).taking(wanted)


def every_link_features(analyzer: Analyzer, page, d_max: int = 5, url_words: bool = False,
                        topic: str | None = None) -> Links | LinkWindows:
    """``page_link_features`` of all the page's links, as the apprentice scores them; without the
    optional families, the page's windows as they are (no array per link cut and joined again)."""
    if url_words or topic is not None:
        return page_link_features(analyzer, page, list(range(page.link_count)), d_max, url_words, topic)
    return page_link_windows(analyzer, page, d_max)


def page_topic(judgement, class_features: bool) -> str | None:
    """The page's class in its links' features (§3.8, when ``class_features``): the critic's
    topic, or 'relevant' and 'other' for a two-class critic."""
    if not class_features or judgement is None:
        return None
    return judgement.topic or ("relevant" if judgement.relevance >= HIGH else "other")


def cocitation_features(spans: list[tuple[int, int]], targets: list[str], judged: dict[int, bool],
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
    features = feature_ids(term[None, :], offset, d_max)
    return [features[i][near[i]] for i in range(len(spans))]


class Apprentice:
    """Two-class multinomial naive Bayes over ⟨t, d⟩ (eqs. 1–2), grown instance by instance."""

    def __init__(self, d_max: int = 5, blend: bool = True):
        self.d_max = d_max
        self.features_ = np.zeros(0, dtype=np.int64)  # the ⟨t, d⟩ ids seen, sorted (hashed ids are sparse)
        self.counts_ = np.zeros((2, 0))  # [low, high] × those features
        self.instances_ = np.zeros(2)
        self.split_ = HIGH  # the bucket boundary of the latest batch
        self.blend = Blend() if blend else None

    def __getstate__(self) -> dict:
        """Without the cached weights and id table; the ids as stored (uint32): the model is saved
        after every batch."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("_weights", "_table")}
        if self.features_ is not None:  # whole counts of whole copies
            state["features_"], state["counts_"] = self.features_.astype(np.uint32), self.counts_.astype(np.uint32)
        return state

    def __setstate__(self, state: dict) -> None:
        state = {"blend": None, **state}  # saved before blends existed: the paper's apprentice
        for name in ("features", "counts", "instances", "split"):  # saved before learnt state had scikit-learn's names
            if name in state:
                state[name + "_"] = state.pop(name)
        if "sparse_counts" in state:  # saved dense before
            shape, nonzero, values = state.pop("sparse_counts")
            state["counts_"] = np.zeros(shape)
            state["counts_"].ravel()[nonzero] = values
        if "features_" not in state:  # counts by the ids of a term table: :meth:`rehashed` converts them
            state["features_"] = None
        elif state["features_"] is not None:
            state["features_"], state["counts_"] = state["features_"].astype(np.int64), state["counts_"].astype(float)
        self.__dict__.update(state)

    @property
    def needs_rehash(self) -> bool:
        """Saved by a version that numbered terms in a table of the crawl (``apprentice_terms``)."""
        return self.features_ is None

    def rehashed(self, new_of_old: Callable[[np.ndarray], np.ndarray]) -> Apprentice:
        """The same counts under hashed feature ids (a model saved with a term table's ids);
        ``new_of_old`` maps old feature ids to new ones."""
        seen = np.flatnonzero(self.counts_.sum(axis=0))
        self.features_, where = np.unique(new_of_old(seen), return_inverse=True)
        counts = np.zeros((2, len(self.features_)))
        for label in (0, 1):
            np.add.at(counts[label], where, self.counts_[label, seen])
        self.counts_, self._weights, self._table = counts, None, None
        return self

    @property
    def trained(self) -> bool:
        return min(self.instances_.tolist()) > 0  # (asked for every page: numpy's reductions cost more)

    def partial_fit(self, features: Links, relevance: np.ndarray, parent_scores: np.ndarray | None = None,
                    threshold: float = HIGH, copies: np.ndarray | None = None) -> Apprentice:
        """A batch of instances as the online crawler gets them: the features of links (u, v) and
        the critic's Pr(c*|v); a target above ``threshold`` is 'high' (``high_labels``; the
        crawler passes the median score, §2.3's equally probable buckets). With the source
        pages' scores (``parent_scores``) the instances first show the blend, while still
        unseen, how the apprentice compares with the baseline. ``copies``: how many links each
        instance stands for (the same as adding it that many times)."""
        if not len(features):
            return self
        if self.blend is not None and parent_scores is not None and self.trained:
            weights = np.ones(len(features)) if copies is None else np.asarray(copies, dtype=float)
            self.blend.observe(self.decision_function(features), np.asarray(parent_scores, dtype=float),
                               high_labels(relevance, threshold), weights)
        copies = np.ones(len(features), dtype=np.int64) if copies is None else np.asarray(copies, dtype=np.int64)
        self.split_ = threshold
        labels = high_labels(relevance, threshold)
        columns, lengths = _flatten(features)
        self._add_features(columns)
        column = self._lookup(columns)
        label_of_feature, copies_of_feature = np.repeat(labels, lengths), np.repeat(copies, lengths)
        for label in (0, 1):
            mine = label_of_feature == label
            self.counts_[label] += np.bincount(column[mine], copies_of_feature[mine], minlength=len(self.features_))
            self.instances_[label] += int(copies[labels == label].sum())
        self._weights = None
        return self

    def _add_features(self, columns: np.ndarray) -> None:
        """Room in ``features_`` and ``counts_`` for the ids not seen before, inserted in order (a
        union with the whole vocabulary sorted it again every batch)."""
        batch = np.unique(columns)
        at, known = self._columns(batch)
        if not known.all():
            new, at = batch[~known], at[~known]
            self.features_, self.counts_ = np.insert(self.features_, at, new), np.insert(self.counts_, at, 0.0, axis=1)
            self._table = None

    def _columns(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each of ``ids`` is (or would go) in the sorted ``features_``, and whether it is there."""
        at = np.searchsorted(self.features_, ids)
        known = at < len(self.features_)
        known[known] = self.features_[at[known]] == ids[known]
        return at, known

    def _lookup(self, ids: np.ndarray) -> np.ndarray:
        """Each id's column in ``features_`` (int64), -1 for an id never seen: in a hash table made
        once per model (``_idtable``, about six times faster than binary search on a page's ids).
        Without it, ids looked up by the hundred thousand, at least as many as the features, go
        through a hash set built for the call (pyarrow's ``index_in``): re-scoring the frontier
        looks up about a million at a time; a page's few thousand are faster by binary search
        (``benchmarks/apprentice_links.py``)."""
        if IdTable is not None:
            if getattr(self, "_table", None) is None:
                self._table = IdTable(self.features_)
            return self._table.positions_of(ids)
        if len(ids) >= max(HASHED_LOOKUP, len(self.features_)):
            import pyarrow as pa
            import pyarrow.compute as pc

            found = pc.index_in(ids, value_set=pa.array(self.features_)).fill_null(-1)
            return found.to_numpy(zero_copy_only=False).astype(np.int64)
        at, known = self._columns(ids)
        at[~known] = -1
        return at

    def fit(self, features: Links, relevance: np.ndarray, parent_scores: np.ndarray, sources: list[str],
            threshold: float = HIGH) -> Apprentice:
        """Offline (§3.5), every instance at once: the blend sees the links of half the source
        pages scored by an apprentice trained on the other half, and the other way round."""
        if self.blend is not None:
            labels = high_labels(relevance, threshold)  # as the whole set is labelled
            half = np.array([zlib.crc32(source.encode()) % 2 for source in sources], dtype=bool)
            for held_out in (half, ~half):
                other = Apprentice(self.d_max, blend=False)
                other.partial_fit([f for f, h in zip(features, held_out) if not h], relevance[~held_out],
                                  threshold=threshold)
                if other.trained and held_out.any():
                    self.blend.observe(other.decision_function([f for f, h in zip(features, held_out) if h]),
                                       parent_scores[held_out], labels[held_out], np.ones(int(held_out.sum())))
            if not self.blend.fitted:
                log.warning("apprentice: too few instances of both kinds to fit the blend; the apprentice alone")
                self.blend = None
        return self.partial_fit(features, relevance, threshold=threshold)

    @property
    def ready(self) -> bool:
        """Whether its priorities replace the baseline's: trained, and the blend fitted if there is one."""
        return self.trained and (self.blend is None or self.blend.fitted)

    def priority(self, features: Links | LinkWindows, parent_scores: np.ndarray) -> np.ndarray:
        """A link's priority: the blend of the apprentice and the source page's critic score, or
        the apprentice's Pr(high) alone without a blend (the paper's apprentice)."""
        if self.blend is None:
            return self.predict_proba(features)
        return _sigmoid(self.blend.log_odds(self.decision_function(features), np.asarray(parent_scores, dtype=float)))

    def _log_ratio(self) -> np.ndarray:
        """log q_high,t − log q_low,t (eq. 1) for every feature seen, and a 0 after them for features
        never seen in training, which are no evidence either way (cached until the next ``partial_fit``)."""
        if getattr(self, "_weights", None) is None:
            vocabulary = max(len(self.features_), 1)  # |T| of eq. 1: every feature kept was seen
            log_q = np.log1p(self.counts_) - np.log(vocabulary + self.counts_.sum(axis=1, keepdims=True))
            self._weights = np.append(log_q[1] - log_q[0], 0.0)  # last: features never seen
        return self._weights

    def predict_proba(self, features: Links | LinkWindows) -> np.ndarray:
        """Pr(high | link) for each link (the prior alone for a link without learnt features)."""
        return _sigmoid(self.decision_function(features))

    def decision_function(self, features: Links | LinkWindows) -> np.ndarray:
        """log Pr(high | link) / Pr(low | link) for each link."""
        columns, lengths = _flatten(features)
        if not len(lengths):
            return np.zeros(0)
        weights = self._log_ratio()  # ``_lookup`` gives -1 for a feature never seen: the trailing 0
        evidence = np.bincount(np.repeat(np.arange(len(lengths)), lengths), weights[self._lookup(columns)],
                               minlength=len(lengths))
        return evidence + np.log(self.instances_[1] / self.instances_[0])

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


def high_labels(relevance: np.ndarray, threshold: float) -> np.ndarray:
    """1 for a 'high' target: above the threshold; ties at it go low (many pages may share the
    lowest score) unless that leaves one bucket empty."""
    relevance = np.asarray(relevance)
    labels = relevance > threshold
    if labels.all() or not labels.any():
        labels = relevance >= threshold
    return labels.astype(int)


def _sigmoid(log_odds: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(log_odds, -500, 500)))


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-4, 1 - 1e-4)
    return np.log(p) - np.log1p(-p)


class Blend:
    """How far to trust the apprentice against the baseline, learnt during the crawl. The
    apprentice's log-odds and the logit of the source page's critic score (best-first's
    priority: topics cluster in the link graph, which ⟨t, d⟩ alone cannot see) are weighed by a
    logistic regression fitted on instances the apprentice scored before it learnt them, so
    held out by construction. A weight that comes out negative is dropped: an apprentice no
    better than chance leaves best-first's order. The instances are kept as a 2-D histogram
    with the mean inputs of each cell (small, saved with the model, grown batch by batch), and
    the regression is fitted on those means: the scale it is applied on."""

    LOG_ODDS_LIMIT = 40.0  # naive Bayes is overconfident: beyond ±40 the log-odds say nothing more
    LOG_ODDS_BINS, SCORE_BINS = 40, 20

    def __init__(self):
        self.counts_ = np.zeros((2, self.LOG_ODDS_BINS, self.SCORE_BINS))  # label × apprentice × source score
        self.sums_ = np.zeros((2, *self.counts_.shape))  # the two inputs summed per cell
        self.weights_: np.ndarray | None = None  # apprentice log-odds, source logit, intercept

    def __setstate__(self, state: dict) -> None:
        """Blends saved before learnt state had scikit-learn's names."""
        self.__dict__.update({name if name.endswith("_") else name + "_": value for name, value in state.items()})

    @property
    def fitted(self) -> bool:
        return self.weights_ is not None

    def _inputs(self, apprentice_log_odds: np.ndarray, parent_scores: np.ndarray) -> np.ndarray:
        return np.stack([np.clip(apprentice_log_odds, -self.LOG_ODDS_LIMIT, self.LOG_ODDS_LIMIT), _logit(parent_scores)])

    def observe(self, log_odds: np.ndarray, parent_scores: np.ndarray, labels: np.ndarray, copies: np.ndarray) -> None:
        """Held-out instances: the apprentice's log-odds, the source's score, 'high' or not, copies."""
        x = self._inputs(log_odds, parent_scores)
        a = np.minimum(((x[0] + self.LOG_ODDS_LIMIT) / (2 * self.LOG_ODDS_LIMIT) * self.LOG_ODDS_BINS).astype(int),
                       self.LOG_ODDS_BINS - 1)
        p = np.clip((np.asarray(parent_scores) * self.SCORE_BINS).astype(int), 0, self.SCORE_BINS - 1)
        np.add.at(self.counts_, (labels, a, p), copies)
        for i in (0, 1):
            np.add.at(self.sums_[i], (labels, a, p), x[i] * copies)
        self._fit()

    def _fit(self) -> None:
        from sklearn.linear_model import LogisticRegression

        label, a, p = np.nonzero(self.counts_)
        if len(np.unique(label)) < 2:
            return
        weight = self.counts_[label, a, p]
        x = (self.sums_[:, label, a, p] / weight).T
        keep = [0, 1]
        while keep:  # refit without a weight that comes out negative
            model = LogisticRegression(C=100.0, solver="newton-cholesky")  # two inputs: 30 % faster than lbfgs
            model.fit(x[:, keep], label, sample_weight=weight / weight.mean())
            negative = [k for k, w in zip(keep, model.coef_[0]) if w < 0]
            if not negative:
                break
            keep.remove(negative[0])
        weights = np.zeros(3)
        if keep:
            weights[keep] = model.coef_[0]
            weights[2] = model.intercept_[0]
        else:
            weights[1] = 1.0  # neither helps: keep best-first's order
        self.weights_ = weights

    def log_odds(self, apprentice_log_odds: np.ndarray, parent_scores: np.ndarray) -> np.ndarray:
        return self.weights_[:2] @ self._inputs(apprentice_log_odds, parent_scores) + self.weights_[2]


Links = list[np.ndarray] | list[bytes]  # each link's feature ids, as arrays or packed (as stored)


def _flatten(features: Links | LinkWindows) -> tuple[np.ndarray, np.ndarray]:
    """All feature ids in one array, and the number of each link's. A page's windows (every
    link, ⟨t, d⟩ only) are read as they are, with no array per link cut and joined again;
    packed links are joined and read in one go (re-scoring the frontier reads tens of thousands
    at a time)."""
    if isinstance(features, LinkWindows):
        return features.features.astype(np.int64), np.diff(features.bounds).astype(np.int64)
    if not features:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if isinstance(features[0], bytes):
        lengths = np.fromiter(map(len, features), dtype=np.int64, count=len(features)) // 4
        return np.frombuffer(b"".join(features), dtype=np.uint32).astype(np.int64), lengths
    lengths = np.fromiter(map(len, features), dtype=np.int64, count=len(features))
    return (np.concatenate(features).astype(np.int64) if lengths.sum() else np.zeros(0, dtype=np.int64)), lengths


def pack(features: list[np.ndarray]) -> LinkWindows:
    """Links' feature ids as stored: uint32, link after link, converted in one go for the page."""
    lengths = np.fromiter(map(len, features), dtype=np.int64, count=len(features))
    joined = np.concatenate(features) if lengths.sum() else np.zeros(0)
    return LinkWindows(joined.astype(np.uint32), np.r_[0, np.cumsum(lengths)].astype(np.int32))


def _pieces(joined, lengths):
    """``joined`` (an array or bytes) cut into consecutive pieces of the given lengths."""
    ends = np.cumsum(lengths).tolist()
    return [joined[start:end] for start, end in zip([0, *ends[:-1]], ends)]


def median_score(queries: Queries) -> float:
    """The median critic score of the pages judged so far: the boundary of the two buckets."""
    median = queries.median_relevance()
    return HIGH if median is None else median


def archived_pages(directory: Path, wanted: Callable[[str], bool] = lambda url: True) -> Iterator[Page]:
    """The crawl's HTML pages fetched with a 2xx status, re-read from its WARC archive in archive
    order and parsed; a page whose URL is not ``wanted`` is not parsed."""
    for path in sorted(CrawlDir(directory).warc.glob("*.warc.gz")):
        with open(path, "rb") as handle:
            for record in ArchiveIterator(handle):
                url = record.rec_headers.get_header("WARC-Target-URI")
                if record.rec_type != "response" or not wanted(url) or not record.http_headers \
                        or not record.http_headers.get_statuscode().startswith("2"):
                    continue
                try:
                    page = parse_html(record.content_stream().read(), url)
                except DecodeError:
                    continue
                yield page


def crawl_instances(directory: Path, analyzer: Analyzer, d_max: int, url_words: bool = False,
                    label: Callable[[str], float] | None = None,
                    every_link: bool = False) -> tuple[list[np.ndarray], np.ndarray, list[str], np.ndarray]:
    """Instances from a finished crawl, its pages re-read from the WARC archive (§3.5): the
    features of every link (u, v) whose both ends were judged (⟨t, d⟩, and the words of v's URL
    if asked), the critic's score of v, u, and the critic's score of u. With ``label`` (a
    reference that knows every page's class) v's score is ``label(v)``, and with ``every_link``
    too every link out of a judged page is an instance, its target judged or not."""
    with closing(open_existing(directory)) as db:  # by the URL asked for and the URL a redirect ended at
        relevance = Queries(db).relevance_by_url()
    score_of_target = label or relevance.__getitem__
    features: list[np.ndarray] = []
    labels: list[float] = []
    sources: list[str] = []
    for page in archived_pages(directory, relevance.__contains__):
        wanted = [i for i, link in enumerate(page.links)
                  if (every_link or link.url in relevance) and link.url != page.url]
        features += page_link_features(analyzer, page, wanted, d_max, url_words)
        labels += [score_of_target(page.links[i].url) for i in wanted]
        sources += [page.url] * len(wanted)
    return features, np.array(labels), sources, np.array([relevance[source] for source in sources])
