"""Text to terms and terms to features: tokenizer, stop words, Snowball stemming, language check;
the term weightings of the papers (Pant's TF-IDF, BINGO!'s relative term frequency) and BINGO!'s
feature selection by Mutual Information or Information Gain (thesis §2.2.1, §2.3.2)."""

from __future__ import annotations

import hashlib
import re
import sys
import threading
import zlib
from array import array
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import Stemmer
import stop_words
from scipy import sparse
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

try:
    from focuscrawl import _tokens
except ImportError:  # not built (no C compiler at install)
    _tokens = None

WORDS = "words"  # a page's word_counts in ``Page.terms``, while it is judged
TOKENS = "tokens"  # its words coded, with the leaf of each and their counts (``page_tokens``)
FREQUENCIES = "frequencies"  # its term frequencies by analyzer settings, once worked out (``page_frequencies``)
RECENT_PAGES = 20_000  # pages whose term frequencies the judging workers keep, together (about 3 KB each)
# a letter, then letters and digits, then maybe 's or 't…; possessive (nothing can follow
# a run that would give some of it back), which makes findall 1.6x faster on real pages
TOKEN = re.compile(r"[^\W\d_][^\W_]*+(?:'[^\W\d_]++)?")


LEAF_BREAK = "\x00"  # between the leaves of a page: HTML parsers never leave a NUL in text
LEAF_TOKEN = re.compile(LEAF_BREAK + "|" + TOKEN.pattern)
# TOKEN's words and each LEAF_BREAK: in C when ``_tokens`` is built (the same list, 4.8x faster
# on test-web pages), else the expression itself, which stays the reference
find_leaf_tokens = LEAF_TOKEN.findall if _tokens is None else _tokens.findall


class Coded(NamedTuple):
    """A text's words (``find_leaf_tokens`` without the LEAF_BREAKs), as the analyzer reads them."""

    counts: dict[str, int]  # the distinct words with their counts, in order of first occurrence
    codes: np.ndarray  # each word's place in ``counts`` (int64)
    leaf: np.ndarray  # how many LEAF_BREAKs come before each word: the number of its leaf (int64)


def coded_in_python(text: str) -> Coded:
    """``Coded`` from ``find_leaf_tokens`` (``_tokens.coded`` does it in one pass, in C)."""
    code_of: dict[str, int] = {}
    codes, leaves, leaf = [], [], 0
    for token in find_leaf_tokens(text):
        if token == LEAF_BREAK:
            leaf += 1
        else:
            codes.append(code_of.setdefault(token, len(code_of)))
            leaves.append(leaf)
    codes = np.array(codes, dtype=np.int64)
    return Coded(dict(zip(code_of, np.bincount(codes, minlength=len(code_of)).tolist())), codes,
                 np.array(leaves, dtype=np.int64))


code_words = coded_in_python if _tokens is None else (lambda text: Coded(*_tokens.coded(text)))


def tokens(text: str) -> list[str]:
    """Lower-case words of at least two characters, starting with a letter."""
    return [t for t in find_leaf_tokens(text.lower()) if len(t) > 1]  # (a NUL is one character)


TERM_CACHE_SIZE = 200_000  # distinct words remembered per language in a process (a few tens of MB at most)


@lru_cache(maxsize=None)
def stopword_set(language: str) -> frozenset[str]:
    """English uses the compact Glasgow list (the stop-words package's English list drops
    content words such as 'computer'); other languages use the stop-words package."""
    if language == "en":
        return frozenset(ENGLISH_STOP_WORDS)
    try:
        return frozenset(stop_words.get_stop_words(language))
    except stop_words.StopWordError:
        raise ValueError(f"no stop-word list for language {language!r}") from None


@lru_cache(maxsize=None)
def foreign_stopword_set(language: str) -> frozenset[str]:
    """Stop words of every other language that are not stop words of this one."""
    foreign: set[str] = set()
    for code in stop_words.LANGUAGE_MAPPING:
        if code != language:
            foreign.update(stop_words.get_stop_words(code))
    return frozenset(foreign - stopword_set(language) - set(stop_words.get_stop_words(language)))


@lru_cache(maxsize=None)
def _term_cache(language: str, stem: bool) -> dict[str, str]:
    """The term of each word seen so far ("" for a word that is none: a stop word, a single
    character), one dictionary for every analyzer of these settings in the process: a judge
    handed to a worker process (a retrained critic, the apprentice's new model) comes without
    its own and would stem every word again."""
    return {}


