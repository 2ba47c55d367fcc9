"""Users' corrections of a crawl's critic, from BINGO!'s reviser (thesis §2.4.13): labelled pages
join the training examples (of their topics, or as negatives when "not relevant"), excluded
terms are not learnt from, and indicator terms restrict what a topic accepts (§2.3.2, "combining
classification and expert Web search": a page holds N_w of them or is rejected). The reviser's retraining and the crawl's own retraining with
archetypes apply them the same way, so what a reviewer says reaches the crawl that runs."""

from __future__ import annotations

import copy
from dataclasses import dataclass

from focuscrawl.learn import Critic
from focuscrawl.text import TOKEN, Analyzer

RELEVANT = "relevant"  # a one-topic crawl's label of a page that is on its topic
NOT_RELEVANT = ""  # the root of the taxonomy: on none of its topics


@dataclass
class Corrections:
    labels: dict[int, str]  # url id -> topic path, RELEVANT or NOT_RELEVANT
    excluded: set[str]  # terms (the critic's stems)
    indicators: dict[str, set[str]]  # topic path ('' in a one-topic crawl) -> terms

    @classmethod
    def of(cls, marks) -> Corrections:
        """What the crawl's users said (a :class:`~focuscrawl.store.UserMarks`; None: a crawl
        shared by workers, whose users mark pages in a snapshot, not in the crawl)."""
        if marks is None:
            return cls({}, set(), {})
        return cls(marks.labels(), marks.excluded_terms(), marks.indicators())

    def examples(self, critic, store) -> tuple[dict[str, dict[str, str]], list[str]]:
        """The labelled pages as training examples: positives by topic (url -> text; all of them
        under '' for a one-topic critic) and the "not relevant" ones as negatives, without the
        excluded terms. ``store`` gives texts and URLs (``texts_of``, ``urls_of``)."""
        analyzer = analyzer_of(critic)
        texts = {url_id: without_terms(text, self.excluded, analyzer)
                 for url_id, text in store.texts_of(list(self.labels)).items()}
        urls = store.urls_of(list(texts))
        positives: dict[str, dict[str, str]] = {}
        for url_id, label in self.labels.items():
            if label != NOT_RELEVANT and url_id in texts:
                positives.setdefault("" if isinstance(critic, Critic) else label, {})[urls[url_id]] = texts[url_id]
        negatives = [texts[url_id] for url_id, label in self.labels.items() if label == NOT_RELEVANT and url_id in texts]
        return positives, negatives

    def contradicted(self, critic, topic: str, url_id: int) -> bool:
        """Whether a reviewer said the page is not on ``topic`` (an archetype it must not be)."""
        label = self.labels.get(url_id)
        return label is not None and (label == NOT_RELEVANT or (not isinstance(critic, Critic) and label != topic))

    def refit(self, critic, archetypes: dict[str, dict[str, str]], negatives: list[str],
              labelled: dict[str, dict[str, str]] | None = None, labelled_negatives: list[str] = (),
              keep: bool = False, warn=print):
        """The critic refitted (its ``refit``) on ``archetypes`` and ``negatives`` and the labelled
        pages, without the excluded terms and with the indicators. Its original examples keep
        the excluded terms in its memory: a term no longer excluded is learnt again at the next
        retraining. With ``keep`` (the learning phase's training basis) the archetypes and
        negatives join the originals for good, first; the corrections stay corrections."""
        if keep:
            critic, archetypes, negatives = critic.refit(archetypes, negatives, keep=True, warn=warn), {}, []
        labelled = labelled or {}
        positives = {topic: {**archetypes.get(topic, {}), **labelled.get(topic, {})} for topic in {*archetypes, *labelled}}
        negatives = [*negatives, *labelled_negatives]
        if self.excluded and isinstance(critic, Critic):
            originals, analyzer = critic.examples_, analyzer_of(critic)
            stripped = copy.copy(critic)
            stripped.examples_ = tuple([without_terms(text, self.excluded, analyzer) for text in texts]
                                       for texts in originals)
            retrained = stripped.refit(positives, negatives, warn=warn)
            retrained.examples_ = originals
        else:
            retrained = critic.refit(positives, negatives, warn=warn)
        return retrained.with_indicators(self.indicators)


def analyzer_of(critic) -> Analyzer:
    """The text pipeline the critic's terms come from (its language and stemming)."""
    return getattr(critic, "analyzer", None) or Analyzer(critic.language, critic.stem)


def without_terms(text: str, excluded: set[str], analyzer: Analyzer) -> str:
    """The text without the words whose terms are ``excluded`` (the critic cannot learn them)."""
    if not excluded:
        return text
    stems: dict[str, bool] = {}

    def kept(word) -> str:
        found = word.group()
        if found not in stems:
            terms = analyzer.terms(found)
            stems[found] = bool(terms) and terms[0] in excluded
        return "" if stems[found] else found

    return TOKEN.sub(kept, text)
