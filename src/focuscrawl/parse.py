"""HTML bytes to one :class:`Page`: text, links, and the numbered DOM leaves the apprentice needs.

Leaves are numbered left to right as in Chakrabarti et al. 2002 §2.2.1: every non-blank text
node is a leaf, and so is every element with neither children nor text (``<img>``, ``<br>``,
an empty ``<td>``), so empty leaves get numbers too. An anchor spans leaves
``leaf_start..leaf_end``; a token in leaf m is at offset m − leaf_start to the left,
0 inside, m − leaf_end to the right.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urljoin

import charset_normalizer
from lxml import etree

from focuscrawl.fetch.urls import canonical_url

INVISIBLE = frozenset({"script", "style", "noscript", "template", "head", "svg", "math"})
LINK_TAGS = frozenset({"a", "area"})
UNFOLLOWABLE = ("javascript:", "mailto:", "data:", "tel:", "#")
META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")
REFRESH_CONTENT = re.compile(r"""\s*(\d*)[\d.]*\s*[;,]?\s*(?:url\s*=\s*)?(.*)""", re.IGNORECASE | re.DOTALL)
REFRESH_REDIRECT_SECONDS = 5  # a quicker refresh is a redirect (the page only says "moved")
SINGLE_BYTE_CODEC = re.compile(r"(cp12\d\d|cp437|cp8\d\d|iso8859|mac-|koi8|ascii|tis-620)")
_PARSER = etree.HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True, no_network=True)


class DecodeError(ValueError):
    """The body is not text in any encoding we can determine."""


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
    """Parse bytes that may be broken HTML; raises :class:`DecodeError` only if undecodable."""
    text, charset = decode_html(body, header_charset)
    page = Page(url=url, charset=charset)
    directives = _robots_directives(robots_header)
    root = etree.fromstring(text.encode("utf-8"), _PARSER) if text.strip() else None
    if root is not None:
        _read_head(root, page, directives)
        _walk_leaves(root, page, base=_base_url(page))
    page.noindex = "noindex" in directives or "none" in directives
    page.nofollow = "nofollow" in directives or "none" in directives
    page.text = " ".join(leaf for leaf in page.leaves if leaf)
    return page


def _read_head(root: etree._Element, page: Page, directives: set[str]) -> None:
    title = root.find(".//title")
    if title is not None:
        page.title = " ".join("".join(title.itertext()).split())
    base = root.find(".//base[@href]")
    if base is not None:
        page.base_href = base.get("href").strip()
    for meta in root.iterfind(".//meta[@name]"):
        if meta.get("name", "").lower() in ("robots", "focuscrawl"):
            directives.update(_robots_directives(meta.get("content", "")))
    page.refresh = meta_refresh(root, _base_url(page))
    for link in root.iterfind(".//link[@rel][@href]"):
        if "canonical" in link.get("rel", "").lower().split():
            page.canonical = resolve_href(_base_url(page), link.get("href"))
            break


def meta_refresh(root: etree._Element, base: str) -> str | None:
    """The target of a ``<meta http-equiv=refresh>`` that leaves the page within
    REFRESH_REDIRECT_SECONDS (content parsed as WHATWG's declarative refresh), else None."""
    for meta in root.iterfind(".//meta[@http-equiv][@content]"):
        if meta.get("http-equiv").strip().lower() != "refresh":
            continue
        content = meta.get("content")
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


def _folder(url: str) -> str:
    """``url`` up to the last '/' of its path (the whole URL when it has no path)."""
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


def _walk_leaves(root: etree._Element, page: Page, base: str) -> None:
    leaves = page.leaves
    open_anchors: list[tuple[etree._Element, int]] = []
    walker = etree.iterwalk(root, events=("start", "end"))
    for event, element in walker:
        tag = element.tag
        if not isinstance(tag, str):
            continue
        if event == "start":
            if tag in INVISIBLE:
                walker.skip_subtree()
                continue
            if tag in LINK_TAGS and element.get("href") is not None:
                open_anchors.append((element, len(leaves)))
            content = element.text
            if content and content.strip():
                leaves.append(" ".join(content.split()))
            elif len(element) == 0:
                leaves.append("")
        else:
            if open_anchors and open_anchors[-1][0] is element:
                _, start = open_anchors.pop()
                if len(leaves) == start:  # only invisible content (a script): the anchor is an empty leaf
                    leaves.append("")
                target = resolve_href(base, element.get("href"))
                if target is not None:
                    anchor = " ".join(leaf for leaf in leaves[start:] if leaf)
                    rel = element.get("rel", "").lower().split()
                    page.links.append(Link(target, anchor, start, len(leaves) - 1, "nofollow" in rel))
            tail = element.tail
            if tail and tail.strip() and element is not root:
                leaves.append(" ".join(tail.split()))
