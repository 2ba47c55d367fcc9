"""lxml against selectolax (lexbor) on real pages of the test web, as DESIGN.md asks before
choosing the HTML parser: time to parse, time to parse and number the leaves and links the way
``focuscrawl.parse`` does, and how often the two agree on a page's text and links.

    python benchmarks/parsers.py --testweb DIR --pages 2000

Prints JSON. The selectolax walk below mirrors ``parse._walk_leaves`` (text nodes and childless
elements are leaves; invisible subtrees are skipped; an anchor spans the leaves it opens and
closes around) and exists only for this comparison.
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

from focuscrawl.parse import _PARSER, INVISIBLE, LINK_TAGS, decode_html, parse_html, resolve_href


def lxml_parse(text: str):
    return etree.fromstring(text.encode("utf-8"), _PARSER) if text.strip() else None


def lexbor_parse(text: str):
    return LexborHTMLParser(text)


def lexbor_page(text: str, url: str) -> tuple[list[str], list[tuple[str, int, int]]]:
    """(leaves, links as (url, first leaf, last leaf)) of a page, walked with selectolax."""
    tree = LexborHTMLParser(text)
    leaves: list[str] = []
    links: list[tuple[str, int, int]] = []
    stack: list[tuple[object, int]] = [(tree.root, -1)] if tree.root is not None else []
    while stack:
        node, anchor_start = stack.pop()
        if anchor_start >= 0:  # the anchor's end
            if len(leaves) == anchor_start:
                leaves.append("")
            target = resolve_href(url, node.attributes.get("href") or "")
            if target is not None:
                links.append((target, anchor_start, len(leaves) - 1))
            continue
        tag = node.tag
        if tag == "-text":
            content = node.text_content
            if content and content.strip():
                leaves.append(" ".join(content.split()))
            continue
        if tag.startswith("-") or tag in INVISIBLE:
            continue
        children = []
        child = node.child
        while child is not None:
            children.append(child)
            child = child.next
        if tag in LINK_TAGS and node.attributes.get("href") is not None:
            stack.append((node, len(leaves)))
        if not any(c.tag != "-text" and not c.tag.startswith("-") or (c.tag == "-text" and c.text_content.strip())
                   for c in children):
            leaves.append("")
        stack.extend((c, -1) for c in reversed(children))
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
    for url, body in pages[:200]:  # warm the URL caches alike for both
        parse_html(body, url)
    result = {
        "pages": len(pages),
        "mean_kb": round(sum(len(body) for _, body in pages) / len(pages) / 1024, 1),
        "parse_ms": {"lxml": per_page_ms(lxml_parse, texts), "selectolax": per_page_ms(lexbor_parse, texts)},
        "parse_and_walk_ms": {
            "lxml": per_page_ms(lambda text, url: parse_html(text.encode("utf-8"), url), with_urls),
            "selectolax": per_page_ms(lexbor_page, with_urls),
        },
    }
    same_text = same_links = 0
    for text, url in with_urls:
        ours = parse_html(text.encode("utf-8"), url)
        leaves, links = lexbor_page(text, url)
        same_text += " ".join(l for l in leaves if l) == ours.text
        same_links += [u for u, _, _ in links] == [link.url for link in ours.links]
    result["agreement"] = {"text": round(same_text / len(pages), 3), "links": round(same_links / len(pages), 3)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