@lru_cache(maxsize=None)
def _stemmer(language: str) -> Stemmer.Stemmer:
    name = stop_words.LANGUAGE_MAPPING.get(language, language)
    if name not in Stemmer.algorithms():
        raise ValueError(f"no Snowball stemmer for language {language!r}")
    return Stemmer.Stemmer(name)


class LeafTerms(NamedTuple):
    """A page's terms in order, as codes into its distinct terms, and the DOM leaf of each."""

    vocabulary: list[str]  # the page's distinct terms, in order of first occurrence
    codes: np.ndarray  # per term occurrence, its index in ``vocabulary``
    leaf: np.ndarray  # per term occurrence, the number of its leaf

    def terms(self) -> list[str]:
        return np.array(self.vocabulary, dtype=object)[self.codes].tolist() if self.vocabulary else []

    def frequencies(self, navigation: tuple[tuple[int, int], ...] = ()) -> dict[str, int]:
        """The terms' counts, those in the leaves of ``navigation`` (a page's) left out."""
        if not navigation:
            return dict(zip(self.vocabulary, np.bincount(self.codes, minlength=len(self.vocabulary)).tolist()))
        return _counted_outside(self.vocabulary, self.codes, self.leaf, navigation)


def _counted_outside(names: list[str], codes: np.ndarray, leaf: np.ndarray,
                     navigation: tuple[tuple[int, int], ...]) -> dict[str, int]:
    """The names whose codes occur in a leaf outside the ranges [start, end) of ``navigation`` (in
    order; a range may be empty or touch the next), with how often."""
    outside = np.searchsorted(np.array(navigation, dtype=np.int64).ravel(), leaf, side="right") % 2 == 0
    counts = np.bincount(codes[outside], minlength=len(names)).tolist()
    return {name: count for name, count in zip(names, counts) if count}


_step = threading.local()  # ``frequencies``: the memo of a thread inside ``remembered_frequencies``


@contextmanager
def remembered_frequencies(known: dict | None = None):
    """Inside, in this thread, each text's ``term_frequencies`` are worked out once: a critic's
    retraining reads the same pages for its reliable negatives, its fit and its terms' weights
    (the texts are in memory for the step anyway; their frequencies are forgotten after it).
    ``known``: frequencies worked out already, in another process (``Analyzer.as_remembered``)."""
    outer = getattr(_step, "frequencies", None)
    _step.frequencies = (known or {}) if outer is None else outer
    try:
        yield
    finally:
        _step.frequencies = outer


