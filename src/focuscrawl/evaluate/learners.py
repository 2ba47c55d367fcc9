"""``focuscrawl learners compare``: Pant & Srinivasan §7.4 on the test web's topics — 5-fold
cross-validated accuracy of every learner (Fig. 10), its training time (Table III) and the time
to classify one page the way the crawler does, one call per page (Table IV).

Per topic, the positives are a random sample of the topic's pages and the negatives twice as
many other pages (Pant §5's 1:2); folds are stratified and the same for every learner.
"""

from __future__ import annotations

import random
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import StratifiedKFold

from focuscrawl.config import ConfigError
from focuscrawl.evaluate import metrics
from focuscrawl.evaluate.harness import read_topics
from focuscrawl.learn import LEARNERS, Critic
from focuscrawl.testweb.groundtruth import Truth
from focuscrawl.testweb.webmap import WebMap
from focuscrawl.topics import read_file_text


def topic_examples(webmap: WebMap, truth: Truth, topic: str, positives: int, rng: random.Random) -> tuple[list[str], list[int]]:
    """Texts and labels: ``positives`` topic pages and twice as many others, empty pages left out."""
    members = sorted(truth.topics[topic])
    others = sorted(set(truth.pages) - truth.topics[topic])
    chosen = [(p, 1) for p in rng.sample(members, min(positives, len(members)))]
    chosen += [(p, 0) for p in rng.sample(others, min(2 * len(chosen), len(others)))]
    texts, labels = [], []
    for path, label in chosen:
        text = read_file_text(webmap.root / path)
        if text.strip():
            texts.append(text)
            labels.append(label)
    return texts, labels


def cross_validate(name: str, texts: list[str], labels: list[int], folds: int, seed: int, **options) -> dict:
    """Accuracy, seconds to train on a fold's training part, and milliseconds per page classified."""
    y = np.array(labels)
    correct, train_seconds, classify_seconds = 0, [], 0.0
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=seed).split(texts, y):
        positives = [texts[i] for i in train if y[i] == 1]
        negatives = [texts[i] for i in train if y[i] == 0]
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            critic = Critic(name, **options).fit(positives, negatives)
        train_seconds.append(time.perf_counter() - started)
        started = time.perf_counter()
        scores = [critic.predict_proba([texts[i]])[0] for i in test]  # one page per call, as in the crawl
        classify_seconds += time.perf_counter() - started
        correct += sum((score >= 0.5) == (y[i] == 1) for score, i in zip(scores, test))
    return {"accuracy": correct / len(texts), "train_seconds": float(np.mean(train_seconds)),
            "classify_ms": 1000 * classify_seconds / len(texts)}


def compare(testweb: Path, topics_file: Path, learners: list[str] | None = None, positives: int = 100,
            folds: int = 5, only_topics: list[str] | None = None, seed: int = 0, progress=None, **options) -> dict:
    """Every learner on every topic; per learner the means ± standard errors over topics."""
    learners = learners or list(LEARNERS)
    unknown = [name for name in learners if name not in LEARNERS]
    if unknown:
        raise ConfigError(f"--learners: unknown {', '.join(unknown)} (known: {', '.join(LEARNERS)})")
    definitions = read_topics(topics_file, only_topics)
    webmap = WebMap(testweb)
    truth = Truth(webmap, definitions)
    rng = random.Random(seed)
    per_topic: dict[str, dict[str, dict]] = {name: {} for name in learners}
    for topic in truth.topics:
        texts, labels = topic_examples(webmap, truth, topic, positives, rng)
        if min(labels.count(1), labels.count(0)) < folds:
            raise ConfigError(f"topic {topic}: fewer than {folds} readable examples of a class for {folds}-fold validation")
        for name in learners:
            per_topic[name][topic] = cross_validate(name, texts, labels, folds, seed, **options)
            if progress:
                progress(name, topic, per_topic[name][topic])
    table = []
    for name in learners:
        row = {"learner": name}
        for key in ("accuracy", "train_seconds", "classify_ms"):
            mean, stderr = metrics.mean_stderr([result[key] for result in per_topic[name].values()])
            row[key], row[f"{key}_stderr"] = round(mean, 4), round(stderr, 4)
        row["topics"] = {topic: {k: round(v, 4) for k, v in result.items()} for topic, result in per_topic[name].items()}
        table.append(row)
    return {"positives_per_topic": positives, "folds": folds, "learners": table}
