"""Hostile input through the per-page path, URL admission and robots.txt, the way the crawler runs
them: no exception but the documented ones, and the invariants the rest of the crawl relies on.

The default run is bounded (the whole file in about 30 s, for CI). To fuzz for hours (one process;
a failure is kept in .hypothesis/ and replayed first the next time):

    FOCUSCRAWL_FUZZ=long .venv/bin/pytest tests/test_fuzz.py -x -q
    FOCUSCRAWL_FUZZ=long FOCUSCRAWL_FUZZ_EXAMPLES=1000000 .venv/bin/pytest tests/test_fuzz.py -x -q -k robots

``long`` runs FOCUSCRAWL_FUZZ_EXAMPLES examples per target (100 000 unless set: about an hour for
the page targets, minutes for the others). Every crash found becomes an ``@example`` or a test here.
"""

from __future__ import annotations

import codecs
import importlib.util
import math
import os
import pickle
import re
from pathlib import Path
from unittest import mock
from urllib.parse import urljoin, urlsplit

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from protego import Protego
from selectolax.lexbor import LexborHTMLParser

from focuscrawl import nesting, parse
from focuscrawl.apprentice import page_link_windows
from focuscrawl.config import validate_config
from focuscrawl.fetch.hosts import Hosts
from focuscrawl.fetch.urls import UrlRules, canonical_url, host_of
from focuscrawl.judging import Judge
from focuscrawl.nesting import ACTIVE_FORMATTING
from focuscrawl.parse import DecodeError, resolve_href

LONG = os.environ.get("FOCUSCRAWL_FUZZ") == "long"


def fuzz(examples: int) -> settings:
    """``examples`` in CI; FOCUSCRAWL_FUZZ_EXAMPLES in a long run. Nothing is timed (no deadline)."""
    return settings(max_examples=int(os.environ.get("FOCUSCRAWL_FUZZ_EXAMPLES", 100_000)) if LONG else examples,
                    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                          HealthCheck.filter_too_much, HealthCheck.large_base_example])


CONFIG = validate_config({"seeds": ["http://h.test/"], "strategy": "bfs", "text": {"language_check": True},
                          "store": {"near_duplicates": True}, "focus": {"link_context": 0.5}}, "fuzz")
JUDGE = Judge(CONFIG, critic=None, apprentice=True)  # what a worker process runs on every fetched body
RULES = UrlRules(CONFIG)
USER_AGENT = CONFIG.politeness.user_agent

# -- hostile URLs ------------------------------------------------------------------------------

SCHEMES = ["http", "https", "HTTPS", "ftp", "file", "javascript", "data", "mailto", "ws", "h\tttp", "1x", ""]
SEPARATORS = ["://", ":/", ":", "//", ":///", ":\\\\", ""]
HOSTS = ["h.test", "H.Test.", "bücher.test", "xn--bcher-kva.test", "例え.テスト", "ß.test", "ｈ.test", "h\u3002test",
         "xn--.test", "xn--zz--.test", "-a-.test", "a_b.test", "a..b", ".", "", "127.0.0.1", "0x7f.1", "999.1.1.1",
         "[::1]", "[::ffff:127.0.0.1]", "[fe80::1%25eth0]", "[::1", "::1]", "[]", "[v1.x]", "[::1]x", "u:p@h.test",
         "@h.test", "h.test@e.test", "%68.test", "h%00.test", "h .test", "\ufeffh.test", "a" * 64 + ".test",
         ("a" * 63 + ".") * 5 + "test", "\u0130.test", "h.test\\@e.test", "\u0000", "h.test:80@e.test"]
PORTS = ["", ":", ":80", ":443", ":8080", ":0", ":65535", ":65536", ":99999999999999999999", ":-1", ":+80", ": 80",
         ":8O", ":0x50", ":٨٠", ":80:80", ":%38%30"]
PATHS = ["", "/", "/a b", "/%", "/%zz", "/%25", "/%%41", "/..", "/../../x", "/./a/.", "//x", "/a?b=1&b=0&a#c", "/\\x",
         "/\x00", "/é", "/%e9", "/%C3%A9", "/;p", "?", "?%", "?a=%zz&=&&", "#f", "/\u202e", "/" + "a" * 3000,
         "/%F0%9F%98%80?q=%F0%9F", "/a%2Fb", "/~user/", "/a\nb", "/a\tb"]