class RecentFrequencies:
    """The term frequencies of the last pages judged here, by a digest of their text: a judging
    worker judges a page again after a retraining, or analyses it for a learning step's sample,
    from what it worked out when it judged the page (a crawl's steps, at a tenth of its budget and
    each doubling, judge 1.5 times its pages again). Only the pages this worker judged: with W
    workers, about 1/W of a chunk. The terms are interned (stems are shared anyway); the first
    judged are forgotten past ``pages``."""

    def __init__(self, pages: int = RECENT_PAGES):
        self.pages = pages
        self._by_digest: dict[bytes, list[tuple[tuple, tuple[str, ...], array]]] = {}

    def remember(self, page) -> None:
        """The frequencies worked out for ``page`` (``Analyzer.page_frequencies``), if any."""
        analysed = page.terms.get(FREQUENCIES)
        if not analysed or not page.text:
            return
        self._by_digest[_digest(page.text)] = [
            (terms_key, tuple(map(sys.intern, frequencies)), array("I", frequencies.values()))
            for terms_key, frequencies in analysed.items()]
        while len(self._by_digest) > self.pages:
            del self._by_digest[next(iter(self._by_digest))]

    def known(self, texts: list[str]) -> dict:
        """What is remembered of ``texts``, as ``remembered_frequencies`` knows it."""
        known = {}
        for text in texts:
            for terms_key, terms, counts in self._by_digest.get(_digest(text), ()):
                known[terms_key, text] = dict(zip(terms, counts))
        return known


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class Analyzer:
    """The one text pipeline shared by the critic and everything that needs terms."""

    def __init__(self, language: str = "en", stem: bool = True):
        self.language = language
        self.stem = stem
        self._stop = stopword_set(language)
        self._stemmer = _stemmer(language) if stem else None
        self._terms = _term_cache(language, stem)

    def terms(self, text: str) -> list[str]:
        return self.leaf_terms([text]).terms()

    def leaf_terms(self, leaves: list[str]) -> LeafTerms:
        """The terms of all of a page's DOM leaves and the leaf each comes from, the same as
        ``terms`` leaf by leaf but in one pass over the page (a page may have thousands of leaves)."""
        return self._leaf_terms(_leaf_tokens(leaves))

    def _leaf_terms(self, coded: Coded) -> LeafTerms:
        """``leaf_terms`` from the leaves' words, coded. Per word, only numpy runs; the terms and
        their vocabulary are worked out once per distinct word, in C loops over it (``map``,
        ``dict.fromkeys``: a page's 840 distinct words, navigation's included, 0.26 → 0.17 ms)."""
        terms = self._terms_of(list(coded.counts))
        distinct = dict.fromkeys(terms)
        distinct.pop("", None)
        vocabulary = list(distinct)
        code = dict(zip(vocabulary, range(len(vocabulary))))
        code[""] = -1  # a stop word, a single character
        word_term = np.fromiter(map(code.__getitem__, terms), dtype=np.int64, count=len(terms))
        term_of_token = word_term[coded.codes]
        keep = term_of_token >= 0
        return LeafTerms(vocabulary, term_of_token[keep], coded.leaf[keep])

    @property
    def terms_key(self) -> tuple[str, bool]:
        """Where a page keeps its leaf terms for analyzers of these settings (``Page.terms``)."""
        return self.language, self.stem

    def page_terms(self, page) -> LeafTerms:
        """``leaf_terms`` of a parsed page, kept on the page for every analyzer of the same
        settings (from the tokens its word counts were made of, if they were)."""
        if self.terms_key not in page.terms:
            page.terms[self.terms_key] = self._leaf_terms(page_tokens(page))
        return page.terms[self.terms_key]

    def known_terms(self, page) -> LeafTerms | None:
        """The page's ``page_terms`` if it has been tokenised leaf by leaf already (for the
        apprentice's features or the critic's counts), else None."""
        return self.page_terms(page) if self.terms_key in page.terms or TOKENS in page.terms else None

    def page_frequencies(self, page) -> dict[str, int]:
        """``term_frequencies`` of the page's text: from its leaf terms if they were needed
        already, else from its words, counted from its leaves if its text is theirs (so that the
        preview of a relevant page reads the same tokens again, not the text a second time);
        kept on the page (``RecentFrequencies`` remembers them)."""
        known = page.terms.setdefault(FREQUENCIES, {})
        if self.terms_key not in known:
            known[self.terms_key] = self._page_frequencies(page)
        return known[self.terms_key]

    def _page_frequencies(self, page) -> dict[str, int]:
        analysed = page.terms.get(self.terms_key)
        if analysed is not None:
            return analysed.frequencies(page.navigation)
        words = page.terms.get(WORDS)
        if words is None and page.leaves and page.text == " ".join(filter(None, page.content_leaves())):
            page_tokens(page)
            words = page.terms[WORDS]
        return self.term_frequencies(page.text, words)

    def term_frequencies(self, text: str, words: Mapping[str, int] | None = None) -> dict[str, int]:
        """The terms of ``text`` (or of its ``word_counts``, if made already) with their counts.
        Words are counted before stemming, so each distinct word is stemmed once (a page has ~7x
        more words than distinct ones): this is the first step of classifying every fetched page."""
        memo = getattr(_step, "frequencies", None) if words is None else None
        if memo is not None and (known := memo.get((self.terms_key, text))) is not None:
            return known
        words = word_counts(text) if words is None else words
        frequencies: dict[str, int] = {}
        for (word, count), term in zip(words.items(), self._terms_of(list(words))):
            if term:
                frequencies[term] = frequencies.get(term, 0) + count
        if memo is not None:
            memo[self.terms_key, text] = frequencies
        return frequencies

    def as_remembered(self, texts: list[str], frequencies: list[dict[str, int]]) -> dict:
        """The ``term_frequencies`` of ``texts``, worked out elsewhere, as ``remembered_frequencies``
        knows them."""
        return {(self.terms_key, text): counted for text, counted in zip(texts, frequencies)}

    def _terms_of(self, words: list[str]) -> list[str]:
        """Each word's term ("" if none) through the dictionary of the words seen so far: a
        lookup is ~15x cheaper than PyStemmer's own call per word, and it holds the stop words'
        verdict too."""
        terms = self._terms
        found = list(map(terms.get, words))
        if None not in found:
            return found
        missing = [word for word, term in zip(words, found) if term is None]
        if len(terms) + len(missing) > TERM_CACHE_SIZE:
            terms.clear()
        kept = [word for word in missing if len(word) > 1 and word not in self._stop]
        made = dict.fromkeys(missing, "")
        made.update(zip(kept, self._stemmer.stemWords(kept) if self._stemmer else kept))
        terms.update(made)
        return [made[word] if term is None else term for word, term in zip(words, found)]

    def __call__(self, text: str) -> list[str]:
        """scikit-learn vectorizers call an analyzer with the raw document."""
        return self.terms(text)

    def __getstate__(self) -> dict:
        return {"language": self.language, "stem": self.stem}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)


