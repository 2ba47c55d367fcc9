"""Plots (Pant Fig. 7, Chakrabarti Fig. 10, Pant Fig. 11) and ``report.md`` from results.json."""

from __future__ import annotations

import math
from pathlib import Path

from focuscrawl.evaluate import metrics


def _pyplot():
    """matplotlib, headless; imported on first plot so the CLI starts fast."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(results: dict, name: str, key: str) -> tuple[list[float], list[float], list[float]]:
    """Mean and standard error over topics of ``key`` at relative positions of each topic's budget,
    so topics with different budgets share one axis (fraction of the budget fetched)."""
    topics = results["crawlers"][name]["topics"]
    xs, means, errors = [], [], []
    for step in range(1, 21):
        fraction = step / 20
        values = []
        for topic in topics.values():
            curve = topic["curve"]
            if not curve:
                continue
            point = metrics.at_pages(curve, math.ceil(fraction * curve[-1]["pages"]))
            if point and point[key] is not None:
                values.append(point[key])
        if values:
            mean, error = metrics.mean_stderr(values)
            xs.append(fraction)
            means.append(mean)
            errors.append(error)
    return xs, means, errors


def plot_curves(results: dict, out: Path) -> list[Path]:
    plt = _pyplot()
    paths = []
    for key, label in (("harvest_rate", "harvest rate (ground truth)"), ("target_recall", "target recall"),
                       ("loss_rate", "loss rate (ground truth)")):
        figure, axis = plt.subplots(figsize=(7, 4.5))
        for name, entry in results["crawlers"].items():
            xs, means, errors = _series(results, name, key)
            style = {"linestyle": "--", "alpha": 0.7} if entry["reference"] else {}
            axis.errorbar(xs, means, yerr=errors, label=name, capsize=2, **style)
        axis.set_xlabel("fraction of the budget fetched")
        axis.set_ylabel(label)
        axis.set_ylim(0, 1)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
        axis.set_title(f"{label}, mean ± s.e. over {len(results['topics'])} topics")
        path = out / f"{key}.png"
        figure.tight_layout()
        figure.savefig(path, dpi=110)
        plt.close(figure)
        paths.append(path)
    return paths


def plot_scores(results: dict, out: Path) -> Path:
    """Distribution of the critic's page scores per crawler (Pant Fig. 11)."""
    plt = _pyplot()
    names = [n for n, e in results["crawlers"].items() if not e["reference"]]
    figure, axes = plt.subplots(1, max(1, len(names)), figsize=(3.2 * max(1, len(names)), 3), squeeze=False)
    for axis, name in zip(axes[0], names):
        scores = [s for topic in results["crawlers"][name]["topics"].values() for s in topic["scores"]]
        axis.hist(scores, bins=20, range=(0, 1))
        axis.set_title(name, fontsize=9)
        axis.set_xlabel("Pr(relevant | page)")
    figure.tight_layout()
    path = out / "scores.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_topic_losses(results: dict, out: Path) -> Path:
    """Loss rate against pages fetched, one panel per topic (Chakrabarti Fig. 10), references dashed."""
    plt = _pyplot()
    topics = list(results["topics"])
    columns = max(1, min(4, len(topics)))
    rows = max(1, math.ceil(len(topics) / columns))
    figure, axes = plt.subplots(rows, columns, figsize=(3.3 * columns, 2.5 * rows), squeeze=False)
    for axis, topic in zip(axes.flat, topics):
        for name, entry in results["crawlers"].items():
            curve = entry["topics"].get(topic, {}).get("curve") or []
            style = {"linestyle": "--", "alpha": 0.7} if entry["reference"] else {}
            axis.plot([p["pages"] for p in curve], [p["loss_rate"] for p in curve], label=name, **style)
        axis.set_title(topic, fontsize=8)
        axis.set_ylim(0, 1)
        axis.tick_params(labelsize=7)
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(topics):]:
        axis.axis("off")
    axes.flat[0].legend(fontsize=6)
    figure.supxlabel("pages fetched", fontsize=9)
    figure.supylabel("loss rate (ground truth)", fontsize=9)
    figure.tight_layout()
    path = out / "loss_by_topic.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _loss_cut_lines(results: dict) -> list[str]:
    """The per-topic loss table of each crawler against best-first with its critic, with the oracle's possible cut."""
    from focuscrawl.evaluate.harness import LOSS_REFERENCE, in_regime

    percent = lambda v: "—" if v is None else f"{v:+.0%}"  # noqa: E731
    lines = []
    for name, cuts in results.get("loss_cuts", {}).items():
        baseline = cuts.get("against", "best-first-svm")  # results written before crawlers had their own
        elsewhere = cuts["median_gap_closed_elsewhere"]
        reference = in_regime(LOSS_REFERENCE, name)
        lines += ["", f"## Loss rate: {name} against {baseline} ({reference}: the most a link learner could cut)", "",
                  f"Median cut where {reference} shows at least {cuts['possible_at_least']:.0%} possible"
                  f" ({cuts['topics_possible']} topics):"
                  f" {percent(cuts['median_cut_where_possible'])}; median share of the gap closed on the others:"
                  f" {'—' if elsewhere is None else f'{elsewhere:+.2f}'}.", "",
                  f"The last column: the share of {name}'s pages whose label as an apprentice learns it (the"
                  f" critic's score above the crawl's median) is the truth.", "",
                  f"| topic | loss {baseline} | loss {name} | loss {reference} | cut | possible | gap closed"
                  f" | critic's labels right |",
                  "|---|---|---|---|---|---|---|---|"]
        for topic, t in cuts["topics"].items():
            gap = "—" if t["gap_closed"] is None else f"{t['gap_closed']:+.2f}"
            right = results["crawlers"][name]["topics"][topic].get("critic_labels_right")
            lines.append(f"| {topic} | {t['baseline']:.3f} | {t['loss']:.3f} | {t['reference']:.3f} | {percent(t['cut'])}"
                         f" | {percent(t['possible'])} | {gap} | {'—' if right is None else f'{right:.0%}'} |")
    return lines


