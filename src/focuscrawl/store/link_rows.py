"""The rows of the ``links`` table: one per target a page links to (two if some of those links
are rel="nofollow" and some not), holding the distinct anchor texts of all the page's links to it.
A page links the same URL many times (its menu, its table of contents, an index's entries under
many names: 889 links a page to about 55 targets on the small test web), and a row per link cost
the crawl's process about 2 µs a link for the table and its two indexes, its largest share on
link-heavy pages. The link graph (HITS, the web UI) wants one edge per pair anyway, and the
search index every anchor text (:func:`anchor_texts`). Crawls stored by earlier versions hold a
row per link; they read the same."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat

ANCHOR_TEXTS_SEPARATOR = "\n"  # between the anchor texts of one row (a link's text never has a line break)


def link_rows(source_id: int, targets: Iterable[int], anchors: Iterable[str], starts: Iterable[int],
              ends: Iterable[int], nofollows: Iterable[int]) -> list[tuple[int, int, str, int, int, int]]:
    """A page's links (as columns: target ids, anchor texts, leaf spans, rel="nofollow" as 0 or 1)
    as rows (source, target, anchor texts, leaf start, leaf end, nofollow) (:func:`by_target`)."""
    return list(zip(repeat(source_id), *by_target(targets, anchors, starts, ends, nofollows)))


def by_target(targets: Iterable, anchors: Iterable[str], starts: Iterable[int], ends: Iterable[int],
              nofollows: Iterable) -> tuple[tuple, ...]:
    """Link columns (targets, as URLs or ids; anchor texts; leaf starts; leaf ends; nofollows)
    grouped as the ``links`` table's rows: one per target and nofollow, with the leaf span of its
    first link and its links' distinct non-empty anchor texts in order. Grouped columns group
    again to themselves, so a page's links may come grouped already from where it was judged."""
    rows: dict[tuple, tuple[int, int, dict[str, None]]] = {}  # (target, nofollow): first span, texts
    for key, anchor, start, end in zip(zip(targets, nofollows), anchors, starts, ends):
        row = rows.get(key)
        if row is None:
            row = rows[key] = (start, end, {})
        row[2][anchor] = None
    if not rows:
        return ((),) * 5
    (grouped_targets, grouped_nofollows), (grouped_starts, grouped_ends, texts) = zip(*rows), zip(*rows.values())
    return (grouped_targets, tuple(ANCHOR_TEXTS_SEPARATOR.join(filter(None, each)) for each in texts),
            grouped_starts, grouped_ends, grouped_nofollows)


def anchor_texts(stored: str) -> list[str]:
    """The anchor texts of a row's ``anchor_text`` (one in a row stored by an earlier version)."""
    return stored.split(ANCHOR_TEXTS_SEPARATOR) if stored else []