def _leaf_tokens(leaves: list[str]) -> Coded:
    """The leaves' words, coded (leaf by leaf: LEAF_BREAK between two leaves)."""
    joined = LEAF_BREAK.join(leaves)
    if joined.count(LEAF_BREAK) != max(len(leaves) - 1, 0):
        joined = LEAF_BREAK.join(leaf.replace(LEAF_BREAK, " ") for leaf in leaves)
    return code_words(joined.lower())


def page_tokens(page) -> Coded:
    """The words of a parsed page's leaves, coded (``_leaf_tokens``), kept on the page; their
    counts outside its navigation are its ``word_counts`` too (its text is those leaves joined)
    unless counted already."""
    if TOKENS not in page.terms:
        coded = page.terms[TOKENS] = _leaf_tokens(page.leaves)
        page.terms.setdefault(WORDS, _counted_outside(list(coded.counts), coded.codes, coded.leaf, page.navigation)
                              if page.navigation else coded.counts)
    return page.terms[TOKENS]


def word_counts(text: str) -> dict[str, int]:
    """The words of ``text``, lower case, with their counts (in order of first occurrence): the
    one tokenisation that the language check and the critic's term counts share."""
    return code_words(text.lower()).counts


def stopword_score(text: str | Mapping[str, int], language: str = "en") -> int:
    """BINGO! §2.3.6 dCount: +1 per stop word of the crawl's language, −1 per stop word
    found only in other languages' lists, in a text or its ``word_counts``. Pages scoring below
    d_STOP are not classified. Counted per distinct word (a page has ~7x more words than distinct ones)."""
    own, foreign = stopword_set(language), foreign_stopword_set(language)
    score = 0
    for word, count in (word_counts(text) if isinstance(text, str) else text).items():
        if len(word) < 2:
            continue
        if word in own:
            score += count
        elif word in foreign:
            score -= count
    return score


# -- features: scikit-learn transformers over term-count matrices --------------------------------

def as_csr(matrix) -> sparse.csr_matrix:
    """``matrix`` itself when it is already CSR (a conversion costs more than scoring one page)."""
    return matrix if sparse.issparse(matrix) and matrix.format == "csr" else sparse.csr_matrix(matrix)


def count_matrix(rows: list[dict[str, int]], column: dict[str, int]) -> sparse.csr_matrix:
    """Term counts as a sparse matrix over the given columns (terms elsewhere are dropped)."""
    indices, data, indptr = [], [], [0]
    for counts in rows:  # the column lookups are the only per-term Python work
        columns = np.array([column.get(term, -1) for term in counts], dtype=np.int64)
        values = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
        known = columns >= 0
        indices.append(columns[known])
        data.append(values[known])
        indptr.append(indptr[-1] + int(known.sum()))
    return sparse.csr_matrix((np.concatenate(data) if rows else np.zeros(0), np.concatenate(indices) if rows else
                              np.zeros(0, dtype=np.int64), np.array(indptr, dtype=np.int64)), shape=(len(rows), len(column)))


