"""focuscrawl's parser (selectolax/lexbor) against lxml on real pages of the test web: time to
parse, time to parse and number the leaves and links the way ``focuscrawl.parse`` does, and how
often the two agree on a page's text and links.

    python benchmarks/parsers.py --testweb DIR --pages 2000

Prints JSON, with the leaf walk alone in Python and in C (``leaf_walk_ms``), and ours with the
URL caches cold (``parse_and_walk_cold_ms``: its first pass). The lxml walk below
is the one ``focuscrawl.parse`` used before lexbor (text before a first child and after an
element are leaves, so are childless elements; invisible subtrees are
skipped; an anchor spans the leaves between its start and end events) and exists only for this
comparison. The two trees differ where libxml2 and HTML5 build broken markup differently (a
stray ``</p>`` is an empty paragraph, hence an empty leaf, in HTML5): agreement is measured on
text and links, and on leaves as well to show how often numbering moves.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import time
from pathlib import Path

from lxml import etree
from selectolax.lexbor import LexborHTMLParser

from focuscrawl import parse
from focuscrawl.parse import INVISIBLE, LINK_TAGS, decode_html, html_tree, parse_html, resolve_href

LXML_PARSER = etree.HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True, no_network=True)


def lxml_parse(text: str):
    return etree.fromstring(text.encode("utf-8"), LXML_PARSER) if text.strip() else None


def lexbor_parse(text: str):
    return LexborHTMLParser(text)


def lxml_page(text: str, url: str) -> tuple[list[str], list[tuple[str, str, int, int]]]:
    """(leaves, links as (url, anchor text, first leaf, last leaf)) of a page, walked with lxml."""
    root = lxml_parse(text)
    leaves: list[str] = []
    links: list[tuple[str, str, int, int]] = []
    if root is None:
        return leaves, links
    base = root.find(".//base[@href]")
    base_url = url if base is None else resolve_href(url, base.get("href")) or url
    open_anchors: list[tuple[etree._Element, int]] = []
    walker = etree.iterwalk(root, events=("start", "end"))
    for event, element in walker:
        if not isinstance(element.tag, str):
            continue
        if event == "start":
            if element.tag in INVISIBLE:
                walker.skip_subtree()
                continue
            if element.tag in LINK_TAGS and element.get("href") is not None:
                open_anchors.append((element, len(leaves)))
            if element.text and element.text.strip():
                leaves.append(" ".join(element.text.split()))
            elif len(element) == 0:
                leaves.append("")
            continue
        if open_anchors and open_anchors[-1][0] is element:
            _, start = open_anchors.pop()
            if len(leaves) == start:
                leaves.append("")
            target = resolve_href(base_url, element.get("href"))
            if target is not None:
                links.append((target, " ".join(leaf for leaf in leaves[start:] if leaf), start, len(leaves) - 1))
        if element.tail and element.tail.strip() and element is not root:
            leaves.append(" ".join(element.tail.split()))
    return leaves, links


def sample_pages(testweb: Path, count: int, seed: int = 0) -> list[tuple[str, bytes]]:
    db = sqlite3.connect(f"file:{testweb / 'testweb.db'}?mode=ro", uri=True)
    rows = db.execute("SELECT path, url FROM pages WHERE refresh IS NULL").fetchall()
    chosen = random.Random(seed).sample(rows, min(count, len(rows)))
    return [(url, (testweb / "root" / path).read_bytes()) for path, url in chosen]


def per_page_ms(function, items) -> float:
    started = time.perf_counter()
    for item in items:
        function(*item)
    return round((time.perf_counter() - started) * 1000 / len(items), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--testweb", type=Path, required=True)
    parser.add_argument("--pages", type=int, default=2000)
    args = parser.parse_args()
    pages = sample_pages(args.testweb, args.pages)
    texts = [(decode_html(body)[0],) for _, body in pages]
    with_urls = [(text, url) for (text,), (url, _) in zip(texts, pages)]
    def ours(text: str, url: str):
        return parse_html(text.encode("utf-8"), url)

    cold = per_page_ms(ours, with_urls)  # first: every URL met for the first time, as a crawl meets most of its links
    for url, body in pages[:200]:  # warm the URL caches alike for both
        parse_html(body, url)
    result = {
        "pages": len(pages),
        "mean_kb": round(sum(len(body) for _, body in pages) / len(pages) / 1024, 1),
        "parse_ms": {"lxml": per_page_ms(lxml_parse, texts), "selectolax": per_page_ms(lexbor_parse, texts)},
        "parse_and_walk_ms": {
            "lxml": per_page_ms(lxml_page, with_urls),
            "selectolax": per_page_ms(ours, with_urls),
        },
        "parse_and_walk_cold_ms": {"selectolax": cold},
    }
    same = {"text": 0, "links": 0, "leaves": 0}
    for text, url in with_urls:
        ours = parse_html(text.encode("utf-8"), url)
        leaves, links = lxml_page(text, url)
        same["text"] += " ".join(leaf for leaf in leaves if leaf) == ours.text
        same["links"] += [(u, a) for u, a, _, _ in links] == [(link.url, link.anchor_text) for link in ours.links]
        same["leaves"] += leaves == ours.leaves
    result["agreement"] = {key: round(count / len(pages), 4) for key, count in same.items()}
    trees = [(tree,) for (text,) in texts if (tree := html_tree(text)) is not None]
    result["leaf_walk_ms"] = {"python": per_page_ms(lambda tree: parse.walk_in_python(tree.root), trees)}
    if parse.walk_leaves is parse.walk_in_c:  # built at install (src/focuscrawl/_leafwalk.pyx)
        result["leaf_walk_ms"]["c"] = per_page_ms(lambda tree: parse.walk_in_c(tree.root), trees)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
