"""The reviser (BINGO! thesis §2.4.13): each topic's best pages by confidence, authority or hub
for a person to check; a page found in the wrong place is relabelled to another topic or to
"not relevant" (the root of the taxonomy). The reviewed sample estimates each topic's precision,
and the labelled pages join the critic's training base: retraining (on a crawl no process is
running) refits the crawl's critic with them, saves it in the crawl — a resumed crawl judges
with it — and judges every stored page again, reporting which pages moved."""

from __future__ import annotations

import pickle
from collections import Counter
from pathlib import Path

from focuscrawl.beside import rejudge
from focuscrawl.corrections import RELEVANT, Corrections, analyzer_of
from focuscrawl.crawler import CRITIC_MODEL, crawl_critic
from focuscrawl.learn import ModelError
from focuscrawl.search.query import quoted
from focuscrawl.search.seeds import classifier_terms
from focuscrawl.store import SearchIndex, Store
from focuscrawl.text import SENTENCE_END

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
    """Refit the crawl's critic with the reviewers' corrections (labelled pages, excluded terms,
    indicators), save it in the crawl, judge every stored page again."""
    store = Store(directory, warc=False)  # takes the crawl's lock: not while it is crawled
    try:
        critic = crawl_critic(directory)
        if critic is None:
            raise ModelError(f"{directory}: this crawl has no critic to retrain")
        corrections = Corrections.of(store.search.marks)
        if not corrections.labels and not corrections.excluded and not corrections.indicators:
            raise ModelError(f"{directory}: no page has been reviewed and no term marked yet")
        positives, negatives = corrections.examples(critic, store)
        retrained = corrections.refit(critic, {}, [], positives, negatives)
        before = {url_id: (relevance, topic) for url_id, relevance, topic, _ in store.queries.judged_topics()}
        with store.transaction():
            store.save_model(CRITIC_MODEL, pickle.dumps(retrained, protocol=pickle.HIGHEST_PROTOCOL))
            judged = rejudge(store.queries, retrained)
        moved = [{"url_id": url_id, "before": before[url_id], "after": (relevance, topic)}
                 for relevance, topic, _, url_id in judged
                 if url_id in before and _moved(before[url_id], (relevance, topic))]
        moved.sort(key=lambda m: -abs((m["after"][0] or 0) - (m["before"][0] or 0)))
        details = store.search.details([m["url_id"] for m in moved[:moved_shown]])
        return {"positives": sum(map(len, positives.values())), "negatives": len(negatives), "judged": len(judged),
                "indicators": {topic: sorted(terms) for topic, terms in corrections.indicators.items()},
                "moved": len(moved), "largest_moves": [{**details.get(m["url_id"], {}), **m} for m in moved[:moved_shown]]}
    finally:
        store.close()


def feature_space(directory: Path, index: SearchIndex, topic: str | None = None, count: int = 40) -> list[dict]:
    """The topic's best terms by Mutual Information (the critic's feature selection, §2.3.2;
    the reviser's Figure 2.24), each with a sentence of a stored page that holds it."""
    critic = crawl_critic(directory)
    if critic is None:
        raise ModelError(f"{directory}: this crawl has no critic")
    terms = classifier_terms(critic, topic, count)
    weights = critic.child(topic).weights if topic else critic.preview_weights_
    analyzer, excluded = analyzer_of(critic), index.marks.excluded_terms()
    indicators = index.marks.indicators().get(topic or "", set())
    found = []
    for term in terms:
        context = ""
        matches = index.matches(quoted(term), 1)
        if matches:
            text = index.texts([matches[0][0]])[matches[0][0]][1]
            context = next((sentence for sentence in SENTENCE_END.split(text)
                            if term in analyzer.terms(sentence) and len(sentence) < 400), "")
        found.append({"term": term, "weight": weights[term], "context": context, "excluded": term in excluded,
                      "indicator": term in indicators})
    return found


def _moved(before: tuple[float | None, str | None], after: tuple[float | None, str | None]) -> bool:
    """Whether a page changed sides: accepted or rejected (0.5), or another topic."""
    return ((before[0] or 0) >= 0.5) != ((after[0] or 0) >= 0.5) or before[1] != after[1]