RELATIVE = ["", " ", "#", "#x", "?q=1", "//h2.test/x", "..", "../" * 40, "x y", " \n http://h.test/a \t",
            "JaVaScRiPt:x", "data:,x", "mailto:a@b", "tel:1", "&amp;x", "&#0;", "&#xD800;", "%", "\\\\h2.test\\x",
            "http:x", "https:/x", "http:///x", "http://", "//", "///x", "ftp://h.test/x", "http://[::1]:99999/"]

junk_text = st.text(st.characters(codec="utf-8"), max_size=30)
absolute_urls = st.tuples(*map(st.sampled_from, (SCHEMES, SEPARATORS, HOSTS, PORTS, PATHS))).map("".join)
hostile_urls = st.one_of(absolute_urls, st.tuples(absolute_urls, junk_text).map("".join), junk_text)
hrefs = st.one_of(hostile_urls, st.sampled_from(RELATIVE), st.tuples(st.sampled_from(RELATIVE), junk_text).map("".join))


def _admitted(url: str) -> str | None:
    """The URL as the frontier would hold it, if it would be queued at all."""
    try:
        url = canonical_url(url)
    except ValueError:
        return None
    return url if RULES.rejection(url) is None else None


page_urls = st.tuples(st.sampled_from(["http://", "https://"]), st.sampled_from(HOSTS), st.sampled_from(PORTS),
                      st.sampled_from(PATHS)).map("".join).map(_admitted).filter(bool)

# -- hostile pages -----------------------------------------------------------------------------

TAGS = ["a", "area", "base", "link", "meta", "title", "head", "body", "html", "script", "style", "noscript", "template",
        "svg", "math", "table", "tr", "td", "caption", "select", "option", "textarea", "xmp", "plaintext", "iframe",
        "frameset", "b", "i", "font", "code", "nobr", "p", "div", "li", "ul", "img", "br", "form", "button", "x-y", "T",
        "nav", "aside", "footer"]
ENCODINGS = ["utf-8", "utf-16", "utf-16-le", "utf-16-be", "cp1252", "latin-1", "shift_jis", "koi8-r", "gb18030",
             "iso-2022-jp", "utf-7", "ascii", "cp037"]
REFRESH = ["0;url=", "0; URL='", "5.5,", ".", "-1;", "99999999999999999999;url=", "0;url=\"'", "1 url=", "0,"]
attributes = st.one_of(
    st.tuples(st.just("href"), hrefs),
    st.tuples(st.just("content"), st.tuples(st.sampled_from(REFRESH), hrefs).map("".join)),
    st.sampled_from([("rel", "nofollow"), ("rel", "canonical"), ("rel", " NoFollow\tcanonical "), ("name", "robots"),
                     ("http-equiv", "refresh"), ("http-equiv", " REFRESH "), ("name", "ROBOTS"), ("content", "none"),
                     ("content", "noindex, nofollow"), ("charset", "utf-16"), ("charset", "x-junk"), ("id", "1"),
                     ("role", "navigation"), ("role", " main NAVIGATION\t"), ("role", "navigationx")]),
    st.tuples(st.from_regex(r"[a-z\-:\"'<=]{1,8}", fullmatch=True), junk_text),
)


@st.composite
def start_tags(draw) -> str:
    name = draw(st.one_of(st.sampled_from(TAGS), st.from_regex(r"[A-Za-z][^\s/>\x00]{0,8}", fullmatch=True)))
    quote = draw(st.sampled_from(['"', "'", ""]))
    pairs = draw(st.lists(attributes, max_size=4))
    return f"<{name}" + "".join(f" {key}={quote}{value}{quote}" for key, value in pairs) + draw(
        st.sampled_from([">", "/>", "", " >"]))