def _budget_lines(results: dict, baseline: str = "bfs") -> list[str]:
    """Where the budget went on each topic where a crawler's harvest fell below breadth-first's
    (in the same regime): the hosts that took most of its pages and of breadth-first's."""
    from focuscrawl.evaluate.harness import in_regime

    crawlers = results["crawlers"]

    def harvest(name: str, topic: str) -> float | None:
        return crawlers.get(name, {}).get("topics", {}).get(topic, {}).get("harvest_rate")

    below: dict[tuple[str, str], list[str]] = {}  # (topic, breadth-first of the regime): the crawlers below it
    for topic in results["topics"]:
        for name in crawlers:
            theirs = in_regime(baseline, name)
            ours, breadth_first = harvest(name, topic), harvest(theirs, topic)
            if name != theirs and None not in (ours, breadth_first) and ours < breadth_first:
                below.setdefault((topic, theirs), []).append(name)
    if not below:
        return []
    lines = ["", f"## Where the budget went, where a crawler fell below {baseline}", "",
             "The hosts that took most of each crawl's pages (its first run): pages, true harvest, the critic's"
             " mean score.", ""]
    for (topic, theirs), names in below.items():
        for who in [*names, theirs]:
            result = crawlers[who]["topics"][topic]
            hosts = "; ".join(f"`{h['host']}` {h['pages']} pages, harvest {h['harvest_rate']:.2f}, critic "
                              + ("—" if h["mean_score"] is None else f"{h['mean_score']:.2f}")
                              for h in result.get("hosts", []))
            lines.append(f"- {topic}, {who} ({result['harvest_rate']:.2f}): {hosts or 'not recorded'}")
    return lines


