"""Text to terms: tokenizer, stop words, Snowball stemming, term frequencies, language check."""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

import Stemmer
import stop_words
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