class TermCounts(TransformerMixin, BaseEstimator):
    """Texts to term counts over the training vocabulary (scikit-learn's CountVectorizer, but
    through ``Analyzer.term_frequencies``: half the time per page, which the crawl pays on every
    fetch). Columns are the terms in sorted order."""

    def __init__(self, analyzer: Analyzer):
        self.analyzer = analyzer

    def fit(self, texts: list[str], y=None) -> TermCounts:
        self.fit_transform(texts)
        return self

    def fit_transform(self, texts: list[str], y=None) -> sparse.csr_matrix:
        rows = [self.analyzer.term_frequencies(text) for text in texts]
        self.vocabulary_ = {term: i for i, term in enumerate(sorted(set().union(*rows)))}
        return count_matrix(rows, self.vocabulary_)

    def transform(self, texts: list[str]) -> sparse.csr_matrix:
        return self.from_frequencies([self.analyzer.term_frequencies(text) for text in texts])

    def from_frequencies(self, rows: list[dict[str, int]]) -> sparse.csr_matrix:
        """The counts of texts already analysed (``Analyzer.page_frequencies``)."""
        return count_matrix(rows, self.vocabulary_)

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        return np.array(list(self.vocabulary_), dtype=object)  # built in column order

class PantTfidf(TransformerMixin, BaseEstimator):
    """Pant & Srinivasan 2005 eq. 1: w = (0.5 + 0.5·tf/max tf) · ln(|E| / df), for terms in the page;
    df and |E| come from the training examples and stay fixed while crawling. ``unit`` scales
    each row to length 1 (for svm-cosine and the polynomial SVMs, see ``learn.make_classifier``)."""

    def __init__(self, unit: bool = False):
        self.unit = unit

    def fit(self, counts: sparse.csr_matrix, y=None) -> PantTfidf:
        counts = sparse.csr_matrix(counts)
        df = np.bincount(counts.indices, minlength=counts.shape[1])
        self.idf_ = np.log(counts.shape[0] / np.maximum(df, 1))
        return self

    def transform(self, counts: sparse.csr_matrix) -> sparse.csr_matrix:
        counts = as_csr(counts)
        lengths = np.diff(counts.indptr)
        filled = lengths > 0
        row_max = np.ones(len(lengths))
        data = counts.data.astype(np.float64)
        if counts.nnz:
            row_max[filled] = np.maximum.reduceat(data, counts.indptr[:-1][filled])
        data = (0.5 + 0.5 * data / np.repeat(row_max, lengths)) * self.idf_[counts.indices]
        if self.unit and counts.nnz:
            norms = np.ones(len(lengths))
            norms[filled] = np.sqrt(np.add.reduceat(data * data, counts.indptr[:-1][filled]))
            data /= np.repeat(np.where(norms > 0, norms, 1.0), lengths)
        if data.all():  # the usual case: the counts' structure is shared, not copied
            return sparse.csr_matrix((data, counts.indices, counts.indptr), shape=counts.shape)
        weights = sparse.csr_matrix((data, counts.indices.copy(), counts.indptr.copy()), shape=counts.shape)
        weights.eliminate_zeros()  # terms found in every example carry no weight
        return weights

    def __setstate__(self, state: dict) -> None:
        super().__setstate__({"unit": False, **state})  # models pickled before ``unit`` existed


class RelativeTf(TransformerMixin, BaseEstimator):
    """BINGO! RTF(w, d) = tf(w, d) / |d|, |d| counted over the features kept (thesis §2.3.2: the
    page is mapped onto the node's feature space first, then weighted)."""

    def fit(self, counts, y=None) -> RelativeTf:
        return self

    def transform(self, counts) -> sparse.csr_matrix:
        weights = sparse.csr_matrix(counts, dtype=np.float64, copy=True)
        lengths = np.asarray(weights.sum(axis=1)).ravel()
        weights.data /= np.repeat(np.maximum(lengths, 1.0), np.diff(weights.indptr))
        return weights


def mutual_information(present: np.ndarray, in_topic: np.ndarray, n_topic: int, n: int) -> np.ndarray:
    """Thesis eq. 2.10, MI(w, D) = P[w ∧ D] · log(P[w ∧ D] / (P[w] · P[D])), from document counts:
    ``present`` documents holding w, ``in_topic`` of them in D (0 where w never occurs in D)."""
    joint = in_topic / n
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(in_topic > 0, joint * np.log(joint / ((present / n) * (n_topic / n))), 0.0)


