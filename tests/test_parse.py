import pickle
import random

import pytest

from focuscrawl.parse import DecodeError, Page, decode_html, html_tree, parse_html

URL = "http://example.com/dir/page.html"


def parse(html, **kwargs):
    body = html if isinstance(html, bytes) else html.encode("utf-8")
    return parse_html(body, URL, **kwargs)


def link_urls(page):
    return [link.url for link in page.links]


def test_leaves_are_numbered_left_to_right_including_empty_ones():
    page = parse("<p>a<img src=x.png>b<br>c</p><p> </p><p>d</p>")
    assert page.leaves == ["a", "", "b", "", "c", "", "d"]


def test_anchor_with_nested_inline_tags_spans_all_its_leaves():
    page = parse("<p>before <a href='/x'>one <b>bold</b> two <em>em</em></a> after</p>")
    assert page.leaves == ["before", "one", "bold", "two", "em", "after"]
    [link] = page.links
    assert (link.leaf_start, link.leaf_end) == (1, 4)
    assert link.anchor_text == "one bold two em"


def test_image_only_anchor_spans_the_empty_image_leaf():
    page = parse("<p>left</p><a href='/pic'><img src=p.png></a><p>right</p>")
    assert page.leaves == ["left", "", "right"]
    [link] = page.links
    assert (link.leaf_start, link.leaf_end, link.anchor_text) == (1, 1, "")


def test_tables_are_flattened_row_major_with_empty_cells_numbered():
    page = parse(
        "<table><tr><td>r1c1</td><td></td></tr>"
        "<tr><td>r2c1</td><td><a href='/cell'>r2c2</a></td></tr></table>"
    )
    assert page.leaves == ["r1c1", "", "r2c1", "r2c2"]
    assert (page.links[0].leaf_start, page.links[0].leaf_end) == (3, 3)


def test_script_and_style_text_is_dropped_but_text_after_a_script_is_kept():
    page = parse("<p>x<script>var secret = 1;</script>tail<style>p { color: red }</style>y</p>")
    assert page.leaves == ["x", "tail", "y"]
    assert page.text == "x tail y"
    assert "secret" not in page.text and "color" not in page.text


def test_text_joins_non_empty_leaves_with_collapsed_whitespace():
    page = parse("<p>  many\n\n   spaces  </p><br><p>next</p>")
    assert page.text == "many spaces next"


def test_a_pages_navigation_is_numbered_and_followed_but_is_not_its_text():
    page = parse("<nav><a href='/plot'>Plotting</a> <a href='/io'>IO</a></nav><h1>DataFrame.sum</h1>"
                 "<div role=' NAVIGATION sidebar'><p>Series</p><nav><p>nested</p></nav></div><p>Sum the values.</p>"
                 "<aside>See also</aside><footer><a href='/c'>Copyright</a></footer><div role='main navigation'>end</div>")
    assert page.leaves == ["Plotting", "IO", "DataFrame.sum", "Series", "nested", "Sum the values.", "See also",
                           "Copyright", "end"]
    assert page.navigation == ((0, 2), (3, 5), (6, 7), (7, 8))  # the outermost of nested ones; ARIA's first role
    assert page.text == "DataFrame.sum Sum the values. end"
    assert page.content_leaves() == ["", "", "DataFrame.sum", "", "", "Sum the values.", "", "", "end"]
    assert [(link.url, link.anchor_text, link.leaf_start) for link in page.links] == [
        ("http://example.com/plot", "Plotting", 0), ("http://example.com/io", "IO", 1), ("http://example.com/c", "Copyright", 7)]


def test_a_page_that_is_all_navigation_keeps_its_whole_text():
    page = parse("<nav><ul><li><a href='/a'>Tutorial</a></li><li><a href='/b'>Reference</a></li></ul></nav><footer></footer>")
    assert page.text == "Tutorial Reference" and page.navigation == ()


def test_title_whitespace_is_collapsed_and_title_is_not_a_leaf():
    page = parse("<html><head><title>\n  Hello \t\n World  </title></head><body><p>body</p></body></html>")
    assert page.title == "Hello World"
    assert page.leaves == ["body"]


