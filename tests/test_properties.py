"""Properties that must hold for any input, checked with generated data."""

from __future__ import annotations

from urllib.parse import quote, urlencode, urljoin

from hypothesis import given, settings
from hypothesis import strategies as st

from focuscrawl.fetch.urls import PLAIN_URL, canonical_url, canonicalized
from focuscrawl.parse import DecodeError, resolve_href, parse_html

TAGS = ["a href='x'", "a href='/y#z'", "b", "p", "div", "table", "td", "tr", "script", "br", "img", "i", "title", "base href='/b/'"]
fragments = st.lists(st.one_of(
    st.sampled_from([f"<{t}>" for t in TAGS] + [f"</{t.split()[0]}>" for t in TAGS]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=12),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(fragments)
def test_any_tag_soup_parses_with_consistent_leaf_spans(parts):
    page = parse_html("".join(parts).encode("utf-8"), "http://h.test/d/p.html")
    for link in page.links:
        assert 0 <= link.leaf_start <= link.leaf_end < len(page.leaves)
        assert link.url.startswith("http://h.test/")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600), st.sampled_from([None, "utf-8", "latin-1", "bogus", "utf-16"]))
def test_any_bytes_give_a_page_or_a_decode_error(body, charset):
    try:
        parse_html(body, "http://h.test/", charset)
    except DecodeError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["http", "https"]), st.from_regex(r"[a-z]{1,8}(\.[a-z]{2,5}){1,2}", fullmatch=True),
       st.sampled_from(["", ":80", ":443", ":8080"]), st.lists(st.text(max_size=6), max_size=3),
       st.dictionaries(st.text(min_size=1, max_size=4), st.text(max_size=4), max_size=3))
def test_canonical_url_is_idempotent(scheme, host, port, segments, query):
    url = f"{scheme}://{host}{port}/" + "/".join(quote(s) for s in segments) + ("?" + urlencode(query) if query else "")
    once = canonical_url(url)
    assert canonical_url(once) == once


segment = st.sampled_from(["a", "b", "..", ".", "x y", "%41", "", "c.html", "d;p"])


@given(st.sampled_from(["http://h.test", "http://h.test/", "https://h.test:8443/a/b.html", "http://h.test/a/b/?q=1",
                        "http://h.test/a/b.html?x=/y#z", "http://u@h.test/a/"]),
       st.lists(segment, max_size=4).map("/".join), st.sampled_from(["", "/", "//h2.test/", "../", "?k=v&a=1"]),
       st.sampled_from(["", "#f", "?q#f"]))
def test_link_resolution_matches_urljoin_then_canonical_url(base, path, prefix, suffix):
    href = prefix + path + suffix
    if not href.strip() or href.startswith("#"):
        return
    try:
        expected = canonical_url(urljoin(base, href))
    except ValueError:  # "//x y": a host w3lib 2.6 refuses, so no link
        expected = None
    assert resolve_href(base, href) == expected, (base, href)



@settings(max_examples=500, deadline=None)
@given(st.sampled_from(["http://h.test/a/b.html", "https://h.test:8443/a/?q=1", "http://h.test/a/b.html?x=/y#z"]),
       st.sampled_from(["", " ", "#", "//", "//h2.test", "javascript:", "Mailto:", "?", "../"]),
       st.text(" \t#?/.:abx%", max_size=12), st.text(" #?/ax", max_size=4))
def test_a_link_resolves_as_its_href_up_to_the_fragment_does(base, prefix, rest, fragment):
    """What lets a page resolve the hrefs that differ in their fragment once (``parse._read_links``)."""
    href = prefix + rest
    other = href.strip().partition("#")[0] + "#" + fragment
    assert resolve_href(base, href) == resolve_href(base, other), (base, href, other)


plain_looking = st.builds(  # URLs near the plain form: some plain, some a character or a dot segment away
    "{}://{}{}/{}".format, st.sampled_from(["http", "https", "https", "HTTP", "ftp"]),
    st.one_of(st.sampled_from(["0", "1.2.3", "a.1", "a.09", "x.0x7f", "a.0x", "a.0x1g", "1a.b"]),  # (IPv4 to WHATWG?)
              st.from_regex(r"[a-z0-9_-]{1,8}(\.[a-z0-9]{1,4}){0,2}", fullmatch=True),
              st.from_regex(r"[a-zA-Z0-9_-]{0,64}(\.[a-z0-9_-]{0,5}){0,3}", fullmatch=True)),
    st.sampled_from(["", "", "", ":80", ":8080"]),
    st.lists(st.one_of(st.sampled_from([".", "..", "", "a.b", "~x", "%7e", "x;y", "x;jsessionid=1", "é", "a b", "q?x=1", "f#g"]),
                       st.text(alphabet="az09._~!$&'()*+,=:@-", max_size=8)), max_size=5).map("/".join))


@settings(max_examples=1000, deadline=None)
@given(plain_looking)
def test_a_plain_url_is_canonical_as_it_is_and_every_other_is_worked_out(url):
    """canonical_url skips w3lib for URLs of the plain form; they must be those it leaves alone."""
    try:
        expected = canonicalized(url)
    except ValueError:
        expected = None
    if PLAIN_URL.match(url) and "/./" not in url + "/" and "/../" not in url + "/":
        assert expected == url
    if expected is not None:
        assert canonical_url(url) == expected
