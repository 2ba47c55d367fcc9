"""HTML bytes to one :class:`Page`: text, links, and the numbered DOM leaves the apprentice needs.

Leaves are numbered left to right as in Chakrabarti et al. 2002 §2.2.1: every non-blank text
node is a leaf, and so is every element with neither children nor text (``<img>``, ``<br>``,
an empty ``<td>``), so empty leaves get numbers too. An anchor spans leaves
``leaf_start..leaf_end``; a token in leaf m is at offset m − leaf_start to the left,
0 inside, m − leaf_end to the right.

The tree is lexbor's (selectolax), built by HTML5's rules as a browser builds it, in C; it
parses and walks a page in about 60 % of lxml's time, with the same text and links on the test
web's pages (``benchmarks/parsers.py``). The walk itself runs in C too (``_leafwalk.pyx``, built at
install when a C compiler is there), 3 times faster than ``walk_in_python``, its reference.
CSS's ``[href]`` matches a namespaced ``xlink:href`` too (``<svg><base xlink:href=…>``), whose
attribute is not ``href``: attributes are read with ``get``.
"""

from __future__ import annotations

import codecs
import re
import string
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import NamedTuple
from urllib.parse import urljoin

import charset_normalizer
from selectolax.lexbor import LexborHTMLParser, LexborNode

from focuscrawl.fetch.urls import canonical_url
from focuscrawl.nesting import FORMATTING, NestingError, OpenElements

try:
    from focuscrawl import _leafwalk
except ImportError:  # not built (no C compiler at install): the same walk in Python, a few times slower
    _leafwalk = None
try:
    from focuscrawl import _tokens
except ImportError:  # the same: the tags are found by the expression
    _tokens = None

INVISIBLE = ("script", "style", "noscript", "template", "head", "svg", "math")
LINK_TAGS = ("a", "area")
# A page's navigation (HTML's <nav>, <aside> and <footer>, and ARIA's role="navigation", as
# Readability and trafilatura drop them): its leaves are numbered and its links followed, but its
# words are not the page's text. A site's sidebar repeats on every page: on pandas' API pages it
# is 72 % of the words and lists the plotting methods, so every page read as being about plotting.
NAVIGATION = ("nav", "aside", "footer")
NAVIGATION_ROLE = "navigation"
UNFOLLOWABLE = ("javascript:", "mailto:", "data:", "tel:", "#")
UNRESOLVED = object()  # an href not resolved yet, in a page's own table of them
META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")
REFRESH_CONTENT = re.compile(r"""\s*(\d*)[\d.]*\s*[;,]?\s*(?:url\s*=\s*)?(.*)""", re.IGNORECASE | re.DOTALL)
REFRESH_REDIRECT_SECONDS = 5  # a quicker refresh is a redirect (the page only says "moved")
# A page built to make lexbor's tree construction quadratic (``focuscrawl.nesting``): the formatting
# elements of a page of more than ALIKE_FORMATTING_TAGS tags lose their attributes (then at most 38
# are reopened in each block); pages of fewer than NESTING_CHECK_TAGS tags then cannot cost much
# (20 000 nested <div>s: 0.35 s); larger ones are estimated, and refused past its limits.
NESTING_CHECK_TAGS = 20_000
ALIKE_FORMATTING_TAGS = 4000  # smaller pages reopen < 2 million elements (3 s), whatever their attributes
TAG = re.compile(r"<(/?)([A-Za-z][^\s/>]*)")
ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)  # (HTML5 lowers no other letter in a tag name)
SPACE = r"[\t\n\f\r ]"  # HTML5's white space (``\s`` has more)
FIRST_TOKEN = re.compile(rf"{SPACE}*([^\t\n\f\r ]*)")
FORMATTING_NAMES = tuple(sorted(FORMATTING, key=len, reverse=True))  # the longest first (a prefix of one is another)
FORMATTING_ATTRIBUTES = re.compile(  # a formatting start tag with attributes, quoted values as HTML5 reads them
    rf"<((?i:{'|'.join(FORMATTING_NAMES)}))[\t\n\f\r /]"
    rf"""(?:[^>"'=]++|={SPACE}*+"[^"]*+"|={SPACE}*+'[^']*+'|=(?!{SPACE}*+["'])|["'])*+>""")
SINGLE_BYTE_CODEC = re.compile(r"(cp12\d\d|cp437|cp8\d\d|iso8859|mac-|koi8|ascii|tis-620)")


def _tag_ids(names: tuple[str, ...]) -> frozenset[int]:
    """lexbor's numbers for these tags: the walk compares integers, not names."""
    probe = LexborHTMLParser("".join(f"<{name}></{name}>" for name in names))
    return frozenset(node.tag_id for node in probe.root.traverse() if node.tag in names)