def information_gain(present: np.ndarray, in_topic: np.ndarray, n_topic: int, n: int) -> np.ndarray:
    """Thesis eq. 2.9 for the two categories D and not-D: the entropy of the category minus its
    expected entropy once the presence or absence of w is known (in nats)."""

    def plogp(p):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(p > 0, p * np.log(p), 0.0)

    absent = n - present
    p_topic = n_topic / n
    with np.errstate(divide="ignore", invalid="ignore"):
        given_w = np.where(present > 0, in_topic / np.maximum(present, 1), 0.0)
        given_not_w = np.where(absent > 0, (n_topic - in_topic) / np.maximum(absent, 1), 0.0)
    prior = -(plogp(p_topic) + plogp(1 - p_topic))
    return (prior + (present / n) * (plogp(given_w) + plogp(1 - given_w))
            + (absent / n) * (plogp(given_not_w) + plogp(1 - given_not_w)))


SELECTION_SCORES = {"mi": mutual_information, "ig": information_gain}


class FeatureSelector(TransformerMixin, BaseEstimator):
    """BINGO!'s topic-specific feature selection (thesis §2.3.2): of the ``candidates`` terms most
    frequent within the topic (a df pre-filter against one-document words), keep the ``features``
    best by ``method`` ('mi' or 'ig'). Fitted with y = 1 for the topic's documents."""

    def __init__(self, method: str = "mi", features: int = 2000, candidates: int = 10000):
        self.method, self.features, self.candidates = method, features, candidates

    def fit(self, counts, y) -> FeatureSelector:
        present = sparse.csc_matrix(counts) > 0
        topic = np.asarray(y) == 1
        df = np.asarray(present.sum(axis=0)).ravel()
        df_topic = np.asarray(present[topic].sum(axis=0)).ravel()
        order = np.lexsort((np.arange(len(df)), -df, -df_topic))  # most frequent in the topic first
        candidates = order[: self.candidates]
        candidates = candidates[df_topic[candidates] > 0] if self.method == "mi" else candidates
        scores = SELECTION_SCORES[self.method](df[candidates], df_topic[candidates], int(topic.sum()), len(topic))
        best = np.lexsort((candidates, -df[candidates], -scores))[: self.features]  # ties: the more frequent
        self.ranking_, self.weights_ = candidates[best], scores[best]  # best first, for `topics show`
        self.support_ = np.sort(self.ranking_)
        return self

    def transform(self, counts) -> sparse.csr_matrix:
        return sparse.csr_matrix(counts)[:, self.support_]


SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def topic_preview(leaves: list[str], weights: dict[str, float], analyzer: Analyzer, sentences: int = 3,
                  terms: LeafTerms | None = None) -> str:
    """BINGO! thesis §2.3.3: the page's sentences (tags and punctuation as borders) ranked by the
    sum of the MI weights of their features for the topic; the best kept in page order. With the
    leaves' ``terms`` (analysed already: the apprentice's), only the leaves that can hold one of
    the best are split into sentences: MI weights are not negative, so a sentence weighs at most
    its leaf, and the leaves are read from the heaviest down, more each round, until none left
    can beat the ``sentences``-th best found (half the time of splitting and analysing them all)."""
    if terms is None:
        candidates = [s for leaf in leaves for s in _sentences(leaf)]
        best = _best_sentences(candidates, range(len(candidates)), weights, analyzer, sentences, [])
    else:
        leaf_weights = _weighed(terms, weights, len(leaves))
        order, done, size, best = np.argsort(-leaf_weights, kind="stable").tolist(), 0, 16, []
        while done < len(order) and leaf_weights[order[done]] > 0 and (
                len(best) < sentences or leaf_weights[order[done]] >= best[-1][0]):
            pieces = [((leaf, i), text) for leaf in order[done:done + size] for i, text in enumerate(_sentences(leaves[leaf]))]
            done, size = done + size, size * 4
            best = _best_sentences([text for _, text in pieces], [place for place, _ in pieces], weights, analyzer,
                                   sentences, best)
    return " … ".join(text for _, _, text in sorted(best, key=lambda b: b[1]))


def _sentences(leaf: str) -> list[str]:
    """A leaf's sentences of three words or more (shorter pieces are labels, not sentences)."""
    return [s.strip() for s in SENTENCE_END.split(leaf) if len(s.split()) >= 3]


def _weighed(terms: LeafTerms, weights: dict[str, float], leaves: int) -> np.ndarray:
    """Each leaf's sum of its terms' weights."""
    term_weights = np.array([weights.get(t, 0.0) for t in terms.vocabulary], dtype=np.float64)
    return np.bincount(terms.leaf, term_weights[terms.codes], minlength=leaves)


