"""Properties that must hold for any input, checked with generated data."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from hypothesis import given, settings
from hypothesis import strategies as st

from focuscrawl.fetch.urls import canonical_url
from focuscrawl.parse import DecodeError, parse_html

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