INVISIBLE_IDS = _tag_ids(INVISIBLE)
LINK_IDS = _tag_ids(LINK_TAGS)
NAVIGATION_IDS = _tag_ids(NAVIGATION)


def navigation_role(role: str) -> bool:
    """An element with this ``role`` attribute is navigation: its first token (ARIA takes the first
    role it knows, of tokens parted by ASCII white space) is "navigation", in any ASCII case."""
    return FIRST_TOKEN.match(role).group(1).translate(ASCII_LOWER) == NAVIGATION_ROLE


class DecodeError(ValueError):
    """The body cannot be read as HTML: no encoding we can determine fits it, or it is built to
    exhaust the parser (``focuscrawl.nesting``)."""


class Link(NamedTuple):
    """A tuple, so that a page's link columns become ``Link``s in C (``Page.links``): an index page
    has thousands."""

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
    base_href: str | None = None
    canonical: str | None = None
    refresh: str | None = None  # a <meta> refresh within REFRESH_REDIRECT_SECONDS: a redirect
    noindex: bool = False
    nofollow: bool = False
    charset: str = "utf-8"
    # the leaves of the page's navigation (NAVIGATION), as ranges [start, end): not in its text
    navigation: tuple[tuple[int, int], ...] = ()
    # the terms of the leaves and the leaf of each, per analyzer settings: computed once for the
    # critic and the apprentice (``Analyzer.page_terms``)
    terms: dict = field(default_factory=dict, repr=False, compare=False)
    # the links (``links``), or their columns as the parser made them or another process sent them
    _links: list[Link] | None = field(default_factory=list, init=False, repr=False, compare=False)
    _columns: tuple[tuple, ...] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def links(self) -> list[Link]:
        """The page's links, made when first asked for: the critic, the store and the frontier
        want only their columns (``link_columns``); link contexts and the apprentice want more."""
        if self._links is None:
            self._links = list(map(_as_link, zip(*self._columns)))
        return self._links

    def content_leaves(self) -> list[str]:
        """The leaves, those of the page's navigation blank (numbered as ``leaves``; ``leaves``
        itself when it has none)."""
        if not self.navigation or not self.leaves:  # (a judged page comes back to the crawl without its leaves)
            return self.leaves
        leaves = list(self.leaves)
        for start, end in self.navigation:
            leaves[start:end] = [""] * (end - start)
        return leaves

    def set_link_columns(self, columns: tuple[tuple, ...]) -> None:
        """The page's links, as columns (URLs, anchor texts, leaf starts, leaf ends, nofollows)."""
        self._links, self._columns = None, columns

    def __getstate__(self) -> tuple:
        """Links travel as columns: a page judged in a worker comes back with hundreds of links
        (thousands on an index page), and unpickling each as an object cost the crawl's own
        process more than storing them."""
        return tuple(getattr(self, name) for name in _PAGE_FIELDS), self.link_columns()

    @property
    def link_count(self) -> int:
        """How many links the page has (none made for it)."""
        return len(self.link_columns()[0])

    def link_columns(self) -> tuple[tuple, ...]:
        """The links as columns (URLs, anchor texts, leaf starts, leaf ends, nofollows), in C."""
        if self._links is None:
            return self._columns
        return tuple(zip(*self._links)) or ((),) * len(Link._fields)

    def __setstate__(self, state: tuple) -> None:
        values, columns = state
        for name, value in zip(_PAGE_FIELDS, values):
            setattr(self, name, value)
        self.set_link_columns(columns)


_PAGE_FIELDS = tuple(name for name in Page.__slots__ if name not in ("_links", "_columns"))
_as_link = partial(tuple.__new__, Link)  # a row of a page's link columns as a Link, in C


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
        except (LookupError, ValueError):  # an unknown name, a NUL in it ("utf-8\x00"), bytes that do not decode
            continue
    best = charset_normalizer.from_bytes(body[:200_000]).best()
    if best is None:  # mixed encodings: a browser shows the page with replacement characters, and so do we
        return body.decode("utf-8", errors="replace"), "utf-8"
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
    tree = html_tree(text, body if charset == "utf-8" and "\ufffd" not in text else None)
    if tree is not None:
        leaves, anchors, page.navigation, head = walk_leaves(tree.root)
        _read_head(head, page, directives)
        _read_links(page, leaves, anchors, base=_base_url(page))
    page.noindex = "noindex" in directives or "none" in directives
    page.nofollow = "nofollow" in directives or "none" in directives
    page.text = " ".join(filter(None, page.content_leaves()))
    if not page.text and page.navigation:  # all of it is navigation: then that is what the page says
        page.navigation = ()
        page.text = " ".join(filter(None, page.leaves))
    return page