def write_report(results: dict, out: Path) -> Path:
    plots = plot_curves(results, out) + [plot_topic_losses(results, out), plot_scores(results, out)]
    crawlers = results["crawlers"]
    lines = [f"# Crawl evaluation — budget {results['budget']}", "",
             "Means over topics at the end of each topic's budget (± standard error). Harvest and recall use",
             "the ground truth; estimated harvest is the crawler's own critic; judged harvest is the majority",
             "vote of NB, SVM and NN evaluation classifiers trained on twice the examples (Pant §6).", "",
             "Top-100 precision: the share truly relevant of the 100 pages the crawl's final critic is surest of.",
             "Critic's AUC: how well the critic's scores order the pages the crawl judged (ROC AUC against the",
             "truth): its quality where the crawl took it, which bounds every crawler learning from it.", "",
             "Pages/s depend on the pages a crawler picks: the last column is what its pages weighed on average,",
             "and two crawlers' pages/s compare only as far as their pages do. Pages/s is the mean of the topics'",
             "rates; in brackets, all topics' pages over all their crawl seconds, in which each page weighs the",
             "same (a stall of a few tenths of a second moves a short crawl's rate, and the mean, far more).", "",
             "| crawler | harvest rate | loss rate | target recall | estimated harvest | judged harvest"
             " | top-100 precision | critic's AUC | pages/s | a page |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, entry in crawlers.items():
        known = lambda k: entry.get(k) is not None and entry[k] == entry[k]  # noqa: E731 - absent or NaN: no value
        cells = [f"{entry[k]:.3f} ± {entry[k + '_stderr']:.3f}" if known(k) else "—"
                 for k in ("harvest_rate", "loss_rate", "target_recall", "estimated_harvest", "judged_harvest",
                           "top100_precision", "critic_auc")]
        pooled = f" ({entry['pages_per_second_pooled']:.0f})" if known("pages_per_second_pooled") else ""
        weight = (f"{entry['kilobytes_per_page']:.0f} kB, {entry['links_per_page']:.0f} link targets"
                  if known("kilobytes_per_page") else "—")
        lines.append(f"| {name}{' (reference)' if entry['reference'] else ''} | " + " | ".join(cells)
                     + f" | {entry['pages_per_second']:.0f}{pooled} | {weight} |")
    if kept := results.get("kept"):
        lines += ["", f"Kept from an earlier run into this folder, with that run's pages/s: {', '.join(kept)}."]
    lines += ["", "## Per topic (harvest rate / target recall / top-100 precision)", "",
              "Recall ceiling: the share of the targets that links lead to from the crawl's seeds, capped by the",
              "budget; no crawler can do better.", "",
              "| topic | budget | targets | recall ceiling | " + " | ".join(crawlers) + " |",
              "|---|---|---|---|" + "---|" * len(crawlers)]
    for topic, info in results["topics"].items():
        cells = []
        for entry in crawlers.values():
            t = entry["topics"].get(topic)
            precision = t.get("top100_precision") if t else None
            cells.append(f"{t['harvest_rate']:.2f} / {t['target_recall']:.2f} / "
                         + ("—" if precision is None else f"{precision:.2f}") if t and t["harvest_rate"] is not None else "—")
        ceiling = info.get("recall_ceiling")  # absent from results written before it was measured
        lines.append(f"| {topic} | {info['budget']} | {info['targets']} | " + ("—" if ceiling is None else f"{ceiling:.2f}")
                     + " | " + " | ".join(cells) + " |")
    lines += _loss_cut_lines(results)
    lines += _budget_lines(results)
    lines += ["", "## One-tailed paired t-tests over topics (p-values, Pant Table II)", "",
              "| hypothesis | harvest rate | target recall |", "|---|---|---|"]
    for hypothesis, p in results["t_tests"].items():
        fmt = lambda v: "—" if v is None else f"{v:.3g}"  # noqa: E731
        lines.append(f"| {hypothesis} | {fmt(p['harvest_rate'])} | {fmt(p['target_recall'])} |")
    lines += ["", "## URL overlap between crawlers (share of the smaller crawl, Pant Fig. 12)", ""]
    lines += [f"- {pair}: {value:.2f}" for pair, value in results["overlap"].items() if value == value]
    lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