def test_links_resolve_against_base_href():
    page = parse("<head><base href='http://other.org/base/'></head><a href='rel.html'>r</a><a href='/root'>s</a>")
    assert page.base_href == "http://other.org/base/"
    assert link_urls(page) == ["http://other.org/base/rel.html", "http://other.org/root"]


def test_relative_base_href_resolves_against_page_url():
    page = parse("<head><base href='/docs/'></head><a href='a.html'>a</a>")
    assert link_urls(page) == ["http://example.com/docs/a.html"]


def test_links_are_canonicalised():
    page = parse(
        "<a href='q.html?z=1&a=2#frag'>q</a>"
        "<a href='http://example.com:80/p'>p</a>"
        "<a href='https://secure.org:443/s'>s</a>"
        "<a href='http://example.com:8080/k'>k</a>"
    )
    assert link_urls(page) == [
        "http://example.com/dir/q.html?a=2&z=1",
        "http://example.com/p",
        "https://secure.org/s",
        "http://example.com:8080/k",
    ]


def test_unfollowable_hrefs_are_dropped_but_their_text_stays_a_leaf():
    page = parse(
        "<a href='javascript:void(0)'>js</a><a href='mailto:a@b.org'>mail</a>"
        "<a href='#top'>top</a><a href=''>empty</a><a href='/ok'>ok</a>"
    )
    assert link_urls(page) == ["http://example.com/ok"]
    assert page.links[0].leaf_start == 4
    assert page.leaves == ["js", "mail", "top", "empty", "ok"]


def test_anchor_without_href_is_not_a_link():
    assert parse("<a name='here'>here</a>").links == []


def test_rel_nofollow_is_flagged_per_link():
    page = parse("<a href='/a' rel='external NoFollow'>a</a><a href='/b'>b</a>")
    assert [link.nofollow for link in page.links] == [True, False]
    assert page.nofollow is False


@pytest.mark.parametrize(
    ("content", "noindex", "nofollow"),
    [
        ("NOINDEX, nofollow", True, True),
        ("noindex", True, False),
        ("nofollow", False, True),
        ("none", True, True),
        ("all", False, False),
    ],
)
def test_meta_robots_directives(content, noindex, nofollow):
    page = parse(f"<head><meta name='Robots' content='{content}'></head><p>x</p>")
    assert (page.noindex, page.nofollow) == (noindex, nofollow)


def test_x_robots_tag_header_applies_like_meta_robots():
    page = parse("<p>x</p>", robots_header="noindex, nofollow")
    assert (page.noindex, page.nofollow) == (True, True)
    page = parse("<p>x</p>", robots_header="nofollow")
    assert (page.noindex, page.nofollow) == (False, True)


def test_link_rel_canonical_is_absolute_and_canonicalised():
    page = parse("<head><link rel='canonical' href='/canon?b=2&a=1#f'></head><p>x</p>")
    assert page.canonical == "http://example.com/canon?a=1&b=2"


def test_no_canonical_link_leaves_canonical_unset():
    assert parse("<head><link rel='stylesheet' href='/s.css'></head><p>x</p>").canonical is None


def test_relative_canonical_resolves_against_base_href():
    page = parse("<head><base href='http://other.org/base/'><link rel='canonical' href='canon.html'></head><p>x</p>")
    assert page.canonical == "http://other.org/base/canon.html"


def test_header_charset_decodes_windows_1252_bytes():
    body = "<p>café “quoted”</p>".encode("cp1252")
    page = parse(body, header_charset="windows-1252")
    assert page.text == "café “quoted”"
    assert page.charset == "cp1252"


def test_meta_charset_decodes_windows_1252_bytes():
    page = parse(b"<head><meta charset='windows-1252'></head><p>caf\xe9 \x93q\x94</p>")
    assert page.text == "café “q”"


def test_http_equiv_content_type_charset_is_honoured():
    body = b'<meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1"><p>gar\xe7on</p>'
    assert parse(body).text == "garçon"


def test_header_charset_takes_precedence_over_meta():
    body = b"<meta charset='utf-8'><p>caf\xe9</p>"
    assert parse(body, header_charset="latin-1").text == "café"


