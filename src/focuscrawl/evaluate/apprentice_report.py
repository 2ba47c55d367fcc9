"""``focuscrawl apprentice report DIR``: the diagnostics of Chakrabarti et al. 2002 §3.4 and §3.7
from a finished crawl, re-read from its WARC archive (so any d_max can be tried):

- Fig. 6: accuracy of the apprentice on held-out (u, v) instances, for low and high targets and
  overall, as d_max grows;
- Fig. 7: the same with plain text near the link (offsets dropped) instead of ⟨t, d⟩;
- Fig. 8: the average information gain of the ⟨t, d⟩ features found at each offset d;
- Fig. 13a: the distribution of the priorities of the URLs still queued, as best-first gives them
  (the parent's score) and as the crawl's apprentice gives them (blended, as the crawl used them);
- and, beyond the paper, the weights the crawl's blend gave the apprentice and the source page's score.

Instances are the links (u, v) whose both ends were fetched, labelled by the critic's score of
v; pages u are split 70/30 into training and held-out by a hash of their URL.
"""

from __future__ import annotations

import json
import zlib
from contextlib import closing
from pathlib import Path

import numpy as np
from scipy import sparse

from focuscrawl.apprentice import HIGH, Apprentice, crawl_instances
from focuscrawl.config import load_config
from focuscrawl.apprentice_loop import rescored
from focuscrawl.store import CrawlDir, InstanceReader, Queries, open_existing
from focuscrawl.text import Analyzer, information_gain

WIDEST = 8  # the largest d_max tried


def _instances(directory: Path, analyzer: Analyzer) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """(features at d_max = WIDEST, critic score of the target, held-out flag) of every link
    between two fetched pages."""
    features, labels, sources, _ = crawl_instances(directory, analyzer, WIDEST)
    held_out = np.array([zlib.crc32(url.encode()) % 10 < 3 for url in sources], dtype=bool)
    return features, labels, held_out