pieces = st.one_of(
    start_tags(),
    st.sampled_from(TAGS).map("</{}>".format),
    junk_text,
    st.sampled_from(["&", "&amp", "&#0;", "&#x110000;", "&#xD800;", "&#99999999999;", "&nosuchentity;", "&AMP;", "&lt",
                     "<!--", "-->", "<!-- x -->", "<!--->", "<!>", "<!DOCTYPE html>", "<?xml ?>", "<![CDATA[x]]>", "<",
                     ">", "</", "<>", "</>", "<a", "=\"", "'", "\x00", "\r\n", "\ufeff", "\u2028", "<base href>"]),
    st.tuples(st.sampled_from(TAGS + ["span", "em", "dl"]), st.integers(1, 10_000), st.booleans()).map(
        lambda nest: f"<{nest[0]}>" * nest[1] + (f"</{nest[0]}>" * nest[1] if nest[2] else "")),  # deep nesting
    st.integers(0, 100_000).map(lambda n: f'<a href="/{"x" * n}">x</a>'),  # a huge attribute
    st.integers(0, 2000).map(lambda n: "<b " + " ".join(f"a{i}={i}" for i in range(n)) + ">"),  # many attributes
    st.integers(0, 3000).map(lambda n: "".join(f"<p><b id={i}>x" for i in range(n))),  # formatting left open
)
documents = st.lists(pieces, max_size=30).map("".join)
header_charsets = st.one_of(st.none(), st.sampled_from(ENCODINGS + ["bogus", "", "utf-8; x", "UTF8", "\x00"]))
robots_headers = st.one_of(st.sampled_from(["", "noindex", "none", "NOFOLLOW, noindex", ",,,"]), junk_text)


@st.composite
def bodies(draw) -> tuple[bytes, str | None, str]:
    """(body, the charset of the HTTP header, X-Robots-Tag): a document in one encoding, maybe
    declared as another, with a BOM or a few bytes of junk put in."""
    body = draw(documents).encode(draw(st.sampled_from(ENCODINGS)), errors="replace")
    declared = draw(st.sampled_from([None] + ENCODINGS))
    if declared:
        body = f'<meta charset="{declared}">'.encode("ascii") + body
    body = draw(st.sampled_from([b"", codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE])) + body
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(body)))
        body = body[:at] + draw(st.binary(max_size=6)) + body[at:]
    return body, draw(header_charsets), draw(robots_headers)


raw_bodies = st.tuples(st.binary(max_size=3000), header_charsets, robots_headers)

# -- checks ------------------------------------------------------------------------------------


def _is_canonical(url: str) -> bool:
    """Absolute and in the one spelling the frontier keeps (a second canonicalisation changes nothing)."""
    return bool(urlsplit(url).scheme) and canonical_url(url) == url


def _check_queueable(url: str) -> None:
    """What the pipeline asks of every link and redirect: its host and whether it may be queued."""
    host = host_of(url)
    reason = RULES.rejection(url)
    if reason is None:
        assert urlsplit(url).scheme in ("http", "https") and urlsplit(url).hostname and host


def _check_page(page: parse.Page, url: str) -> None:
    """What the store, the frontier and the learners take from a page."""
    assert page.url == url
    for text in (page.title, page.text, *page.leaves):
        text.encode("utf-8")  # no lone surrogate: the store and the search index take UTF-8
        assert text == " ".join(text.split())
    assert page.text == " ".join(leaf for leaf in page.content_leaves() if leaf)  # its navigation left out
    bounds = [bound for navigation in page.navigation for bound in navigation]
    assert bounds == sorted(bounds) and all(0 <= bound <= len(page.leaves) for bound in bounds)
    assert page.text or not page.navigation  # a page of nothing but navigation keeps its whole text
    for target in (page.canonical, page.refresh):
        assert target is None or _is_canonical(target)
    for link in page.links:
        assert 0 <= link.leaf_start <= link.leaf_end < len(page.leaves)
        assert link.anchor_text == " ".join(leaf for leaf in page.leaves[link.leaf_start:link.leaf_end + 1] if leaf)
        assert _is_canonical(link.url), link.url
        _check_queueable(link.url)
    back = pickle.loads(pickle.dumps(page))  # as a worker process sends it back
    assert back == page and back.links == page.links


