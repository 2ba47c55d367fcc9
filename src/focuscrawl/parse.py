"""HTML bytes to one :class:`Page`: text, links, and the numbered DOM leaves the apprentice needs.

Leaves are numbered left to right as in Chakrabarti et al. 2002 §2.2.1: every non-blank text
node is a leaf, and so is every element with neither children nor text (``<img>``, ``<br>``,
an empty ``<td>``), so empty leaves get numbers too. An anchor spans leaves
``leaf_start..leaf_end``; a token in leaf m is at offset m − leaf_start to the left,
0 inside, m − leaf_end to the right.

The tree is lexbor's (selectolax), built by HTML5's rules as a browser builds it, in C; it
parses and walks a page in about 60 % of lxml's time, with the same text and links on the test
web's pages (``benchmarks/parsers.py``).
"""

from __future__ import annotations

import codecs
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urljoin

import charset_normalizer
from selectolax.lexbor import LexborHTMLParser, LexborNode

from focuscrawl.fetch.urls import canonical_url

INVISIBLE = ("script", "style", "noscript", "template", "head", "svg", "math")
LINK_TAGS = ("a", "area")
UNFOLLOWABLE = ("javascript:", "mailto:", "data:", "tel:", "#")
META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")
REFRESH_CONTENT = re.compile(r"""\s*(\d*)[\d.]*\s*[;,]?\s*(?:url\s*=\s*)?(.*)""", re.IGNORECASE | re.DOTALL)
REFRESH_REDIRECT_SECONDS = 5  # a quicker refresh is a redirect (the page only says "moved")
# HTML5 tree construction scans the stack of open elements at every block start tag, so a page
# nesting tens of thousands of elements costs quadratic time (1 MB of nested <div>s: 73 s).
# Pages of fewer than NESTING_CHECK_TAGS tags cannot cost much (20 000 nested <div>s: 0.35 s);
# larger ones nested deeper than MAX_NESTING are refused (at most ~3 s for a 5 MB page built to
# hit the limit; lxml used to stop at 256). ``_nesting`` over-estimates (the deepest test-web
# page counts 535, its tree is 15 deep). Elements that close themselves or that HTML5 closes at
# the end of a block (formatting) do not count.
MAX_NESTING = 4096
NESTING_CHECK_TAGS = 20_000
NOT_NESTING = frozenset(
    "p li dt dd tr td th option optgroup rb rt rp area base br col embed hr img input link meta source track wbr"
    " a b big code em font i nobr s small strike strong tt u".split())
TAG = re.compile(r"<(/?)([A-Za-z][^\s/>]*)")
SINGLE_BYTE_CODEC = re.compile(r"(cp12\d\d|cp437|cp8\d\d|iso8859|mac-|koi8|ascii|tis-620)")


def _tag_ids(names: tuple[str, ...]) -> frozenset[int]:
    """lexbor's numbers for these tags: the walk compares integers, not names."""
    probe = LexborHTMLParser("".join(f"<{name}></{name}>" for name in names))
    return frozenset(node.tag_id for node in probe.root.traverse() if node.tag in names)


INVISIBLE_IDS = _tag_ids(INVISIBLE)
LINK_IDS = _tag_ids(LINK_TAGS)


class DecodeError(ValueError):
    """The body cannot be read as HTML: no encoding we can determine fits it, or it is built to
    exhaust the parser (see ``MAX_NESTING``)."""


@dataclass(slots=True)
class Link:
    url: str
    anchor_text: str
    leaf_start: int
    leaf_end: int
    nofollow: bool = False


@dataclass(slots=True)
class Page:
    url: str
    title: str = ""
    text: str = ""
    leaves: list[str] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    base_href: str | None = None
    canonical: str | None = None
    refresh: str | None = None  # a <meta> refresh within REFRESH_REDIRECT_SECONDS: a redirect
    noindex: bool = False
    nofollow: bool = False
    charset: str = "utf-8"
    # the terms of the leaves and the leaf of each, per analyzer settings: computed once for the
    # critic and the apprentice (``Analyzer.page_terms``)
    terms: dict = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> tuple:
        """Links travel as columns: a page judged in a worker comes back with hundreds of links
        (thousands on an index page), and unpickling each as an object cost the crawl's own
        process more than storing them."""
        links = tuple(zip(*((link.url, link.anchor_text, link.leaf_start, link.leaf_end, link.nofollow)
                            for link in self.links)))
        return tuple(getattr(self, name) for name in _PAGE_FIELDS), links

    def __setstate__(self, state: tuple) -> None:
        values, links = state
        for name, value in zip(_PAGE_FIELDS, values):
            setattr(self, name, value)
        self.links = list(map(Link, *links)) if links else []


_PAGE_FIELDS = tuple(name for name in Page.__slots__ if name != "links")


