"""The reviser (BINGO! thesis §2.4.13): each topic's best pages by confidence, authority or hub
for a person to check; a page found in the wrong place is relabelled to another topic or to
"not relevant" (the root of the taxonomy). The reviewed sample estimates each topic's precision,
and the labelled pages join the critic's training base: retraining (on a crawl no process is
running) refits the crawl's critic with them, saves it in the crawl — a resumed crawl judges
with it — and judges every stored page again, reporting which pages moved."""

from __future__ import annotations

import copy
import pickle
from collections import Counter
from pathlib import Path

from focuscrawl.crawler import CRITIC_MODEL, crawl_critic
from focuscrawl.focus import rejudge
from focuscrawl.learn import Critic, ModelError
from focuscrawl.search.query import quoted
from focuscrawl.search.seeds import classifier_terms
from focuscrawl.store import SearchIndex, Store
from focuscrawl.text import SENTENCE_END, TOKEN, Analyzer

RELEVANT = "relevant"  # a one-topic crawl's label of a page that is on its topic
NOT_RELEVANT = ""  # the root of the taxonomy: on none of its topics
REVIEW_ORDERS = ("confidence", "authority", "hub")


def review_list(index: SearchIndex, topic: str | None, by: str = "confidence", count: int = 20) -> list[dict]:
    """A topic's best ``count`` pages by ``by``, with what the result list shows and their labels."""
    if by not in REVIEW_ORDERS:
        raise ValueError(f"order by one of {', '.join(REVIEW_ORDERS)}, not {by!r}")
    rows = index.for_review(topic, by, count)
    details = index.details([url_id for url_id, *_ in rows])
    return [{**details[url_id], "topic": page_topic, "score": score, "label": label}
            for url_id, page_topic, score, label in rows if url_id in details]


def estimated_precision(index: SearchIndex) -> dict[str, dict]:
    """Per topic the reviewed pages, those confirmed, and their share: the crawl's precision as
    the reviewed sample estimates it (BINGO! Figure 2.23)."""
    reviewed, confirmed = Counter(), Counter()
    for topic, label in index.marks.reviewed():
        name = topic or RELEVANT
        reviewed[name] += 1
        confirmed[name] += label == name
    return {name: {"reviewed": reviewed[name], "confirmed": confirmed[name],
                   "precision": round(confirmed[name] / reviewed[name], 3)} for name in sorted(reviewed)}


def retrain(directory: Path, moved_shown: int = 25) -> dict:
    """Refit the crawl's critic with the labelled pages (positives of their topics; 'not
    relevant' ones as negatives), save it in the crawl, judge every stored page again."""
    store = Store(directory, warc=False)  # takes the crawl's lock: not while it is crawled
    try:
        critic = crawl_critic(directory)
        if critic is None:
            raise ModelError(f"{directory}: this crawl has no critic to retrain")
        labels = store.search.marks.labels()
        if not labels:
            raise ModelError(f"{directory}: no page has been reviewed yet")
        excluded = store.search.marks.excluded_terms()
        analyzer = analyzer_of(critic)
        texts = {url_id: without_terms(text, excluded, analyzer) for url_id, text in store.texts_of(list(labels)).items()}
        urls = store.urls_of(list(labels))
        positives: dict[str, dict[str, str]] = {}
        for url_id, label in labels.items():
            if label != NOT_RELEVANT and url_id in texts:
                positives.setdefault("" if isinstance(critic, Critic) else label, {})[urls[url_id]] = texts[url_id]
        negatives = [texts[url_id] for url_id, label in labels.items() if label == NOT_RELEVANT and url_id in texts]
        retrained = _refit(critic, positives, negatives, excluded)
        before = store.queries.judgements_of([url_id for url_id, _ in store.queries.judged_texts()])
        with store.transaction():
            store.save_model(CRITIC_MODEL, pickle.dumps(retrained, protocol=pickle.HIGHEST_PROTOCOL))
            judged = rejudge(store.queries, retrained)
        moved = [{"url_id": url_id, "before": before[url_id], "after": (relevance, topic)}
                 for relevance, topic, _, url_id in judged
                 if url_id in before and _moved(before[url_id], (relevance, topic))]
        moved.sort(key=lambda m: -abs((m["after"][0] or 0) - (m["before"][0] or 0)))
        details = store.search.details([m["url_id"] for m in moved[:moved_shown]])
        return {"positives": sum(map(len, positives.values())), "negatives": len(negatives), "judged": len(judged),
                "moved": len(moved), "largest_moves": [{**details.get(m["url_id"], {}), **m} for m in moved[:moved_shown]]}
    finally:
        store.close()


def _refit(critic, positives: dict[str, dict[str, str]], negatives: list[str], excluded: set[str]):
    """The critic refitted with the labelled pages (all labels every time: they replace the last
    ones) beside its original examples, which keep the excluded terms only in its memory: a
    term no longer excluded is learnt again at the next retraining."""
    if not excluded or not isinstance(critic, Critic):
        return critic.refit(positives, negatives)
    originals = critic.examples_
    stripped = copy.copy(critic)
    analyzer = analyzer_of(critic)
    stripped.examples_ = tuple([without_terms(text, excluded, analyzer) for text in texts] for texts in originals)
    retrained = stripped.refit(positives, negatives)
    retrained.examples_ = originals
    return retrained


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


def feature_space(directory: Path, index: SearchIndex, topic: str | None = None, count: int = 40) -> list[dict]:
    """The topic's best terms by Mutual Information (the critic's feature selection, §2.3.2;
    the reviser's Figure 2.24), each with a sentence of a stored page that holds it."""
    critic = crawl_critic(directory)
    if critic is None:
        raise ModelError(f"{directory}: this crawl has no critic")
    terms = classifier_terms(critic, topic, count)
    weights = critic.child(topic).weights if topic else critic.preview_weights_
    analyzer, excluded = analyzer_of(critic), index.marks.excluded_terms()
    found = []
    for term in terms:
        context = ""
        matches = index.matches(quoted(term), 1)
        if matches:
            text = index.texts([matches[0][0]])[matches[0][0]][1]
            context = next((sentence for sentence in SENTENCE_END.split(text)
                            if term in analyzer.terms(sentence) and len(sentence) < 400), "")
        found.append({"term": term, "weight": weights[term], "context": context, "excluded": term in excluded})
    return found


def _moved(before: tuple[float | None, str | None], after: tuple[float | None, str | None]) -> bool:
    """Whether a page changed sides: accepted or rejected (0.5), or another topic."""
    return ((before[0] or 0) >= 0.5) != ((after[0] or 0) >= 0.5) or before[1] != after[1]