def _within(features: list[np.ndarray], d_max: int, plain: bool = False) -> list[np.ndarray]:
    """Features restricted to |d| ≤ d_max; ``plain`` drops the offset (text near the link)."""
    width = 2 * WIDEST + 1
    kept = []
    for f in features:
        f = f[np.abs(f % width - WIDEST) <= d_max]
        kept.append(f // width * width if plain else f)
    return kept


def _accuracy(features, labels, held_out, d_max: int, plain: bool) -> dict:
    window = _within(features, d_max, plain)
    apprentice = Apprentice(WIDEST)
    split = float(np.median(labels))
    apprentice.partial_fit([f for f, h in zip(window, held_out) if not h], labels[~held_out], threshold=split)
    if not apprentice.trained:
        return {"d_max": d_max, "high": None, "low": None, "average": None}
    test = [f for f, h in zip(window, held_out) if h]
    predicted = apprentice.predict_proba(test) >= HIGH
    actual = labels[held_out] > split if 0 < (labels > split).sum() < len(labels) else labels[held_out] >= split

    def share(mask: np.ndarray) -> float | None:
        return float(np.mean(predicted[mask] == actual[mask])) if mask.any() else None

    return {"d_max": d_max, "high": share(actual), "low": share(~actual), "average": share(np.ones_like(actual))}


def _information_gain_by_offset(features, labels) -> dict[int, float]:
    width = 2 * WIDEST + 1
    rows = np.repeat(np.arange(len(features)), [len(f) for f in features])
    ids = np.concatenate(features) if features else np.zeros(0, dtype=np.int64)
    if not len(ids):
        return {}
    distinct, columns = np.unique(ids, return_inverse=True)  # hashed ids: numbered densely here
    present = sparse.csr_matrix((np.ones(len(columns)), (rows, columns)), shape=(len(features), len(distinct)))
    present.data[:] = 1
    df = np.asarray(present.sum(axis=0)).ravel()
    high = labels >= np.median(labels)
    df_high = np.asarray(present[high].sum(axis=0)).ravel()
    seen = np.flatnonzero(df)
    gain = information_gain(df[seen], df_high[seen], int(high.sum()), len(labels))
    offsets = distinct[seen] % width - WIDEST
    return {int(d): float(gain[offsets == d].mean()) for d in range(-WIDEST, WIDEST + 1) if np.any(offsets == d)}


def _saved_apprentice_figures(directory: Path) -> tuple[dict | None, dict | None]:
    """Fig. 13a and the blend's weights, from the apprentice saved with the crawl (loaded once)."""
    with closing(open_existing(directory)) as db:
        saved = Queries(db).load_model("apprentice")
        apprentice = Apprentice.loads(saved) if saved else None
        if apprentice is not None and apprentice.needs_rehash:  # converted when the crawl is resumed
            apprentice = None
    return _priorities(directory, apprentice), _blend(apprentice)


def _blend(apprentice: Apprentice | None) -> dict | None:
    """How the crawl's blend weighs the apprentice's log-odds against the logit of the source
    page's critic score, and on how many held-out links (None: the paper's apprentice alone)."""
    if apprentice is None or apprentice.blend is None or not apprentice.blend.fitted:
        return None
    weights = apprentice.blend.weights_
    return {"apprentice": float(weights[0]), "source_page": float(weights[1]), "intercept": float(weights[2]),
            "held_out_links": float(apprentice.blend.counts_.sum())}


def _priorities(directory: Path, apprentice: Apprentice | None) -> dict | None:
    if apprentice is None or not apprentice.trained:
        return None
    reader = InstanceReader(directory)
    with reader.snapshot():
        baseline = reader.queries.queued_parent_scores()
        score = None if apprentice.ready else (lambda windows, _: apprentice.predict_proba(windows))
        best, _ = rescored(reader, apprentice, score=score)
    bins = np.linspace(0, 1, 11)
    return {"bins": bins.tolist(),
            "best_first": np.histogram([p or 0.0 for p in baseline], bins)[0].tolist(),
            "apprentice": np.histogram(best, bins)[0].tolist()}


def apprentice_report(directory: Path, out: Path | None = None) -> dict:
    directory = Path(directory)
    out = Path(out or CrawlDir(directory).apprentice_report)
    out.mkdir(parents=True, exist_ok=True)
    config = load_config(CrawlDir(directory).config)
    features, labels, held_out = _instances(directory, Analyzer(config.text.language, config.text.stem))
    priorities, blend = _saved_apprentice_figures(directory)
    report = {
        "instances": len(labels), "median_score": float(np.median(labels)), "held_out": int(held_out.sum()),
        "accuracy_by_d_max": [_accuracy(features, labels, held_out, d, plain=False) for d in range(WIDEST + 1)],
        "plain_text_accuracy_by_d_max": [_accuracy(features, labels, held_out, d, plain=True) for d in range(WIDEST + 1)],
        "information_gain_by_offset": _information_gain_by_offset(features, labels) if features else {},
        "frontier_priorities": priorities,
        "blend": blend,
    } if len(labels) and held_out.any() and (~held_out).any() else {"instances": len(labels)}
    (out / "apprentice-report.json").write_text(json.dumps(report, indent=1))
    if "accuracy_by_d_max" in report:
        _plots(report, out)
    return report


def _plots(report: dict, out: Path) -> None:
    from focuscrawl.evaluate.report import _pyplot

    plt = _pyplot()
    figure, axes = plt.subplots(1, 3, figsize=(15, 4))
    for key, style in (("high", "-o"), ("low", "-s"), ("average", "-^")):
        axes[0].plot([r["d_max"] for r in report["accuracy_by_d_max"]], [r[key] for r in report["accuracy_by_d_max"]],
                     style, label=key)
    axes[0].set(title="Apprentice accuracy by d_max (Fig. 6)", xlabel="d_max", ylabel="held-out accuracy")
    axes[0].legend()
    for key, label in (("accuracy_by_d_max", "⟨t, d⟩"), ("plain_text_accuracy_by_d_max", "plain text")):
        axes[1].plot([r["d_max"] for r in report[key]], [r["average"] for r in report[key]], "-o", label=label)
    axes[1].set(title="Offsets vs plain text (Fig. 7)", xlabel="d_max", ylabel="held-out accuracy")
    axes[1].legend()
    gain = report["information_gain_by_offset"]
    axes[2].bar([int(d) for d in gain], list(gain.values()))
    axes[2].set(title="Information gain by offset (Fig. 8)", xlabel="d", ylabel="mean IG of ⟨t, d⟩")
    figure.tight_layout()
    figure.savefig(out / "apprentice-features.png", dpi=100)
    plt.close(figure)
    if report["frontier_priorities"]:
        priorities = report["frontier_priorities"]
        figure, axis = plt.subplots(figsize=(6, 4))
        centres = [(a + b) / 2 for a, b in zip(priorities["bins"], priorities["bins"][1:])]
        axis.bar([c - 0.02 for c in centres], priorities["best_first"], width=0.04, label="best-first")
        axis.bar([c + 0.02 for c in centres], priorities["apprentice"], width=0.04, label="apprentice")
        axis.set(title="Priorities of queued URLs (Fig. 13a)", xlabel="priority", ylabel="URLs")
        axis.legend()
        figure.tight_layout()
        figure.savefig(out / "frontier-priorities.png", dpi=100)
        plt.close(figure)
