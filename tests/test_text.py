import pickle
import random
import threading
from collections import Counter

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from focuscrawl import text
from focuscrawl.text import (Analyzer, foreign_stopword_set, remembered_frequencies, stopword_score, stopword_set, tokens,
                             word_counts)

ENGLISH = (
    "The crawler downloads pages from the web and it keeps only those that are about the topic "
    "which the user has chosen. It is not interested in anything else."
)
GERMAN = (
    "Der Hund läuft jeden Morgen mit seinem Besitzer durch den Park, und danach trinken sie "
    "zusammen einen Kaffee auf der Terrasse."
)
FRENCH = (
    "Le chat dort sur le canapé pendant que nous préparons le dîner, et ensuite nous allons "
    "nous promener dans le jardin avec les enfants."
)


def test_tokens_are_lowercase_and_split_on_punctuation():
    assert tokens("Hello, World! TCP/IP") == ["hello", "world", "tcp", "ip"]


def test_tokens_drop_single_characters_and_pure_numbers():
    assert tokens("a I x 42 1999 ok") == ["ok"]


def test_tokens_start_with_a_letter_but_may_contain_digits():
    assert tokens("x2 ipv6 3d") == ["x2", "ipv6"]


def test_tokens_keep_apostrophes_and_non_ascii_letters():
    assert tokens("Don't touch the naïve Straße") == ["don't", "touch", "the", "naïve", "straße"]


EVERY_CHARACTER = "".join(chr(code) for code in range(0x110000) if not 0xD800 <= code < 0xE000)
near_words = st.text(st.one_of(st.characters(codec="utf-8"), st.sampled_from("aZ9_'\x00 ²٣ǅ\u0345")), max_size=400)


@pytest.mark.skipif(text._tokens is None, reason="the C tokenizer is not built (no compiler)")
@settings(max_examples=300, deadline=None)
@given(near_words)
@example(EVERY_CHARACTER)  # each code point once: which ones start, continue or end a word
@example("rock'n'roll don't5 o'3 'quote' x_y 3d ² ٣x ǅa \x00\x00a\x00 dogs' a''b")
def test_the_tokenizer_in_c_finds_what_the_expression_finds(document):
    assert text._tokens.findall(document) == text.LEAF_TOKEN.findall(document)
    counts, codes, leaf = text._tokens.coded(document)
    reference = text.coded_in_python(document)
    assert list(counts.items()) == list(reference.counts.items())  # (in order of first occurrence)
    assert codes.dtype == leaf.dtype == np.int64
    assert codes.tolist() == reference.codes.tolist() and leaf.tolist() == reference.leaf.tolist()


def test_coded_words_keep_their_order_counts_and_leaves():
    counts, codes, leaf = text.code_words("b a\x00\x00a c\x00b")
    assert counts == {"b": 2, "a": 2, "c": 1}
    assert codes.tolist() == [0, 1, 1, 2, 0] and leaf.tolist() == [0, 0, 2, 2, 3]
    assert text.code_words("").counts == {} and text.code_words("\x00 3 \x00").leaf.tolist() == []


def test_terms_remove_english_stop_words_and_stem():
    terms = Analyzer().terms("The connections between the running computers are being connected")
    assert terms == ["connect", "run", "comput", "connect"]


def test_english_stop_list_keeps_content_words():
    assert Analyzer(stem=False).terms("the computer network") == ["computer", "network"]


def test_terms_without_stemming_keep_words():
    assert Analyzer(stem=False).terms("The connections between the running computers") == [
        "connections",
        "running",
        "computers",
    ]


def test_term_frequencies_count_stemmed_terms():
    assert Analyzer().term_frequencies("Sockets socket SOCKET the") == {"socket": 3}


def test_analyzer_uses_the_languages_stop_words_and_stemmer():
    assert Analyzer("de").terms("Die Häuser und die Bäume") == ["haus", "baum"]


def test_analyzer_survives_pickling_with_its_settings():
    restored = pickle.loads(pickle.dumps(Analyzer("en", stem=False)))
    assert (restored.language, restored.stem) == ("en", False)
    assert restored.terms("the running dogs") == ["running", "dogs"]


def test_stopword_score_is_positive_for_english_prose():
    assert stopword_score(ENGLISH) > 5