def _check_terms(page: parse.Page) -> None:
    """The apprentice's leaf terms and link windows fit the page's leaves and links."""
    analyzer, d_max = JUDGE.analyzer, CONFIG.apprentice.d_max
    analysed = analyzer.page_terms(page)
    assert len(analysed.codes) == len(analysed.leaf) and np.all(np.diff(analysed.leaf) >= 0)
    assert len(analysed.leaf) == 0 or (analysed.leaf[0] >= 0 and analysed.leaf[-1] < len(page.leaves))
    if len(page.leaves) <= 300:  # leaf by leaf is slow on a page of thousands
        per_leaf = [(i, term) for i, leaf in enumerate(page.leaves) for term in analyzer.terms(leaf)]
        assert list(zip(analysed.leaf.tolist(), analysed.terms())) == per_leaf
    fresh = pickle.loads(pickle.dumps(page))
    fresh.terms.clear()  # its words counted from its leaves, not from the leaf terms
    assert analyzer.page_frequencies(page) == analyzer.page_frequencies(fresh) == analyzer.term_frequencies(page.text)
    windows = page_link_windows(analyzer, page, d_max)
    assert len(windows.bounds) == len(page.links) + 1 and windows.bounds[0] == 0
    assert windows.bounds[-1] == len(windows.features) and np.all(np.diff(windows.bounds) >= 0)
    assert windows.features.dtype == np.uint32


def _check_judged(body: bytes, url: str, charset: str | None, robots_header: str) -> None:
    judged = JUDGE(body, url, charset, robots_header)  # raises nothing: an unreadable page is an error
    if judged.error is not None:
        assert judged.page is None and judged.error
    elif judged.refresh is not None:
        assert judged.page is None and _is_canonical(judged.refresh)
        _check_queueable(judged.refresh)
    else:
        _check_page(judged.page, url)
        assert isinstance(judged.language_score, int)
        assert judged.signature is None or (judged.signature.dtype == np.uint32 and judged.signature.shape == (256,))
        _check_terms(judged.page)


# -- the per-page path -------------------------------------------------------------------------


@fuzz(250)
@given(bodies(), page_urls)
@example((b'<base href="http://a:99999/"><meta http-equiv=refresh content="0;url=x">', None, ""),
         "http://h.test/")  # a base that splits but has no port: canonical_url(base) raised out of parse_html
@example((b"<p>x", "\x00", ""), "http://h.test/")  # a NUL in the header's charset: codecs.lookup raised ValueError
@example((("<div>" * 10_000 + "x" + "</div>" * 10_000).encode(), None, ""), "http://h.test/")
@example((b"<nav>Plots <a href=/p>box plots</a></nav>sum<footer><nav>x</nav></footer><aside></aside>"
          b"<p role=navigation>y</p>the rows", None, ""), "http://h.test/")  # text around navigation
@example((b"<nav>all of it <a href=/p>navigation</a></nav>", None, ""), "http://h.test/")
def test_a_hostile_page_is_judged_or_refused_and_keeps_the_invariants(payload, url):
    body, charset, robots_header = payload
    _check_judged(body, url, charset, robots_header)


@pytest.mark.skipif(parse.walk_leaves is parse.walk_in_python, reason="the C leaf walk is not built (no compiler)")
@fuzz(250)
@given(documents)
@example("a<!-- x -->b<!---->c<b>d</b><!-- -->\xa0e<a href=x><script>y</script></a><a href></a>")
@example("<p>\u2003a\x1cb  c</p><!--x-->\u3000d<a href=/ rel=nofollow><img></a><template><a href=t>t</a></template>")
@example("<a href=x><nav><script>s</script></nav></a><nav><a href=y></a></nav><a href=z role=navigation></a>"
         "<div role='x Navigation'><aside>n</aside></div>t<footer><svg role=navigation>v</svg></footer>")
@example("<meta http-equiv=Refresh content><meta name=ROBOTS content=noindex><base href><title>a<b>x</b></title>"
         "<svg><title>s<g>t</g></title><base xlink:href=q><link rel=canonical xlink:href=y></svg><link rel href=z>"
         "<noscript><meta name=n></noscript><template><title>no</title></template><meta http-equiv=x>")
