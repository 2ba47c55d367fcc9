"""BINGO!'s query syntax (thesis §2.4.12), turned into an FTS5 query: ``word`` is required,
``-word`` excluded, ``word%`` a prefix, ``"a phrase"`` a phrase (``-"a phrase"`` excludes it).
Queries are conjunctive. Every word reaches FTS5 quoted, so nothing a user types is read as
FTS5's own syntax."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TERM = re.compile(r'(-?)"([^"]*)"?|(-?)([^\s"]+)')
WORD = re.compile(r"[^\W_]+")  # what the index's tokenizer (unicode61) keeps of a word


class QueryError(ValueError):
    """A query that cannot be searched, with what is wrong in one line."""


@dataclass
class ParsedQuery:
    required: list[str] = field(default_factory=list)  # words and phrases (a phrase: several words)
    excluded: list[str] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    excluded_prefixes: list[str] = field(default_factory=list)

    def match(self) -> str:
        """The FTS5 query: the required parts ANDed, each excluded part NOT-ed."""
        positive = [quoted(p) for p in self.required] + [quoted(p) + " *" for p in self.prefixes]
        negative = [quoted(p) for p in self.excluded] + [quoted(p) + " *" for p in self.excluded_prefixes]
        query = " AND ".join(positive)
        for part in negative:
            query = f"({query}) NOT {part}"
        return query

    def parts(self) -> tuple[list[str], list[str]]:
        """The required and the excluded parts, each an FTS5 query of its own."""
        return ([quoted(p) for p in self.required] + [quoted(p) + " *" for p in self.prefixes],
                [quoted(p) for p in self.excluded] + [quoted(p) + " *" for p in self.excluded_prefixes])

    def surface_terms(self) -> list[str]:
        """The required words and phrases as typed (lower case), for a search on surface words."""
        return [p.lower() for p in self.required]

    def combined(self, other: ParsedQuery) -> ParsedQuery:
        """Both queries at once (search within results)."""
        return ParsedQuery(self.required + other.required, self.excluded + other.excluded,
                           self.prefixes + other.prefixes, self.excluded_prefixes + other.excluded_prefixes)


def parse_query(text: str, stop_words: frozenset[str] = frozenset()) -> ParsedQuery:
    """Read a query in BINGO!'s syntax; raises :class:`QueryError` if nothing is required. A
    single word that is a stop word is left out, as BINGO!'s features leave it out (a phrase
    keeps its stop words)."""
    query, dropped = ParsedQuery(), []
    for minus_phrase, phrase, minus, token in TERM.findall(text):
        if phrase or minus_phrase:
            words = " ".join(WORD.findall(phrase))
            if words:
                (query.excluded if minus_phrase else query.required).append(words)
            continue
        prefix = token.endswith("%") or token.endswith("*")
        words = WORD.findall(token)
        if not words:
            continue
        if prefix and len(words) == 1:
            (query.excluded_prefixes if minus else query.prefixes).append(words[0])
        elif len(words) > 1 or words[0].lower() not in stop_words:  # "e-mail", "tcp/ip": the words in a row
            (query.excluded if minus else query.required).append(" ".join(words))
        else:
            dropped.append(words[0])
    if not query.required and not query.prefixes and dropped:
        raise QueryError(f"query {text.strip()!r} has only stop words: quote them as a phrase, or add a word")
    if not query.required and not query.prefixes:
        raise QueryError(f"query {text.strip()!r} needs at least one word that is not excluded"
                         if text.strip() else "the query is empty: type a word")
    return query


def quoted(words: str) -> str:
    """Words as one FTS5 string (a phrase): nothing in them is read as FTS5's syntax."""
    return '"' + words.replace('"', '""') + '"'