def test_a_utf8_page_is_read_from_its_bytes_as_from_its_text():
    """lexbor reads the body itself when it is exactly the page's UTF-8 (``html_tree``'s ``utf8``):
    the same tree as from the decoded text, replacement characters the page holds included."""
    body = ("<title>Grüße – 東京</title><p>naïve café ✓ \ufffd kept</p>"
            "<a href='/wei%C3%9F'>weiß 🙂</a>").encode()
    text, charset = decode_html(body)
    assert charset == "utf-8"
    from_bytes, from_text = html_tree(text, body), html_tree(text)
    assert [(node.tag, node.text(deep=False)) for node in from_bytes.root.traverse(include_text=True)] == \
        [(node.tag, node.text(deep=False)) for node in from_text.root.traverse(include_text=True)]
    page = parse(body)
    assert (page.title, page.text) == ("Grüße – 東京", "naïve café ✓ \ufffd kept weiß 🙂")
    assert html_tree(" \n\t", b" \n\t") is None


def test_utf8_bom_wins_over_declared_charset():
    text, charset = decode_html(b"\xef\xbb\xbf<p>caf\xc3\xa9</p>", "iso-8859-1")
    assert text == "<p>café</p>"
    assert charset == "utf-8-sig"


def test_utf16_bom_is_decoded():
    text, _ = decode_html("\ufeff<p>Grüße</p>".encode("utf-16-le"))
    assert text == "<p>Grüße</p>"


@pytest.mark.parametrize("where", ["header", "meta"])
def test_unknown_declared_charset_falls_back(where):
    body = "<p>naïve café</p>".encode("utf-8")
    if where == "meta":
        page = parse(b"<meta charset='no-such-charset'>" + body)
    else:
        page = parse(body, header_charset="no-such-charset")
    assert page.text == "naïve café"
    assert page.charset == "utf-8"


def test_undeclared_latin1_prose_is_detected():
    prose = (
        "<html><body><p>Le garçon a mangé une crème brûlée à la terrasse du café. C'était délicieux, "
        "et il a payé l'addition très rapidement.</p><p>Ensuite, il est allé à la bibliothèque pour "
        "étudier les mathématiques élémentaires.</p></body></html>"
    )
    text, _ = decode_html(prose.encode("latin-1"))
    assert text == prose


def test_undeclared_short_windows_1252_page_is_decoded_right():
    html = (
        "<html><head><title>Menu</title></head>"
        "<body><p>Our café serves crème brûlée and a fine rosé every day.</p></body></html>"
    )
    text, _ = decode_html(html.encode("cp1252"))
    assert text == html


GARBAGE = random.Random(1234).randbytes(1024)


def test_binary_garbage_raises_decode_error():
    with pytest.raises(DecodeError, match="cannot decode"):
        parse_html(GARBAGE, URL)


def test_binary_garbage_declared_utf8_raises_decode_error():
    with pytest.raises(DecodeError, match="cannot decode"):
        decode_html(GARBAGE, "utf-8")


@pytest.mark.parametrize(
    ("body", "header"),
    [(GARBAGE, "iso-8859-1"), (b"<meta charset=latin-1>" + GARBAGE, None)],
    ids=["header", "meta"],
)
def test_binary_garbage_with_declared_single_byte_charset_raises_decode_error(body, header):
    with pytest.raises(DecodeError):
        decode_html(body, header)


def test_ascii_control_byte_garbage_raises_decode_error():
    with pytest.raises(DecodeError):
        decode_html(bytes([0, 1, 2, 3, 4, 5, 6, 7, 8, 14, 15]) * 100)


@pytest.mark.parametrize("charset", ["utf-16-le", "utf-16-be"])
def test_bomless_utf16_declared_in_header_is_decoded(charset):
    text, _ = decode_html("<p>héllo wörld</p>".encode(charset), charset)
    assert text == "<p>héllo wörld</p>"


def test_broken_html_keeps_text_and_links_as_a_browser_builds_them():
    page = parse("<div><p>unclosed <a href=/a>link</div></div><b>more <a href='/b'>second")
    assert page.text == "unclosed link more second"
    # HTML5's adoption agency reopens the unclosed <a> around "more", as a browser shows it
    assert [(link.url, link.anchor_text) for link in page.links] == [
        ("http://example.com/a", "link"), ("http://example.com/a", "more"), ("http://example.com/b", "second")]