def decode_html(body: bytes, header_charset: str | None = None) -> tuple[str, str]:
    """Decode by BOM, then the HTTP header, then <meta charset>, then UTF-8, then detection
    (single-byte guesses become windows-1252, the WHATWG default for undeclared pages)."""
    text, charset = _decode(body, header_charset)
    if _looks_binary(text[:4096]):
        raise DecodeError(f"cannot decode body: binary content, not {charset} text")
    return text, charset


def _decode(body: bytes, header_charset: str | None) -> tuple[str, str]:
    for bom, name in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if body.startswith(bom):
            return body.decode(name, errors="replace"), name
    declared = [header_charset] if header_charset else []
    match = META_CHARSET.search(body[:4096])
    if match:
        meta = match.group(1).decode("ascii")
        # WHATWG: a page whose <meta> could be read as ASCII is not UTF-16, whatever it says
        declared.append("utf-8" if meta.lower().startswith("utf-16") else meta)
    for name in [*declared, "utf-8"]:
        try:
            codec = codecs.lookup(name).name
            return body.decode(codec), codec
        except (LookupError, UnicodeDecodeError):
            continue
    best = charset_normalizer.from_bytes(body[:200_000]).best()
    if best is None:
        raise DecodeError(f"cannot decode body (declared charset: {', '.join(declared) or 'none'})")
    charset = "cp1252" if SINGLE_BYTE_CODEC.match(codecs.lookup(best.encoding).name) else best.encoding
    return body.decode(charset, errors="replace"), charset


def _looks_binary(sample: str) -> bool:
    """Mostly C0/C1 control characters: an image or archive served as text/html."""
    return len(CONTROL_CHARACTERS.findall(sample)) > len(sample) * 0.1


def _robots_directives(value: str) -> set[str]:
    return {part.strip().lower() for part in value.split(",")}


def parse_html(body: bytes, url: str, header_charset: str | None = None, robots_header: str = "") -> Page:
    """Parse bytes that may be broken HTML; raises :class:`DecodeError` if undecodable or built
    to exhaust the parser."""
    text, charset = decode_html(body, header_charset)
    page = Page(url=url, charset=charset)
    directives = _robots_directives(robots_header)
    tree = html_tree(text)
    if tree is not None:
        _read_head(tree, page, directives)
        _walk_leaves(tree.root, page, base=_base_url(page))
    page.noindex = "noindex" in directives or "none" in directives
    page.nofollow = "nofollow" in directives or "none" in directives
    page.text = " ".join(leaf for leaf in page.leaves if leaf)
    return page


def html_tree(text: str) -> LexborHTMLParser | None:
    """The HTML5 tree of a decoded page, as a browser builds it (None: a blank page); raises
    :class:`DecodeError` for a page built to make the tree's construction quadratic."""
    if text.count("<") > NESTING_CHECK_TAGS and _nesting(text) > MAX_NESTING:
        raise DecodeError(f"elements nested deeper than {MAX_NESTING}: not parsed")
    return LexborHTMLParser(text) if text.strip() else None


def _nesting(text: str) -> int:
    """The deepest stack of open elements, from the tags alone: an end tag closes the elements
    opened since its own start tag, as HTML5 does (an unknown ``<T>`` in a Java signature stays
    open only until its parent ends); amortised one step per tag."""
    stack: list[str] = []
    open_by_name: Counter = Counter()
    deepest = 0
    for closing, name in TAG.findall(text):
        name = name.lower()
        if name in NOT_NESTING:
            continue
        if not closing:
            stack.append(name)
            open_by_name[name] += 1
            deepest = max(deepest, len(stack))
        elif open_by_name[name]:
            while (top := stack.pop()) != name:
                open_by_name[top] -= 1
            open_by_name[name] -= 1
    return deepest


def _read_head(tree: LexborHTMLParser, page: Page, directives: set[str]) -> None:
    title = tree.css_first("title")
    if title is not None:
        page.title = " ".join(title.text().split())
    base = tree.css_first("base[href]")
    if base is not None:
        page.base_href = (base.attributes["href"] or "").strip()
    for meta in tree.css("meta[name]"):
        if (meta.attributes["name"] or "").lower() in ("robots", "focuscrawl"):
            directives.update(_robots_directives(meta.attributes.get("content") or ""))
    page.refresh = meta_refresh(tree, _base_url(page))
    for link in tree.css("link[rel][href]"):
        if "canonical" in (link.attributes["rel"] or "").lower().split():
            page.canonical = resolve_href(_base_url(page), link.attributes["href"] or "")
            break


def meta_refresh(tree: LexborHTMLParser, base: str) -> str | None:
    """The target of a ``<meta http-equiv=refresh>`` that leaves the page within
    REFRESH_REDIRECT_SECONDS (content parsed as WHATWG's declarative refresh), else None."""
    for meta in tree.css("meta[http-equiv][content]"):
        if (meta.attributes["http-equiv"] or "").strip().lower() != "refresh":
            continue
        content = meta.attributes["content"] or ""
        if not content.lstrip()[:1].isdigit() and not content.lstrip().startswith("."):
            return None  # WHATWG: a refresh starts with its delay
        delay, target = REFRESH_CONTENT.match(content).groups()
        target = target.strip().strip("'\"").strip()
        if target and int(delay or 0) <= REFRESH_REDIRECT_SECONDS:
            url = resolve_href(base, target)
            return url if url != canonical_url(base) else None
        return None
    return None