@pytest.mark.parametrize("prose", [GERMAN, FRENCH], ids=["german", "french"])
def test_stopword_score_is_negative_for_foreign_prose(prose):
    assert stopword_score(prose) < -5


def test_stopword_score_is_relative_to_the_crawl_language():
    assert stopword_score(GERMAN, "de") > 5
    assert stopword_score(ENGLISH, "de") < -5


@pytest.mark.parametrize("text, language", [(ENGLISH * 3, "en"), (GERMAN + ENGLISH, "en"), (FRENCH + GERMAN, "de")])
def test_stopword_score_counts_every_word_occurrence(text, language):
    """Counted per distinct word, the score is still +1 / -1 per occurrence (BINGO!'s dCount)."""
    own, foreign = stopword_set(language), foreign_stopword_set(language)
    expected = sum(1 if t in own else -1 if t in foreign else 0 for t in tokens(text))
    assert stopword_score(text, language) == expected != 0


@pytest.mark.parametrize("text, language", [(ENGLISH, "en"), (GERMAN + FRENCH, "de")])
def test_the_language_check_and_the_term_counts_share_one_tokenisation(text, language):
    words = word_counts(text)
    assert stopword_score(words, language) == stopword_score(text, language)
    assert Analyzer(language).term_frequencies(text, words) == Analyzer(language).term_frequencies(text)


def test_stopword_score_of_text_without_stop_words_is_zero():
    assert stopword_score("TCP socket retransmission timeout") == 0


@pytest.mark.parametrize(
    "use",
    [lambda: Analyzer("xx"), lambda: Analyzer("xx", stem=False), lambda: stopword_score("some text", "xx")],
    ids=["analyzer", "analyzer-unstemmed", "stopword-score"],
)
def test_unknown_language_raises_value_error(use):
    with pytest.raises(ValueError, match="'xx'"):
        use()


def test_term_frequencies_equal_counting_the_terms():
    text = ("Sockets, SOCKETS and the socket's states; running runners run. Straße, Straßen, café "
            "x 42 h2o — the connections connected connecting") * 3
    analyzer = Analyzer()
    assert analyzer.term_frequencies(text) == Counter(analyzer.terms(text))
    assert Analyzer(stem=False).term_frequencies(text) == Counter(Analyzer(stem=False).terms(text))


def test_term_cache_that_fills_up_starts_again_with_the_same_terms(monkeypatch):
    import focuscrawl.text

    monkeypatch.setattr(focuscrawl.text, "TERM_CACHE_SIZE", 5)
    analyzer = Analyzer()
    first = analyzer.terms("connections connected connecting runners running dogs cats houses")
    assert len(analyzer._terms) <= 8
    assert analyzer.terms("connections connected connecting runners running dogs cats houses") == first
    assert first == Analyzer().terms("connections connected connecting runners running dogs cats houses")


def test_an_analyzer_sent_to_another_process_finds_the_stems_its_language_has_there():
    """A judge handed to a worker (a retrained critic, a new apprentice) stems no word twice."""
    import pickle

    analyzer = Analyzer()
    analyzer.terms("the connections connected connecting")
    copy = pickle.loads(pickle.dumps(analyzer))
    assert copy._terms is analyzer._terms and copy._terms["connections"] == "connect" and copy._terms["the"] == ""
    assert Analyzer("de")._terms is not analyzer._terms and Analyzer(stem=False)._terms is not analyzer._terms


def test_leaf_terms_equal_the_terms_of_each_leaf_in_turn():
    leaves = ["The Sockets", "", "a", "connections, connected!", "x\x00y socket's", "  ", "Straße 42 h2o", "I"]
    analyzer = Analyzer()
    analysed = analyzer.leaf_terms(leaves)
    assert analysed.terms() == [t for leaf in leaves for t in analyzer.terms(leaf.replace("\x00", " "))]
    assert list(analysed.leaf) == [i for i, leaf in enumerate(leaves) for _ in analyzer.terms(leaf.replace("\x00", " "))]
    assert analysed.frequencies() == analyzer.term_frequencies(" ".join(leaves).replace("\x00", " "))
    same_stem = analyzer.leaf_terms(["sockets", "the socket", "Socket's"])
    assert same_stem.vocabulary == ["socket"] and same_stem.frequencies() == {"socket": 3}
    nothing = analyzer.leaf_terms([])
    assert nothing.terms() == [] and len(nothing.leaf) == 0 and nothing.frequencies() == {}
    assert analyzer.leaf_terms(["a", "", "42"]).terms() == []  # leaves without a term