def test_fragment_without_html_or_body_parses():
    page = parse("<title>T</title>just text <a href='x'>x</a>")
    assert page.title == "T"
    assert page.leaves == ["just text", "x"]
    assert link_urls(page) == ["http://example.com/dir/x"]


@pytest.mark.parametrize("body", [b"", b"   \n\t "])
def test_empty_body_gives_empty_page(body):
    assert parse_html(body, URL) == Page(url=URL)


def test_meta_declared_utf16_on_an_ascii_readable_page_means_utf8():
    body = "<html><head><meta charset='utf-16'></head><body><p>plain words, café</p></body></html>".encode("utf-8")
    assert parse_html(body, "http://h.test/").text == "plain words, café"


def test_unusable_base_href_falls_back_to_the_page_url():
    page = parse("<head><base href='http://[::1'></head><a href='x.html'>x</a>")
    assert link_urls(page) == ["http://example.com/dir/x.html"]


def test_svg_base_and_link_with_a_namespaced_href_are_not_the_pages():
    """CSS's [href] matches <svg>'s xlink:href too: reading its "href" raised KeyError out of the parser."""
    page = parse("<body><svg><base xlink:href='http://elsewhere.test/'><link rel=canonical xlink:href='/c'></svg>"
                 "<a href='x.html'>x</a>")
    assert link_urls(page) == ["http://example.com/dir/x.html"] and page.canonical is None


@pytest.mark.parametrize("content, target", [
    ("0;URL=../other/page.html", "http://example.com/other/page.html"),  # rustdoc's stubs
    ("0; url='moved.html'", "http://example.com/dir/moved.html"),
    ('3, http://elsewhere.test/b', "http://elsewhere.test/b"),
    ("5.5; URL = moved.html", "http://example.com/dir/moved.html"),
    ("30; url=moved.html", None),  # a slow refresh is a page that stays on screen, not a redirect
    ("0", None),  # reload the page itself
    ("0; url=page.html", None),  # ... by name
    ("", None),
])
def test_quick_meta_refresh_is_read_as_a_redirect(content, target):
    page = parse(f"<head><meta http-equiv='Refresh' content=\"{content}\"></head><p>Redirecting</p>")
    assert page.refresh == target


def test_page_without_meta_refresh_has_no_refresh():
    assert parse("<head><meta http-equiv='content-type' content='text/html'></head><p>x</p>").refresh is None


def test_a_page_sent_between_processes_comes_back_whole():
    page = parse('<title>T</title><p>a <a href="/x" rel="nofollow">x</a> <a href="/y">y</a></p><nav>menu</nav>')
    page.terms["key"] = [1, 2]
    back = pickle.loads(pickle.dumps(page))
    assert back == page and back.links == page.links and back.links[0].nofollow and back.terms == {"key": [1, 2]}
    assert back.navigation == page.navigation == ((3, 4),)
    assert pickle.loads(pickle.dumps(parse(""))) == parse("")


@pytest.mark.parametrize("html", ["<div>" * 30000 + "<a href=/x>x</a>" + "</div>" * 30000,
                                  "<span>" * 30000 + "<div></div>" * 30000],
                         ids=["nested-blocks", "blocks-under-deep-inline"])
def test_a_page_built_to_make_the_parser_quadratic_is_refused(html):
    with pytest.raises(DecodeError, match="nested deeper than"):
        parse(html)


def test_a_large_page_of_shallow_sloppy_markup_is_parsed():
    """Unclosed formatting, auto-closed paragraphs and unknown <T> tags stay shallow."""
    page = parse("<div><p><b>x <code>List<T></code></div>" * 12000)
    assert page.leaves[:3] == ["x", "List", ""] and len(page.leaves) == 36000


def test_text_on_both_sides_of_a_comment_is_one_text_as_a_browser_shows_it():
    page = parse("foo<!-- c -->bar <a href=/y>ab<!---->cd</a> <a href=/z>x</a><!---->y")
    assert page.leaves == ["foobar", "abcd", "x", "y"]
    assert [(link.anchor_text, link.leaf_start, link.leaf_end) for link in page.links] == [("abcd", 1, 1), ("x", 2, 2)]