def test_the_leaf_walk_in_c_reads_hostile_markup_as_the_python_walk_does(document):
    try:
        tree = parse.html_tree(document)
    except DecodeError:  # refused before it is walked
        return
    if tree is not None:
        assert parse.walk_in_c(tree.root) == parse.walk_in_python(tree.root)


@pytest.mark.skipif(parse._tokens is None, reason="the C scanners are not built (no compiler)")
@fuzz(300)
@given(documents)
@example("<a</b<C\u2028 < /x <1 </ <z\x1c<y\x85<x\xa0>\u212a<\u212a<\u0130</\u0130 <\U0001f600 <abc/>")
def test_the_tag_scanner_in_c_finds_the_tags_the_expression_finds(document):
    for text in (document, document.lower()):
        assert parse.find_tags(text) == parse.TAG.findall(text)
    assert parse.find_tags(document, lower=True) == [(closing, name.translate(parse.ASCII_LOWER))
                                                     for closing, name in parse.TAG.findall(document)]


formatting_markup = st.lists(st.sampled_from(  # start tags of formatting elements, their attributes, and near misses
    ["<", ">", "/", "=", '"', "'", " ", "\t", "\n", "\x0b", "\f", "b", "B", "s", "\u017f", "i", "\u0131", "\u0130",
     "strong", "StrIke", "small", "big", "code", "font", "em", "tt", "u", "x", "id", "<b ", "<font color=", "</b>"]),
    max_size=40).map("".join)


@pytest.mark.skipif(parse._tokens is None, reason="the C scanners are not built (no compiler)")
@fuzz(300)
@given(st.one_of(documents, formatting_markup))
@example('<b class="x>y">t</b><I\tid=3><strong/><font color=\'red\' size=3><\u017f x="a"><\u0130 q><\u0131 a=b>'
         '<b a= \'x\'><b a=><b ""><bx y><B\x0bx><s\n=">"\'><STRI\u212aE x><b a="unclosed>')
def test_formatting_attributes_are_taken_out_in_c_as_the_expression_does(document):
    assert parse.without_formatting_attributes(document) == parse.FORMATTING_ATTRIBUTES.sub(r"<\1>", document)


@fuzz(150)
@given(raw_bodies, page_urls)
def test_any_bytes_are_judged_or_refused_and_keep_the_invariants(payload, url):
    body, charset, robots_header = payload
    _check_judged(body, url, charset, robots_header)


@fuzz(200)
@given(st.sampled_from(["http://h.test/d/p.html", "https://[::1]:8443/a/", "http://xn--bcher-kva.test/?q=1"]), hrefs)
def test_a_hostile_href_resolves_to_a_canonical_url_or_to_nothing(base, href):
    target = resolve_href(base, href)
    assert target is None or _is_canonical(target)
    if target is not None:
        _check_queueable(target)


# -- URL canonicalisation and admission --------------------------------------------------------


@fuzz(1000)
@given(hostile_urls)
def test_a_hostile_url_is_judged_and_its_canonical_form_is_stable(url):
    """canonical_url is given absolute URLs only (a link or a redirect is joined to its page first:
    "ht%74p://h.test/", a relative path, comes out as http://h.test/)."""
    RULES.rejection(url)  # never raises: a reason or None
    try:
        canonical = canonical_url(url if urlsplit(url).scheme else urljoin("http://h.test/d/p.html", url))
    except ValueError:  # the documented failure (parse's _join and the redirect code catch it)
        return
    assert _is_canonical(canonical)
    _check_queueable(canonical)


@pytest.mark.parametrize("url", ["http://h.test/d/%%30a", "http://h.test/%4%31", "http://h.test/%%%%%30303030a"])
def test_canonical_url_after_a_stray_percent_is_stable(url):
    """Found here: w3lib decoded "%%30a" to "%0a", a new escape that a second pass made "%0A"."""
    once = canonical_url(url)
    assert canonical_url(once) == once