def without_formatting_attributes(text: str) -> str:
    """``text`` with its formatting start tags' attributes taken out (in C when ``_tokens`` is built)."""
    if _tokens is None:
        return FORMATTING_ATTRIBUTES.sub(r"<\1>", text)
    return _tokens.without_attributes(text, FORMATTING_NAMES)


def find_tags(text: str, lower: bool = False) -> list[tuple[str, str]]:
    """``TAG.findall(text)``, with ``lower`` the names' ASCII letters in lower case as HTML5 reads
    them (in C when ``_tokens`` is built: a quarter of the time, without lowering the page)."""
    if _tokens is not None:
        return _tokens.find_tags(text, ASCII_LOWER if lower else None)
    return [(closing, name.translate(ASCII_LOWER)) for closing, name in TAG.findall(text)] if lower else TAG.findall(text)


def html_tree(text: str, utf8: bytes | None = None) -> LexborHTMLParser | None:
    """The HTML5 tree of a decoded page, as a browser builds it (None: a blank page); raises
    :class:`DecodeError` for a page built to make the tree's construction quadratic. ``utf8``:
    the bytes ``text`` was decoded from, if they are exactly its UTF-8, which lexbor then reads
    as they are (for ``text`` selectolax would encode it again: 0.08 ms a small-web page)."""
    tags = text.count("<")
    if tags > ALIKE_FORMATTING_TAGS:
        text, utf8 = without_formatting_attributes(text), None
    if tags > NESTING_CHECK_TAGS:
        try:
            OpenElements().read(find_tags(text, lower=True))
        except NestingError as refusal:
            raise DecodeError(str(refusal)) from None
    if not text or text.isspace():
        return None
    return LexborHTMLParser(text if utf8 is None else utf8)


HEAD_ELEMENTS = "title, base[href], meta[name], meta[http-equiv][content], link[rel][href]"
HeadElement = tuple  # ("title", text), ("base", href), ("meta", name, http-equiv, content), ("link", rel, href)


def head_elements(root: LexborNode) -> list[HeadElement]:
    """The elements under ``root`` that ``HEAD_ELEMENTS`` selects, in document order, as tuples of
    their tag and what is read of them: an attribute the element does not have is None, one
    without a value "". The C leaf walk finds the same as it goes (the query had matched five
    selectors at every element of the tree again: 0.29 ms a small-web page)."""
    found = []
    for node in root.css(HEAD_ELEMENTS):
        attributes = node.attributes
        value = partial(_attribute_value, attributes)
        if node.tag == "title":
            found.append(("title", node.text()))
        elif node.tag == "base":
            found.append(("base", value("href")))
        elif node.tag == "meta":
            found.append(("meta", value("name"), value("http-equiv"), value("content")))
        else:
            found.append(("link", value("rel"), value("href")))
    return found


def _attribute_value(attributes: dict, name: str) -> str | None:
    """selectolax gives an attribute without a value as None: here it is "", and a missing one None."""
    return None if name not in attributes else attributes[name] or ""


def _read_head(head: list[HeadElement], page: Page, directives: set[str]) -> None:
    """The first title and <base href>, the robots <meta>s, a refresh, the first canonical link."""
    title = base = canonical = None
    for element in head:
        tag = element[0]
        if tag == "title":
            title = element[1] if title is None else title
        elif tag == "base":
            base = (element[1] or "") if base is None else base
        elif tag == "meta":
            if (element[1] or "").lower() in ("robots", "focuscrawl"):
                directives.update(_robots_directives(element[3] or ""))
        elif canonical is None and "canonical" in (element[1] or "").lower().split():
            canonical = element[2] or ""
    if title is not None:
        page.title = " ".join(title.split())
    if base is not None:
        page.base_href = base.strip()  # (an SVG <base xlink:href> has no href: "")
    page.refresh = meta_refresh(head, _base_url(page))
    if canonical is not None:
        page.canonical = resolve_href(_base_url(page), canonical)


def meta_refresh(head: list[HeadElement], base: str) -> str | None:
    """The target of the first ``<meta http-equiv=refresh>`` of a page's ``head_elements`` if it
    leaves the page within REFRESH_REDIRECT_SECONDS (content parsed as WHATWG's declarative refresh),
    else None."""
    for element in head:
        if element[0] != "meta" or element[2] is None or element[3] is None:
            continue
        if element[2].strip().lower() != "refresh":
            continue
        content = element[3]
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
    """<base href> if it is a usable URL, else the page's own (as a browser falls back)."""
    if page.base_href and _join(page.url, page.base_href) is not None:  # "http://h:99999/" splits, but has no port
        return urljoin(page.url, page.base_href)
    return page.url


def resolve_href(base: str, href: str) -> str | None:
    """The canonical absolute URL of an href (None for fragments, javascript:, mailto: …);
    equal to ``canonical_url(urljoin(base, href.strip()))``."""
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