def _base_url(page: Page) -> str:
    """<base href> if it is a usable URL, else the page's own."""
    try:
        return urljoin(page.url, page.base_href) if page.base_href else page.url
    except ValueError:
        return page.url


def resolve_href(base: str, href: str) -> str | None:
    """The canonical absolute URL of an href (None for fragments, javascript:, mailto: …);
    equal to ``canonical_url(urljoin(base, href))``."""
    href = href.strip()
    if not href or href.lower().startswith(UNFOLLOWABLE):
        return None
    if href[0] != "?" and not href.startswith("//"):  # a path resolves against the base's folder: share the work
        base = _folder(base)
    return _join(base, href.partition("#")[0])


@lru_cache(maxsize=4096)
def _folder(url: str) -> str:
    """``url`` up to the last '/' of its path (the whole URL when it has no path); cached because
    every link of a page resolves against the same base."""
    authority = url.find("//") + 2 if "//" in url else 0
    ends = [i for i in (url.find("?"), url.find("#")) if i >= 0]
    cut = url.rfind("/", authority, min(ends) if ends else len(url))
    return url[: cut + 1] if cut >= authority else url


@lru_cache(maxsize=131072)
def _join(base: str, href: str) -> str | None:
    """Resolve and canonicalise; cached because navigation hrefs repeat on every page of a folder
    (urljoin was 35 % of parsing a real documentation page)."""
    try:
        return canonical_url(urljoin(base, href))
    except ValueError:
        return None


def _walk_leaves(root: LexborNode, page: Page, base: str) -> None:
    """One pass in document order. lexbor's traversal yields no end events, so an anchor is
    closed when the walk reaches the node after its subtree, and so is a skipped invisible one."""
    leaves = page.leaves
    open_anchors: list[tuple[int, str, str, int]] = []  # (node after it, href, rel, first leaf)
    skip_until = 0  # the node after an invisible subtree being skipped
    after_comment, last_text = False, ""  # text, a comment, text: one text in a browser ("foo<!-- -->bar")
    for node in root.traverse(include_text=True, skip_empty=True):
        if skip_until or open_anchors:
            position = node.mem_id
            if skip_until:
                if position != skip_until:
                    continue
                skip_until = 0
            while open_anchors and open_anchors[-1][0] == position:
                _close_anchor(page, base, *open_anchors.pop()[1:])
        if node.is_text_node:
            content = node.text_content
            if after_comment and _continues_text(node):
                content = last_text + content
                leaves.pop()
            words = content.split()
            if words:
                leaves.append(" ".join(words))
                last_text = content
            after_comment = False
            continue
        tag = node.tag_id
        if tag in INVISIBLE_IDS:
            skip_until = _after(node)
            continue
        if not node.is_element_node:  # a comment (``_continues_text`` checks what lies between)
            after_comment = True
            continue
        if tag in LINK_IDS:
            attributes = node.attributes
            if "href" in attributes:
                open_anchors.append((_after(node), attributes["href"] or "", attributes.get("rel") or "", len(leaves)))
        child = node.child
        if child is None or (not child.is_element_node and _is_empty(node)):
            leaves.append("")
    while open_anchors:
        _close_anchor(page, base, *open_anchors.pop()[1:])


def _after(node: LexborNode) -> int:
    """The position of the first node the walk meets after ``node``'s subtree (-1: none)."""
    while node is not None:
        following = node.next
        while following is not None and following.is_empty_text_node:  # the walk skips these
            following = following.next
        if following is not None:
            return following.mem_id
        node = node.parent
    return -1


def _continues_text(node: LexborNode) -> bool:
    """The text node follows a text with words with only comments between them."""
    previous = node.prev
    while previous is not None and previous.is_comment_node:
        previous = previous.prev
    return previous is not None and previous.is_text_node and bool(previous.text_content.strip())


def _is_empty(node: LexborNode) -> bool:
    """No child element and no visible text: the element is an empty leaf (an <img>, an empty <td>)."""
    child = node.child
    while child is not None:
        if child.is_element_node or (child.is_text_node and child.text_content.strip()):
            return False
        child = child.next
    return True


def _close_anchor(page: Page, base: str, href: str, rel: str, start: int) -> None:
    leaves = page.leaves
    if len(leaves) == start:  # only invisible content (a script): the anchor is an empty leaf
        leaves.append("")
    target = resolve_href(base, href)
    if target is not None:
        anchor = leaves[start] if len(leaves) == start + 1 else " ".join(leaf for leaf in leaves[start:] if leaf)
        page.links.append(Link(target, anchor, start, len(leaves) - 1, "nofollow" in rel.lower().split()))