def _best_sentences(texts: list[str], places: Sequence, weights: dict[str, float], analyzer: Analyzer, sentences: int,
                    best: list[tuple]) -> list[tuple]:
    """The ``sentences`` best of ``texts`` and ``best`` (weight, place in the page, text), a weight
    above 0; between equal weights the later sentence."""
    sums = _weighed(analyzer.leaf_terms(texts), weights, len(texts)).tolist()
    return sorted(best + [(w, place, text) for w, place, text in zip(sums, places, texts) if w > 0], reverse=True)[:sentences]


# -- near-duplicate signatures -------------------------------------------------------------
# A signature of a page's word shingles estimates the Jaccard similarity of two pages (Broder
# 1997). Ours, not datasketch's: datasketch hashes each shingle with SHA-1 in Python and applies
# every hash function to every shingle (1.9 ms for a 2 000-word page). Here a page's words are
# hashed once (CRC-32), shingles are combined from those hashes with array arithmetic, and the
# signature is one permutation hashing (Li, Owen & Zhang 2012): the shingles' hashes, sorted,
# fall into 256 bins by their top 8 bits and each bin keeps its least value; an empty bin
# borrows the next filled bin's value, marked by the distance (rotation densification,
# Shrivastava & Li 2014). Two pages agree on a bin with probability their Jaccard similarity,
# as with 256 MinHash functions, at the cost of one sort (the words take most of the time).

SHINGLE = 4  # words per shingle
SIGNATURE_BINS = 256  # 128 left the precision at 0.946–0.957 on the test web
NEAR_DUPLICATE = 0.8  # Jaccard similarity of near-duplicates
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9),
        np.uint64(0x27D4EB2F165667C5))  # odd 64-bit multipliers, one per word of a shingle


def shingle_hashes(text: str) -> np.ndarray:
    """32-bit hashes of the text's word shingles (none if it has fewer words than a shingle)."""
    words = np.fromiter(map(zlib.crc32, map(str.encode, tokens(text.lower()))), np.uint64)
    if len(words) < SHINGLE:
        return np.zeros(0, dtype=np.uint32)
    count = len(words) - SHINGLE + 1
    mixed = np.zeros(count, dtype=np.uint64)
    for offset, factor in enumerate(_MIX):  # every word reaches the high bits kept
        mixed ^= words[offset:count + offset] * factor
    return (mixed >> np.uint64(32)).astype(np.uint32)


def signature(text: str) -> np.ndarray | None:
    """The page's signature: in each of 256 bins of its shingles' hashes, the least (its low 24
    bits). None for a text shorter than a shingle: such pages are nobody's near-duplicates."""
    shingles = shingle_hashes(text)
    if len(shingles) == 0:
        return None
    hashed = shingles * np.uint32(0x9E3779B1)  # odd: a permutation of 2^32, so bins are not the shingles' own bits
    hashed ^= hashed >> np.uint32(16)
    hashed.sort()
    bins = np.arange(SIGNATURE_BINS, dtype=np.uint32)
    first = hashed[np.minimum(np.searchsorted(hashed, bins.astype(np.uint64) << 24), len(hashed) - 1)]
    filled = (first >> np.uint32(24)) == bins
    found = np.where(filled, first & np.uint32(0xFFFFFF), np.uint32(0xFFFFFFFF))
    if not filled.all():  # rotation densification: the next filled bin's value, marked by how far it is
        full = np.flatnonzero(filled)
        following = full[np.searchsorted(full, bins) % len(full)]
        distance = ((following - bins.astype(np.int64)) % SIGNATURE_BINS).astype(np.uint32)
        found = np.where(filled, found, found[following] + (distance << np.uint32(24)))
    return found


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """The Jaccard similarity of two pages' shingles, as their signatures estimate it."""
    return float(np.mean(a == b))


def nearest(signature: np.ndarray, candidates: list[tuple[int, np.ndarray]],
            threshold: float = NEAR_DUPLICATE) -> tuple[int | None, float]:
    """The candidate the page nearly repeats (the most similar, at least ``threshold``), if any."""
    best, best_similarity = None, 0.0
    for url_id, other in candidates:
        found = similarity(signature, other)
        if found >= threshold and found > best_similarity:
            best, best_similarity = url_id, found
    return best, best_similarity