@pytest.mark.parametrize("url", ["http://:80/a b", "http://:/x", "https://u:p@/x", "ws:/:/x", "ftp::/x"])
def test_a_url_of_a_scheme_with_hosts_but_without_a_host_is_refused(url):
    """Found here: w3lib 2.6 made "http://:/x" "http:///x", which it then read as "http://x/", and
    "http://:80/a b" "http:///a%20b", which it then refused."""
    with pytest.raises(ValueError, match="has no host"):
        canonical_url(url)
    assert canonical_url("file:///x") == "file:///x"


# -- robots.txt --------------------------------------------------------------------------------

ROBOTS_VALUES = ["*", "focuscrawl", "FocusCrawl/0.1", "*bot", "focus crawl", "/", "/*", "$", "/$", "/*a" * 30 + "$",
                 "/%", "/%zz", "/é", "/%C3%A9", "/?q=*", "/a*b*c", "//", "/\x00", "nan", "inf", "-inf", "-1", "1e999",
                 "0x10", "1_0", "10", "0.5", "١٠", "1e-400", " 7 ", "3 # x", "1/0", "0/0", "1/5m 0100-0200", ""]
ROBOTS_FIELDS = ["User-agent", "user-AGENT", "Disallow", "allow", "Crawl-delay", "crawl_delay", "Request-rate",
                 "Sitemap", "Host", "Clean-param", "Noindex", "#"]
robots_lines = st.one_of(
    st.tuples(st.sampled_from(ROBOTS_FIELDS), st.sampled_from([":", " :", ":  ", "", "="]),
              st.one_of(st.sampled_from(ROBOTS_VALUES), hostile_urls, junk_text)).map("".join),
    junk_text)


@st.composite
def robots_bodies(draw) -> bytes:
    """A robots.txt as fetched: lines with any line ends, maybe a BOM, maybe junk bytes."""
    text = draw(st.sampled_from(["\n", "\r\n", "\r"])).join(draw(st.lists(robots_lines, max_size=25)))
    body = draw(st.sampled_from([b"", codecs.BOM_UTF8])) + text.encode("utf-8")
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(body)))
        body = body[:at] + draw(st.binary(max_size=6)) + body[at:]
    return body


@fuzz(300)
@given(st.one_of(robots_bodies(), st.binary(max_size=2000)), st.lists(page_urls, min_size=1, max_size=4))
def test_any_robots_txt_answers_every_url_and_gives_a_usable_crawl_delay(body, urls):
    rules = Protego.parse(body.decode("utf-8", errors="replace"))  # as the fetcher reads it
    delay = rules.crawl_delay(USER_AGENT)
    assert delay is None or (isinstance(delay, float) and math.isfinite(delay) and delay >= 0), delay
    assert all(isinstance(sitemap, str) for sitemap in rules.sitemaps)
    for url in urls:
        assert rules.can_fetch(url, USER_AGENT) in (True, False)
    hosts = Hosts(CONFIG)
    hosts.set_crawl_delay("h.test", delay)
    assert CONFIG.politeness.min_interval <= hosts["h.test"].interval <= max(CONFIG.politeness.crawl_delay_cap,
                                                                            CONFIG.politeness.min_interval)


# -- the estimate that keeps the parser linear -------------------------------------------------

MODEL_TAGS = ["b", "i", "font", "code", "p", "li", "ul", "dl", "div", "span", "table", "tbody", "tr", "td", "th", "dd",
              "dt", "x", "option", "optgroup", "select", "button", "h1", "h2", "rt", "rp", "ruby", "caption",
              "colgroup", "form", "pre", "object", "template", "svg", "math", "body", "html", "head", "nobr", "a",
              "title", "rtc", "rb"]
IMPLIED = {"html", "head", "body", "tbody", "thead", "tfoot", "colgroup"}  # HTML5 opens them, once per table at most
runs = st.lists(st.tuples(st.sampled_from(MODEL_TAGS), st.booleans(), st.integers(1, 30), st.booleans()), max_size=25)