def _read_links(page: Page, leaves: list[str], anchors: list[tuple[str, str, int, int]], base: str) -> None:
    """The page's leaves and the links of its anchors. A link's target depends on its href up to
    the fragment only, so each of those is resolved once a page (on the small test web, 949 links
    a page have 877 hrefs but 59 without their fragments)."""
    page.leaves = leaves
    targets, texts, starts, ends, nofollows = [], [], [], [], []
    resolved: dict[str, str | None] = {}
    for href, rel, start, end in anchors:
        unfragmented = href.strip().partition("#")[0]
        target = resolved.get(unfragmented, UNRESOLVED)
        if target is UNRESOLVED:
            target = resolved[unfragmented] = resolve_href(base, href)
        if target is not None:
            targets.append(target)
            texts.append(leaves[start] if start == end else " ".join(leaf for leaf in leaves[start:end + 1] if leaf))
            starts.append(start)
            ends.append(end)
            nofollows.append(bool(rel) and "nofollow" in rel.lower().split())
    page.set_link_columns((tuple(targets), tuple(texts), tuple(starts), tuple(ends), tuple(nofollows)))


Walked = tuple[list[str], list[tuple[str, str, int, int]], tuple[tuple[int, int], ...], list[HeadElement]]


def walk_in_c(root: LexborNode) -> Walked:
    """``walk_in_python``'s leaves, anchors, navigation and head elements, walked in C (``_leafwalk``,
    when it is built)."""
    return _leafwalk.walk(root.mem_id, _INVISIBLE_TUPLE, _LINK_TUPLE, _NAVIGATION_TUPLE, navigation_role,
                          _HEAD_TAG_IDS)


_INVISIBLE_TUPLE, _LINK_TUPLE, _NAVIGATION_TUPLE = tuple(INVISIBLE_IDS), tuple(LINK_IDS), tuple(NAVIGATION_IDS)
_HEAD_TAG_IDS = tuple(next(iter(_tag_ids((name,)))) for name in ("title", "base", "meta", "link"))
# (the C walk copies them into arrays)


def walk_in_python(root: LexborNode) -> Walked:
    """The leaves under ``root``, its anchors as (href, rel, first leaf, last leaf) in the order
    they end, its navigation as ranges of leaves [start, end) (the outermost of nested ones), and
    its ``head_elements``: one pass in document order, and the query. lexbor's traversal yields no
    end events, so an anchor or a navigation is closed when the walk reaches the node after its
    subtree, and so is a skipped invisible one. The reference for ``_leafwalk``'s walk in C, and
    the walk where that is not built."""
    leaves: list[str] = []
    anchors: list[tuple[str, str, int, int]] = []
    navigation: list[tuple[int, int]] = []
    open_elements: list[tuple[int, str | None, str, int]] = []  # (node after it, href or None for a navigation, rel, first leaf)
    navigating = False
    roles = {node.mem_id for node in root.css("[role]") if navigation_role(node.attributes.get("role") or "")}
    skip_until = 0  # the node after an invisible subtree being skipped
    after_comment, last_text = False, ""  # text, a comment, text: one text in a browser ("foo<!-- -->bar")
    for node in root.traverse(include_text=True, skip_empty=True):
        if skip_until or open_elements:
            position = node.mem_id
            if skip_until:
                if position != skip_until:
                    continue
                skip_until = 0
            while open_elements and open_elements[-1][0] == position:
                _, href, rel, start = open_elements.pop()
                _close(leaves, anchors, navigation, href, rel, start)
                if href is None:  # (the navigation it was in)
                    navigating = False
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
        if not navigating and (tag in NAVIGATION_IDS or node.mem_id in roles):
            open_elements.append((_after(node), None, "", len(leaves)))
            navigating = True
        if tag in LINK_IDS:
            attributes = node.attributes
            if "href" in attributes:
                open_elements.append((_after(node), attributes["href"] or "", attributes.get("rel") or "", len(leaves)))
        child = node.child
        if child is None or (not child.is_element_node and _is_empty(node)):
            leaves.append("")
    while open_elements:
        _close(leaves, anchors, navigation, *open_elements.pop()[1:])
    return leaves, anchors, tuple(navigation), head_elements(root)


def _close(leaves: list[str], anchors: list, navigation: list, href: str | None, rel: str, start: int) -> None:
    """An anchor ends (href None: a navigation)."""
    if href is None:
        navigation.append((start, len(leaves)))
        return
    if len(leaves) == start:  # only invisible content (a script): the anchor is an empty leaf
        leaves.append("")
    anchors.append((href, rel, start, len(leaves) - 1))


walk_leaves = walk_in_python if _leafwalk is None else walk_in_c  # the walk ``parse_html`` uses


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
