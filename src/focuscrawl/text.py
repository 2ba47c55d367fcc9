"""Text to terms and terms to features: tokenizer, stop words, Snowball stemming, language check;
the term weightings of the papers (Pant's TF-IDF, BINGO!'s relative term frequency) and BINGO!'s
feature selection by Mutual Information or Information Gain (thesis §2.2.1, §2.3.2)."""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

import numpy as np
import Stemmer
import stop_words
from scipy import sparse
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

TOKEN = re.compile(r"[^\W\d_][^\W_]*(?:'[^\W\d_]+)?")


def tokens(text: str) -> list[str]:
    """Lower-case words of at least two characters, starting with a letter."""
    return [t for t in TOKEN.findall(text.lower()) if len(t) > 1]


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
def _stemmer(language: str) -> Stemmer.Stemmer:
    name = stop_words.LANGUAGE_MAPPING.get(language, language)
    if name not in Stemmer.algorithms():
        raise ValueError(f"no Snowball stemmer for language {language!r}")
    return Stemmer.Stemmer(name)


class Analyzer:
    """The one text pipeline shared by the critic and everything that needs terms."""

    def __init__(self, language: str = "en", stem: bool = True):
        self.language = language
        self.stem = stem
        self._stop = stopword_set(language)
        self._stemmer = _stemmer(language) if stem else None

    def terms(self, text: str) -> list[str]:
        words = [t for t in tokens(text) if t not in self._stop]
        return self._stemmer.stemWords(words) if self._stemmer else words

    def term_frequencies(self, text: str) -> Counter[str]:
        return Counter(self.terms(text))

    def __call__(self, text: str) -> list[str]:
        """scikit-learn vectorizers call an analyzer with the raw document."""
        return self.terms(text)

    def __getstate__(self) -> dict:
        return {"language": self.language, "stem": self.stem}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)


def stopword_score(text: str, language: str = "en") -> int:
    """BINGO! §2.3.6 dCount: +1 per stop word of the crawl's language, −1 per stop word
    found only in other languages' lists. Pages scoring below d_STOP are not classified."""
    own, foreign = stopword_set(language), foreign_stopword_set(language)
    score = 0
    for token in tokens(text):
        if token in own:
            score += 1
        elif token in foreign:
            score -= 1
    return score


# -- features: scikit-learn transformers over term-count matrices --------------------------------

class PantTfidf(TransformerMixin, BaseEstimator):
    """Pant & Srinivasan 2005 eq. 1: w = (0.5 + 0.5·tf/max tf) · ln(|E| / df), for terms in the page;
    df and |E| come from the training examples and stay fixed while crawling."""

    def fit(self, counts: sparse.csr_matrix, y=None) -> PantTfidf:
        counts = sparse.csr_matrix(counts)
        df = np.bincount(counts.indices, minlength=counts.shape[1])
        self.idf_ = np.log(counts.shape[0] / np.maximum(df, 1))
        return self

    def transform(self, counts: sparse.csr_matrix) -> sparse.csr_matrix:
        weights = sparse.csr_matrix(counts, dtype=np.float64, copy=True)
        lengths = np.diff(weights.indptr)
        filled = lengths > 0
        row_max = np.ones(len(lengths))
        row_max[filled] = np.maximum.reduceat(weights.data, weights.indptr[:-1][filled]) if weights.nnz else 1.0
        weights.data = (0.5 + 0.5 * weights.data / np.repeat(row_max, lengths)) * self.idf_[weights.indices]
        weights.eliminate_zeros()  # terms found in every example carry no weight
        return weights


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


def topic_preview(leaves: list[str], weights: dict[str, float], analyzer: Analyzer, sentences: int = 3) -> str:
    """BINGO! thesis §2.3.3: the page's sentences (tags and punctuation as borders) ranked by the
    sum of the MI weights of their features for the topic; the best kept in page order."""
    candidates = [s.strip() for leaf in leaves for s in SENTENCE_END.split(leaf) if len(s.split()) >= 3]
    scored = [(sum(weights.get(t, 0.0) for t in analyzer.terms(s)), i) for i, s in enumerate(candidates)]
    best = sorted(i for score, i in sorted(scored, reverse=True)[:sentences] if score > 0)
    return " … ".join(candidates[i] for i in best)
