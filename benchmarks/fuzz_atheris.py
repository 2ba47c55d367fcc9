"""Coverage-guided fuzzing (atheris, libFuzzer) of the properties tests/test_fuzz.py checks with
hypothesis: the same test bodies, fed libFuzzer's mutations instead of hypothesis's examples.

    .venv/bin/pip install atheris; mkdir -p fuzz-corpus/page
    .venv/bin/python benchmarks/fuzz_atheris.py page -max_total_time=3600 -rss_limit_mb=4096 fuzz-corpus/page
    .venv/bin/python benchmarks/fuzz_atheris.py {page,href,url,robots} [libFuzzer options] [CORPUS_DIR]

``page`` runs a body through the judge of a worker process (parse, terms, link windows, the
admission of every link); ``href`` resolves one against a page; ``url`` canonicalises and admits
one; ``robots`` reads a robots.txt as the fetcher does. CORPUS_DIR (a few real pages make a good
start for ``page``) keeps the inputs that found new code. A crash leaves crash-<sha1> here: the
same command with that file instead of CORPUS_DIR replays it; it then becomes an ``@example`` in
tests/test_fuzz.py. libFuzzer reports what it ran ("Done 96776 runs in 11 second(s)").
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
with atheris.instrument_imports(include=["focuscrawl", "w3lib", "protego", "test_fuzz"]):
    import test_fuzz

PAGE_URLS = ["http://h.test/", "https://h.test:8443/d/p.html", "http://xn--bcher-kva.test/a/?q=1", "http://[::1]/"]
CHARSETS = [None, "utf-8", "cp1252", "utf-16", "shift_jis", "bogus", "\x00"]
ROBOTS_HEADERS = ["", "noindex", "none", "nofollow, noindex"]


def _page(data: bytes) -> None:
    given = atheris.FuzzedDataProvider(data)
    url, charset, robots = (given.PickValueInList(choices) for choices in (PAGE_URLS, CHARSETS, ROBOTS_HEADERS))
    body = given.ConsumeBytes(given.remaining_bytes())
    test_fuzz.test_a_hostile_page_is_judged_or_refused_and_keeps_the_invariants.hypothesis.inner_test(
        (body, charset, robots), url)


def _href(data: bytes) -> None:
    given = atheris.FuzzedDataProvider(data)
    base = given.PickValueInList(PAGE_URLS)
    test_fuzz.test_a_hostile_href_resolves_to_a_canonical_url_or_to_nothing.hypothesis.inner_test(
        base, given.ConsumeUnicodeNoSurrogates(given.remaining_bytes()))


def _url(data: bytes) -> None:
    given = atheris.FuzzedDataProvider(data)
    test_fuzz.test_a_hostile_url_is_judged_and_its_canonical_form_is_stable.hypothesis.inner_test(
        given.ConsumeUnicodeNoSurrogates(given.remaining_bytes()))


def _robots(data: bytes) -> None:
    given = atheris.FuzzedDataProvider(data)
    url = given.PickValueInList(PAGE_URLS) + given.ConsumeUnicodeNoSurrogates(40).lstrip("/")
    admitted = test_fuzz._admitted(url) or PAGE_URLS[0]
    test_fuzz.test_any_robots_txt_answers_every_url_and_gives_a_usable_crawl_delay.hypothesis.inner_test(
        given.ConsumeBytes(given.remaining_bytes()), [admitted])


TARGETS = {"page": _page, "href": _href, "url": _url, "robots": _robots}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(TARGETS)}}} [libFuzzer options] [CORPUS_DIR]")
    atheris.Setup([sys.argv[0], *sys.argv[2:]], TARGETS[sys.argv[1]])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