def test_a_pages_terms_bring_its_word_counts_for_the_language_check():
    from focuscrawl.parse import parse_html
    from focuscrawl.text import WORDS, stopword_score, word_counts

    page = parse_html(b"<title>t</title><p>The sockets and <b>the</b> socket's I/O</p><ul><li>x</li><li>Stra&szlig;e 42</li></ul>",
                      "http://example.org/")
    Analyzer().page_terms(page)
    assert page.terms[WORDS] == word_counts(page.text)  # the same words, counted in the same pass
    assert stopword_score(page.terms[WORDS]) == stopword_score(page.text)


def test_a_pages_terms_are_counted_without_its_navigation_whichever_way_they_are_read():
    from focuscrawl.parse import parse_html
    from focuscrawl.text import WORDS, word_counts

    html = (b"<nav><a href=/p>Plotting</a> <a href=/b>box plots</a></nav><p>Sum the values</p>"
            b"<div role=navigation>plotting</div><p>over the rows, plotting nothing</p><footer>plots</footer>")
    analyzer = Analyzer()
    from_words, from_leaf_terms = parse_html(html, "http://example.org/"), parse_html(html, "http://example.org/")
    analyzer.page_terms(from_leaf_terms)  # the apprentice's leaf terms first
    expected = analyzer.term_frequencies("Sum the values over the rows, plotting nothing")
    assert analyzer.page_frequencies(from_words) == analyzer.page_frequencies(from_leaf_terms) == expected
    assert expected["plot"] == 1 and "box" not in expected
    assert from_words.terms[WORDS] == word_counts(from_words.text)  # the language check's words: the text's too


def test_preview_keeps_the_best_sentences_by_their_terms_weights_in_page_order():
    from focuscrawl.text import topic_preview

    leaves = ["Sockets carry bytes between hosts. Bread needs flour and water. The socket listens on a port.",
              "", "Kneading the dough takes time. TCP sockets retransmit lost packets quickly.", "tiny leaf"]
    analyzer = Analyzer()
    weights = {"socket": 1.0, "tcp": 0.5, "packet": 0.25, "port": 0.1}
    assert topic_preview(leaves, weights, analyzer, sentences=2) == (
        "The socket listens on a port. … TCP sockets retransmit lost packets quickly.")  # 1.1 and 1.75 beat 1.0
    assert topic_preview(leaves, {"unrelated": 1.0}, analyzer) == ""


def test_a_preview_from_the_leaves_terms_reads_only_the_heavy_leaves_and_finds_the_same_sentences():
    from focuscrawl.text import topic_preview

    rng = random.Random(7)
    words = "socket port packet host bread flour dough water river stone lamp route cable frame".split()
    analyzer = Analyzer()
    for trial in range(200):
        leaves = [". ".join(" ".join(rng.choices(words, k=rng.randint(1, 6))) for _ in range(rng.randint(0, 4)))
                  for _ in range(rng.randint(1, 60))]
        weights = {word: rng.choice([0.0, 0.5, 1.0, rng.random()]) for word in rng.sample(words, 6)}  # ties too
        expected = topic_preview(leaves, weights, analyzer, sentences=3)
        assert topic_preview(leaves, weights, analyzer, 3, terms=analyzer.leaf_terms(leaves)) == expected, trial


def test_a_retraining_step_analyses_each_text_once_and_forgets_after():
    """Inside ``remembered_frequencies`` every analyzer of the same settings, in this thread, reads
    a text's terms from the first analysis; another thread, other settings and the time after analyse again."""
    with remembered_frequencies():
        first = Analyzer().term_frequencies(ENGLISH)
        assert Analyzer().term_frequencies(ENGLISH) is first
        assert Analyzer(stem=False).term_frequencies(ENGLISH) is not first
        elsewhere = []
        thread = threading.Thread(target=lambda: elsewhere.append(Analyzer().term_frequencies(ENGLISH)))
        thread.start()
        thread.join()
        assert elsewhere[0] is not first and elsewhere[0] == first
    after = Analyzer().term_frequencies(ENGLISH)
    assert after is not first and after == first