def _tree_counts(tree: LexborHTMLParser) -> tuple[int, int, int]:
    """(the deepest nesting of the elements the estimate counts, of all but those HTML5 opens
    itself, the formatting elements in the tree)."""
    depths = {}
    counted = every = formatting = 0
    for node in tree.root.traverse():
        parent = depths.get(node.parent.mem_id, (0, 0)) if node.parent is not None else (0, 0)
        depth = depths[node.mem_id] = (parent[0] + (node.tag not in nesting.NOT_NESTING and node.tag not in IMPLIED),
                                       parent[1] + (node.tag not in IMPLIED))
        counted, every = max(counted, depth[0]), max(every, depth[1])
        formatting += node.tag in ACTIVE_FORMATTING
    return counted, every, formatting


def _refused(text: str, max_nesting: int, max_reopened: int) -> bool:
    """Whether the estimate, checking every page, refuses ``text`` under these limits."""
    try:
        with mock.patch.multiple(parse, NESTING_CHECK_TAGS=-1, ALIKE_FORMATTING_TAGS=10**9), \
                mock.patch.multiple(nesting, MAX_NESTING=max_nesting, MAX_REOPENED=max_reopened):
            parse.html_tree(text)
    except DecodeError:
        return True
    return False


@fuzz(300)
@given(runs)
@example([("select", False, 1, False), ("b", False, 1, False), ("select", False, 2, False)])
def test_the_estimate_is_never_below_the_nesting_and_reopening_of_the_tree_lexbor_builds(tag_runs):
    """The tree is never deeper than estimated (counting all elements, at most three times deeper:
    <p>, <li>, <td> are not counted, as the estimate does not). An element HTML5 may close without
    an end tag (a second <select>) stays in the estimate's stack: the formatting elements then
    reopened (at most 3 per tag at a time) are paid for by that depth. Formatting end tags are left
    out: their adoption agency clones elements, a bounded number per tag."""
    text = "".join((f"</{tag}>" if closing and tag not in ACTIVE_FORMATTING else f"<{tag}>" + "x" * content) * count
                   for tag, closing, count, content in tag_runs)
    deepest, every, formatting = _tree_counts(LexborHTMLParser(text))
    reopened = formatting - len(re.findall(r"<(?:%s)>" % "|".join(ACTIVE_FORMATTING), text))
    assert deepest == 0 or _refused(text, deepest - 1, 10**9)
    assert every <= 3 or _refused(text, (every - 4) // 3, 10**9)
    per_level = 3 * len(ACTIVE_FORMATTING)
    assert reopened <= 0 or _refused(text, (reopened - 1) // (2 * per_level), (reopened - 1) // 2)


ESTIMATE_STATE = ("stack", "kept", "every", "at", "live", "marks", "foreign", "since", "active", "closed", "reopened", "raw")


def _python_nesting():
    """``focuscrawl.nesting`` from its source, as Python runs it (``import`` takes the compiled one when it is built)."""
    spec = importlib.util.spec_from_file_location("nesting_in_python", Path(nesting.__file__).with_name("nesting.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NESTING_IN_PYTHON = _python_nesting()


def _estimate_after(tags: list[tuple[str, str]], read: bool, module=nesting):
    """The estimate's whole state after ``tags`` (or the refusal), read with its shortcut for pairs
    or one tag at a time; the limits are small so that both are reached."""
    with mock.patch.multiple(module, MAX_NESTING=7, MAX_REOPENED=12):
        elements = module.OpenElements()
        try:
            if read:
                elements.read(tags)
            else:
                for closing, name in tags:
                    elements.end(name) if closing else elements.start(name)
        except module.NestingError as refusal:
            return str(refusal)
    state = {key: {k: v for k, v in value.items() if v} if isinstance(value, dict) else value  # (no empty entries)
             for key, value in ((key, getattr(elements, key)) for key in ESTIMATE_STATE)}
    state["since"] = list(elements.since.items())  # (its order counts)
    return state


paired_tags = st.sampled_from(MODEL_TAGS + ["em", "nobr", "svg", "span", "q"])
pairs = paired_tags.map(lambda name: [("", name), ("/", name)])


def _element(name: str, content: list[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    return [("", name), *(tag for part in content for tag in part), ("/", name)]


nests = st.recursive(pairs, lambda inner: st.builds(_element, paired_tags, st.lists(inner, max_size=3)),
                     max_leaves=12)  # <a><code><span></span></code></a>, <b><b><b><b></b></b></b></b>
enclosing = st.builds(_element, st.sampled_from(sorted(nesting.ENCLOSING)), st.lists(nests, max_size=3))  # <li><a></a></li>
tag_streams = st.lists(st.one_of(st.tuples(st.sampled_from(["", "/"]), paired_tags).map(lambda tag: [tag]), pairs,
                                 nests, enclosing),
                       max_size=40).map(lambda parts: [tag for part in parts for tag in part])


@fuzz(500)
@given(tag_streams)
@example([("", "ul"), ("", "li"), ("", "a"), ("/", "a"), ("/", "li"), ("", "li"), ("", "li"), ("/", "li")])
@example([("", "li"), ("", "a"), ("", "li"), ("", "a"), ("/", "a"), ("/", "li")])  # (an <a> in an active <a> is not alone)
@example([("", "dt"), ("", "dd"), ("", "code"), ("/", "code"), ("/", "dd"), ("", "p"), ("", "b"), ("", "p"),
          ("/", "p")])
@example([("", "a"), ("", "code"), ("", "span"), ("/", "span"), ("/", "code"), ("/", "a")] * 2)
@example([("", "b")] * 9 + [("/", "b")] * 9)  # (deeper than MAX_SKIPPED_NESTING, and three active at most)
@example([("", "a"), ("", "b"), ("", "a"), ("/", "a"), ("/", "b"), ("/", "a")])  # (the inner <a> ends the outer: <b> reopened)
def test_the_estimates_shortcuts_for_pairs_and_list_items_change_nothing(tags):
    """``_OpenElements.read`` skips a pair it would push and pop alone, such an element with only
    such elements in it, and a list item (or a paragraph) it would only record and forget with
    those in it; the state after (or the refusal) is the one of reading every tag."""
    assert _estimate_after(tags, read=True) == _estimate_after(tags, read=False)


@fuzz(500)
@given(tag_streams)
@example([("", "h2"), ("", "h1"), ("/", "h3"), ("/", "h2")])  # (an end tag of a heading closes the latest one)
def test_the_compiled_estimate_reads_tags_as_its_python_source_does(tags):
    """Where a C compiler built ``focuscrawl.nesting``, it is held to its source run by Python."""
    for read in (True, False):
        assert _estimate_after(tags, read) == _estimate_after(tags, read, NESTING_IN_PYTHON)


def test_formatting_elements_left_open_are_not_reopened_in_every_later_block():
    """5 000 distinct <b> left open, one per paragraph, made 12 million elements (19 s, 70 kB)."""
    text = "".join(f"<p><b id={i}>x" for i in range(5000))
    assert sum(1 for _ in parse.html_tree(text).root.traverse()) < 10 * text.count("<")


@pytest.mark.parametrize("html", [
    "<b>" * 30_000 + "</p>" * 30_000,  # formatting nests as deep as anything (was 3 s for 0.3 MB)
    "<rt>" * 30_000 + "</p>" * 30_000,  # so do <rt>, <rp>, <rb> and <optgroup> outside <ruby>, <select>
    "<optgroup>" * 30_000 + "</p>" * 30_000,
    "<li><dd>" * 30_000 + "</p>" * 30_000,  # each in the last (6 s): neither is in the stack of the estimate
    "<svg>" + "<a>" * 30_000 + "</zz>" * 30_000,  # in SVG any tag nests (16 s), even <a>, <td>
    "<span><div></span>" * 30_000 + "</p>" * 30_000,  # HTML5 ignores </span> after a <div> (10 s)
    "<lin\u212a>" * 30_000,  # (a Kelvin sign: str.lower makes the name "link", which does not nest; HTML5 does not)
    # (below: 36 formatting elements reopened in every paragraph)
    "<div>" + "<b><i><u><s><em><tt><big><code><font><small><strike><strong>" * 3 + "</div>" + "<p>x" * 100_000,
], ids=["formatting", "ruby", "optgroup", "li-dd", "svg", "span-div", "kelvin", "reopened"])
def test_a_page_of_formatting_or_ruby_built_to_make_the_parser_quadratic_is_refused(html):
    with pytest.raises(DecodeError):
        parse.html_tree(html)
