import math
import pickle
from unittest import mock

import numpy as np
import pytest
from scipy import sparse
from sklearn.metrics import roc_auc_score
from sklearn.svm import SVC

from focuscrawl.learn import LEARNERS, Critic, KernelNB, ModelError, NormalNB, PlattSVM, platt_sigmoid
from focuscrawl.testweb.synthetic import topic_passages
from focuscrawl.text import FeatureSelector, PantTfidf, RelativeTf, information_gain, mutual_information

NETWORK = [
    "A TCP socket is bound to a local port and listens for incoming connections from clients.",
    "The server calls accept on the listening socket and receives a new socket for each client connection.",
    "TCP guarantees ordered delivery of bytes; lost packets are retransmitted after a timeout.",
    "Closing a socket sends a FIN packet and the connection enters the TIME_WAIT state.",
    "Nonblocking sockets let one thread multiplex many connections with select or epoll.",
    "The three-way handshake exchanges SYN and ACK packets before any data flows over the connection.",
]
BAKING = [
    "Knead the bread dough for ten minutes until it is smooth and elastic, then let it rise.",
    "Preheat the oven and bake the loaf until the crust is golden brown and sounds hollow.",
    "Sourdough bread uses a starter of wild yeast and flour instead of dried yeast.",
    "Mix flour, water, salt and yeast in a large bowl and cover the dough with a towel.",
    "Let the bread cool on a wire rack before slicing so the crumb does not turn gummy.",
    "A baking stone in the oven gives pizza and bread a crisp bottom crust.",
]
ON_TOPIC = "The client opens a TCP socket, connects to the server port and waits for the acknowledgement packet."
OFF_TOPIC = "Shape the risen dough into a loaf, dust it with flour and bake the bread in a hot oven."


def pant_weight(tf, max_tf, n_docs, df):
    return (0.5 + 0.5 * tf / max_tf) * math.log(n_docs / df) if tf else 0.0


def test_pant_tfidf_matches_equation_1():
    counts = np.array([[3, 1, 0, 2], [0, 2, 0, 1], [1, 0, 4, 1], [0, 0, 0, 5]])
    df = (counts > 0).sum(axis=0)
    expected = [[pant_weight(tf, row.max(), 4, df[j]) for j, tf in enumerate(row)] for row in counts]
    weights = PantTfidf().fit_transform(sparse.csr_matrix(counts)).toarray()
    np.testing.assert_allclose(weights, expected)
    assert weights[0, 0] == pytest.approx(1.0 * math.log(2))
    assert weights[0, 1] == pytest.approx((0.5 + 0.5 / 3) * math.log(2))
    assert weights[2, 2] == pytest.approx(1.0 * math.log(4))


def test_pant_tfidf_keeps_training_df_when_transforming_new_pages():
    tfidf = PantTfidf().fit(sparse.csr_matrix(np.array([[1, 1], [1, 0], [1, 0], [1, 0]])))
    weights = tfidf.transform(sparse.csr_matrix(np.array([[0, 2], [0, 0]]))).toarray()
    np.testing.assert_allclose(weights, [[0.0, math.log(4)], [0.0, 0.0]])


def test_pant_tfidf_term_in_every_example_gets_no_weight_and_is_not_stored():
    tfidf = PantTfidf().fit(sparse.csr_matrix(np.array([[1, 1], [1, 0]])))
    weights = tfidf.transform(sparse.csr_matrix(np.array([[3, 1]])))
    assert weights.nnz == 1
    assert weights[0, 1] == pytest.approx((0.5 + 0.5 / 3) * math.log(2))


def separable_data():
    rng = np.random.default_rng(7)
    X = np.vstack([rng.normal(-2.0, 1.0, (12, 2)), rng.normal(2.0, 1.0, (12, 2))])
    return X, np.array([0] * 12 + [1] * 12)


def test_platt_svm_probabilities_sum_to_one_and_rise_with_the_decision_function():
    X, y = separable_data()
    svm = PlattSVM().fit(X, y)
    grid = np.column_stack([np.linspace(-5, 5, 41), np.linspace(-5, 5, 41)])
    proba = svm.predict_proba(grid)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    order = np.argsort(svm.decision_function(grid))
    assert np.all(np.diff(proba[order, 1]) >= 0)
    assert proba[0, 1] < 0.1 < 0.9 < proba[-1, 1]
    np.testing.assert_array_equal(svm.predict(grid[[0, -1]]), [0, 1])


@pytest.mark.parametrize("kernel", ["linear", "poly"])
def test_a_platt_svm_pickled_before_its_plain_arrays_were_kept_scores_the_same(kernel):
    X, y = separable_data()
    svm = PlattSVM(kernel=kernel, degree=2).fit(X, y)
    state = {k: v for k, v in svm.__getstate__().items()
             if k not in ("weights_", "support_vectors_", "dual_coef_", "intercept_")}
    state["svm_"] = SVC(kernel=kernel, C=svm.C, degree=2, gamma=1.0, coef0=0.0).fit(X, y)  # libsvm's own kernel, as then
    old = PlattSVM.__new__(PlattSVM)
    old.__setstate__(state)
    np.testing.assert_allclose(old.predict_proba(X), svm.predict_proba(X))


@pytest.mark.parametrize("kernel", ["linear", "poly"])
def test_a_platt_svm_of_many_pages_solves_with_libsvms_own_kernel_to_the_same_scores(kernel):
    """Past GRAM_MAX_PAGES the kernel's matrix is not worked out; the solution is the same up to
    libsvm's stopping tolerance (1e-3)."""
    X, y = separable_data()
    on_matrix = PlattSVM(kernel=kernel, degree=2).fit(X, y)
    with mock.patch("focuscrawl.learn.GRAM_MAX_PAGES", len(X) - 1):
        own_kernel = PlattSVM(kernel=kernel, degree=2).fit(X, y)
    np.testing.assert_allclose(own_kernel.decision_function(X), on_matrix.decision_function(X), rtol=0, atol=1e-3)


def test_platt_svm_with_few_examples_fits_sigmoid_on_training_outputs():
    X, y = separable_data()
    few = np.r_[0:4, 12:16]
    svm = PlattSVM(folds=5).fit(X[few], y[few])
    assert svm.sigmoid_ == pytest.approx(platt_sigmoid(svm.decision_function(X[few]), y[few] == 1))


def test_platt_svm_with_enough_examples_fits_sigmoid_on_cross_validated_outputs():
    X, y = separable_data()
    svm = PlattSVM(folds=5).fit(X, y)
    on_training_outputs = platt_sigmoid(svm.decision_function(X), y == 1)
    assert svm.sigmoid_[0] < 0
    assert svm.sigmoid_ != pytest.approx(on_training_outputs, rel=0.05)


def test_platt_sigmoid_on_separable_scores_has_negative_slope():
    scores = np.array([-3.0, -2.0, -1.5, -1.0, 1.0, 1.5, 2.0, 3.0])
    a, b = platt_sigmoid(scores, scores > 0)
    assert a < 0
    assert b == pytest.approx(0.0, abs=1e-6)


def test_platt_sigmoid_fits_platts_smoothed_targets_not_hard_labels():
    scores = np.array([-1.0, 1.0])
    a, b = platt_sigmoid(scores, scores > 0)
    assert 1.0 / (1.0 + math.exp(a * 1.0 + b)) == pytest.approx(2.0 / 3.0, abs=1e-4)


@pytest.mark.parametrize("classifier", LEARNERS)
@pytest.mark.parametrize("per_class", [5, 2, 1])
def test_critic_scores_on_topic_text_above_off_topic_text(classifier, per_class):
    critic = Critic(classifier).fit(NETWORK[:per_class], BAKING[:per_class])
    on, off = critic.predict_proba([ON_TOPIC])[0], critic.predict_proba([OFF_TOPIC])[0]
    assert 0.0 <= off < on <= 1.0
    if per_class == 5:
        assert on > 0.5 > off


def test_critic_predict_proba_agrees_with_score():
    critic = Critic().fit(NETWORK, BAKING)
    expected = [critic.predict_proba([ON_TOPIC])[0], critic.predict_proba([OFF_TOPIC])[0]]
    np.testing.assert_allclose(critic.predict_proba([ON_TOPIC, OFF_TOPIC]), expected)


@pytest.mark.parametrize("classifier", LEARNERS)
def test_critic_save_then_load_gives_the_same_scores(tmp_path, classifier):
    critic = Critic(classifier, stem=False, selection="mi", features=20).fit(NETWORK, BAKING)
    path = tmp_path / "critic.pkl"
    critic.save(path)
    loaded = Critic.load(path)
    assert (loaded.classifier, loaded.stem) == (classifier, False)
    texts = [ON_TOPIC, OFF_TOPIC, "sockets and bread"]
    np.testing.assert_array_equal(loaded.predict_proba(texts), critic.predict_proba(texts))
    assert [p.name for p in tmp_path.iterdir()] == ["critic.pkl"]


def test_critic_load_of_garbage_raises_model_error_starting_with_the_path(tmp_path):
    path = tmp_path / "critic.pkl"
    path.write_bytes(b"\x80\x05not a pickle at all \x00\xff")
    with pytest.raises(ModelError) as info:
        Critic.load(path)
    assert str(info.value).startswith(f"{path}: not a usable model")


def test_critic_load_of_another_pickled_object_raises_model_error(tmp_path):
    path = tmp_path / "critic.pkl"
    path.write_bytes(pickle.dumps({"not": "a critic"}))
    with pytest.raises(ModelError, match="holds a dict, not a critic"):
        Critic.load(path)


def test_critic_load_of_missing_file_raises_model_error(tmp_path):
    path = tmp_path / "absent.pkl"
    with pytest.raises(ModelError) as info:
        Critic.load(path)
    assert str(info.value).startswith(f"{path}: cannot read model")


@pytest.mark.parametrize(("positives", "negatives"), [(NETWORK, []), ([], BAKING)])
def test_critic_fit_without_both_classes_raises_value_error(positives, negatives):
    with pytest.raises(ValueError, match="at least one positive and one negative"):
        Critic().fit(positives, negatives)


def test_unknown_classifier_name_raises_value_error():
    with pytest.raises(ValueError, match="unknown classifier 'knn'"):
        Critic("knn").fit(NETWORK, BAKING)


def test_normal_nb_matches_the_gaussian_density_formula():
    X = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 4.0]])
    y = np.array([1, 1, 0, 0])
    nb = NormalNB(min_std=0.5).fit(sparse.csr_matrix(X), y)
    x = np.array([2.0, 1.0])

    def log_normal(value, mean, var):
        return -0.5 * math.log(2 * math.pi * var) - (value - mean) ** 2 / (2 * var)

    # class 1: means (2, 0), variances (1, floor 0.25); class 0: means (0, 3), variances (floor 0.25, 1)
    log_1 = math.log(0.5) + log_normal(2, 2, 1) + log_normal(1, 0, 0.25)
    log_0 = math.log(0.5) + log_normal(2, 0, 0.25) + log_normal(1, 3, 1)
    expected = 1 / (1 + math.exp(log_0 - log_1))
    assert nb.predict_proba(sparse.csr_matrix(x))[0, 1] == pytest.approx(expected)


def test_kernel_nb_matches_pant_equation_5():
    X = np.array([[1.0, 0.0], [0.0, 0.5], [2.0, 0.0], [0.0, 0.0], [0.0, 3.0]])
    y = np.array([1, 1, 0, 0, 0])
    nb = KernelNB().fit(sparse.csr_matrix(X), y)
    x = np.array([0.8, 0.0])

    def density(value, column, rows):
        sigma = 1 / math.sqrt(len(rows))  # Pant: σ = 1/√n for the class
        return sum(math.exp(-((value - r[column]) ** 2) / (2 * sigma ** 2)) / (sigma * math.sqrt(2 * math.pi))
                   for r in rows) / len(rows)

    def joint(label):
        rows = X[y == label]
        return (len(rows) / len(X)) * density(x[0], 0, rows) * density(x[1], 1, rows)

    expected = joint(1) / (joint(1) + joint(0))
    assert nb.predict_proba(sparse.csr_matrix(x))[0, 1] == pytest.approx(expected)


def test_kernel_nb_with_many_spread_out_values_still_sums_every_kernel():
    """With σ = 1/√n small, most kernels are far from x; the ones left out must not matter."""
    rng = np.random.default_rng(0)
    X = np.where(rng.random((600, 6)) < 0.4, rng.random((600, 6)) * 5, 0.0)
    y = (rng.random(600) < 0.3).astype(int)
    pages = np.where(rng.random((20, 6)) < 0.5, rng.random((20, 6)) * 5, 0.0)
    nb = KernelNB().fit(sparse.csr_matrix(X), y)

    def log_joint(page, label):
        rows = X[y == label]
        sigma = 1 / math.sqrt(len(rows))
        exponents = -((page[None, :] - rows) ** 2) / (2 * sigma ** 2)  # every kernel, dense
        peak = exponents.max(axis=0)
        log_density = peak + np.log(np.exp(exponents - peak).mean(axis=0)) - math.log(sigma * math.sqrt(2 * math.pi))
        return math.log(len(rows) / len(X)) + log_density.sum()

    expected = np.array([[log_joint(page, 0), log_joint(page, 1)] for page in pages])
    np.testing.assert_allclose(nb._joint_log_likelihood(sparse.csr_matrix(pages)), expected, rtol=1e-10)


def test_relative_tf_divides_by_the_page_length():
    weights = RelativeTf().fit_transform(sparse.csr_matrix(np.array([[2, 0, 6], [0, 0, 0]]))).toarray()
    np.testing.assert_allclose(weights, [[0.25, 0.0, 0.75], [0.0, 0.0, 0.0]])


def test_mutual_information_follows_equation_2_10():
    # 10 documents, 4 in the topic; w in 3 topic documents and 1 other
    expected = 0.3 * math.log(0.3 / (0.4 * 0.4))
    assert mutual_information(np.array([4]), np.array([3]), 4, 10)[0] == pytest.approx(expected)
    assert mutual_information(np.array([5]), np.array([0]), 4, 10)[0] == 0.0


def test_information_gain_follows_equation_2_9():
    # w occurs in exactly the topic's documents: knowing w removes all uncertainty
    entropy = -(0.4 * math.log(0.4) + 0.6 * math.log(0.6))
    assert information_gain(np.array([4]), np.array([4]), 4, 10)[0] == pytest.approx(entropy)
    # w in 5 documents, 2 of them in the topic: P(D | w) = P(D | not w) = P(D), nothing gained
    assert information_gain(np.array([5]), np.array([2]), 4, 10)[0] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("method", ["mi", "ig"])
def test_feature_selection_picks_the_discriminative_terms_of_a_constructed_corpus(method):
    # 'socket' and 'packet' mark the topic; 'the' and 'data' are everywhere; 'rare' occurs once
    topic = ["socket packet the data"] * 6 + ["socket the data rare"]
    other = ["bread oven the data"] * 7 + ["flour the data"] * 7
    from sklearn.feature_extraction.text import CountVectorizer
    vectorizer = CountVectorizer()
    counts = vectorizer.fit_transform(topic + other)
    selector = FeatureSelector(method, features=2).fit(counts, [1] * len(topic) + [0] * len(other))
    names = vectorizer.get_feature_names_out()
    assert {names[i] for i in selector.ranking_} == {"socket", "packet"}
    assert names[selector.ranking_[0]] == "socket"
    assert selector.transform(counts).shape == (len(topic) + len(other), 2)


def test_feature_selection_scores_only_the_most_frequent_topic_terms():
    counts = sparse.csr_matrix(np.array([[3, 1, 0], [2, 0, 0], [0, 0, 1], [0, 0, 1]]))
    selector = FeatureSelector("mi", features=3, candidates=1).fit(counts, [1, 1, 0, 0])
    assert list(selector.ranking_) == [0]  # term 1 (one topic document) is not a candidate


def test_a_relevant_page_gets_a_preview_of_its_most_topical_sentences():
    from focuscrawl.parse import parse_html

    critic = Critic().fit(NETWORK, BAKING)
    page = parse_html(b"<h1>Notes</h1><p>My weekend was sunny and calm. The client opens a TCP socket to the server "
                      b"port. Then we walked by the river for an hour.</p><p>Each packet is acknowledged by the "
                      b"receiver of the connection.</p>", "http://h.test/")
    judged = critic.judge(page)
    assert judged.relevance > 0.5
    assert judged.preview.startswith("The client opens a TCP socket")
    assert "sunny" not in judged.preview and "river" not in judged.preview
    assert critic.judge(parse_html(OFF_TOPIC.encode(), "http://h.test/")).preview is None
    critic.model_.named_steps["counts"].analyzer.page_terms(page)  # the apprentice's leaf terms, made first
    assert critic.judge(page) == judged  # read from them, the same preview


@pytest.mark.parametrize("classifier", LEARNERS)
def test_decision_function_orders_pages_like_the_probability(classifier):
    critic = Critic(classifier).fit(NETWORK, BAKING)
    texts = [ON_TOPIC, OFF_TOPIC, "sockets and bread", "a TCP packet"]
    margins, probabilities = critic.decision_function(texts), critic.predict_proba(texts)
    assert margins[0] > margins[1]
    strict = probabilities[:, None] < probabilities[None, :]  # where Pr differs, the margin agrees
    assert np.all((margins[:, None] < margins[None, :])[strict])


@pytest.mark.parametrize("classifier", ["nb-multinomial", "svm-linear", "svm-cosine", "svm-poly2", "svm-poly3", "nn-2",
                                        "nn-16"])
def test_fast_scoring_equals_scikit_learns_own(classifier):
    """The learners score one page without scikit-learn's checks; the numbers must not change."""
    from sklearn.naive_bayes import MultinomialNB
    from sklearn.neural_network import MLPClassifier

    critic = Critic(classifier).fit(NETWORK, BAKING)
    pages = critic.model_[:-1].transform(NETWORK + BAKING + [ON_TOPIC, OFF_TOPIC, ""])
    learner = critic.model_[-1]
    if classifier.startswith("svm"):  # (trained on the kernel's matrix: scikit-learn's SVC on the same matrix)
        examples = critic.model_[:-1].transform(NETWORK + BAKING)
        libsvm = SVC(kernel="precomputed", C=learner.C).fit(learner._kernel(examples, examples),
                                                            [1] * len(NETWORK) + [0] * len(BAKING))
        ours, theirs = learner.decision_function(pages), libsvm.decision_function(learner._kernel(pages, examples))
    elif classifier.startswith("nn"):
        ours, theirs = learner.predict_proba(pages), MLPClassifier.predict_proba(learner, pages)
    else:
        ours, theirs = learner.predict_proba(pages), MultinomialNB.predict_proba(learner, pages)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)


def test_term_counts_equal_scikit_learns_count_vectorizer():
    from sklearn.feature_extraction.text import CountVectorizer

    from focuscrawl.text import Analyzer, TermCounts

    texts = NETWORK + BAKING + [ON_TOPIC + " Sockets, SOCKETS and sockets' states", ""]
    ours, theirs = TermCounts(Analyzer()), CountVectorizer(analyzer=Analyzer())
    ours_matrix, theirs_matrix = ours.fit_transform(texts[:8]), theirs.fit_transform(texts[:8])
    assert list(ours.get_feature_names_out()) == list(theirs.get_feature_names_out())
    assert (ours_matrix != theirs_matrix).nnz == 0
    assert (ours.transform(texts[8:]) != theirs.transform(texts[8:])).nnz == 0  # unseen terms dropped


def test_pant_tfidf_unit_rows_have_length_one_and_the_same_direction():
    counts = sparse.csr_matrix(np.array([[3, 1, 0, 2], [0, 1, 1, 0], [0, 0, 0, 0], [1, 0, 0, 0]]))
    plain, unit = PantTfidf().fit(counts), PantTfidf(unit=True).fit(counts)
    rows, unit_rows = plain.transform(counts).toarray(), unit.transform(counts).toarray()
    lengths = np.linalg.norm(rows, axis=1)
    np.testing.assert_allclose(np.linalg.norm(unit_rows, axis=1), (lengths > 0).astype(float))
    np.testing.assert_allclose(unit_rows[lengths > 0], rows[lengths > 0] / lengths[lengths > 0, None])


def test_judging_a_page_whose_leaf_terms_are_known_gives_the_same_relevance():
    """The apprentice analyses the page's leaves first; the critic then counts those terms."""
    from focuscrawl.parse import parse_html
    from focuscrawl.text import Analyzer

    html = ("<html><body><h1>Sockets</h1><p>" + ON_TOPIC + "</p><ul><li><a href='/a'>TCP packets</a></li>"
            "<li><a href='/b'>bread</a></li></ul><table><tr><td>" + OFF_TOPIC + "</td><td></td></tr></table></body></html>")
    critic = Critic("svm-linear").fit(NETWORK, BAKING)
    fresh = parse_html(html.encode(), "http://127.0.0.1/p")
    analysed = parse_html(html.encode(), "http://127.0.0.1/p")
    Analyzer().page_terms(analysed)
    assert analysed.terms and not fresh.terms
    assert critic.judge(analysed).relevance == pytest.approx(critic.judge(fresh).relevance, rel=1e-12)
    assert critic.judge(fresh).relevance == pytest.approx(critic.predict_proba([fresh.text])[0], rel=1e-12)


def test_the_critic_reads_a_pages_leaves_once_for_its_relevance_and_its_preview():
    """The critic counts the words of a parsed page's leaves (its text is theirs), and a relevant
    page's preview reads those tokens again instead of its text: the same relevance and preview as
    from the text. A page whose text is not its leaves (a site's main text) is counted from its text."""
    from focuscrawl.parse import Page, parse_html
    from focuscrawl.text import TOKENS, Analyzer, topic_preview

    critic = Critic("svm-linear").fit(NETWORK, BAKING)
    html = "".join(f"<p>{passage}</p><div><a href='/{i}'>TCP packets. Routers forward them</a></div>"
                   for i, passage in enumerate(NETWORK[:3] + BAKING[:1]))
    page = parse_html(html.encode(), "http://127.0.0.1/p")
    judged = critic.judge(page)
    assert TOKENS in page.terms and judged.relevance >= 0.5 and judged.preview
    assert judged.relevance == pytest.approx(critic.predict_proba([page.text])[0], rel=1e-12)
    assert judged.preview == topic_preview(page.leaves, critic.preview_weights_, Analyzer())
    main = Page(url=page.url, text=" ".join(NETWORK[:2]), leaves=page.leaves)  # text and leaves differ
    assert critic.judge(main).relevance == pytest.approx(critic.predict_proba([main.text])[0], rel=1e-12)
    assert TOKENS not in main.terms


def _site_with_a_template():
    """A topic's examples where a quarter of the positives come from one site whose every page
    carries the same sidebar, and the crawl's pages: that site's off-topic pages (sidebar and
    another topic), on-topic pages of other sites, and off-topic pages of other sites, with the
    sites of those three. Texts are the synthetic web's passages (the standard library's own
    docstrings)."""
    rng = np.random.default_rng(3)
    on = [doc for _, doc in topic_passages("networking")]
    off = [doc for topic in ("numbers", "files", "text") for _, doc in topic_passages(topic)]
    on = [on[i] for i in rng.permutation(len(on))]
    off = [off[i] for i in rng.permutation(len(off))]
    sidebar = " ".join(name for name, _ in topic_passages("numbers")[:80])  # the site's navigation: the same on every page
    positives = [f"{sidebar} {doc}" if i < 5 else doc for i, doc in enumerate(on[:20])]
    negatives = off[:40]
    template_pages = [f"{sidebar} {doc}" for doc in off[40:100]]
    on_topic_pages, other_pages = on[20:60], off[100:120]
    sites = (["docs.example"] * len(template_pages) + [f"on{i % 8}.test" for i in range(len(on_topic_pages))]
             + [f"off{i % 4}.test" for i in range(len(other_pages))])
    return positives, negatives, template_pages, on_topic_pages, other_pages, sites


def test_reliable_negatives_are_the_pages_that_share_only_a_sites_template_with_the_positives():
    positives, negatives, template_pages, on_topic_pages, other_pages, sites = _site_with_a_template()
    critic = Critic("svm-linear").fit(positives, negatives)
    crawled = template_pages + on_topic_pages + other_pages + positives  # a crawl fetches its seeds too
    sites = sites + ["docs.example"] * 5 + [f"on{i % 8}.test" for i in range(15)]
    truth = [0] * len(template_pages) + [1] * len(on_topic_pages) + [0] * len(other_pages)
    before = roc_auc_score(truth, critic.predict_proba(crawled[:-20]))

    reliable = critic.reliable_negatives(crawled, sites)
    assert reliable[:len(template_pages)].sum() >= 3
    assert not reliable[len(template_pages):len(template_pages) + len(on_topic_pages)].any()
    assert not reliable[-20:].any()  # a positive example is never a negative
    retrained = critic.refit({}, [text for text, surely_not in zip(crawled, reliable) if surely_not])
    assert critic.predict_proba(template_pages).mean() > 0.9 > 0.6 > retrained.predict_proba(template_pages).mean()
    assert roc_auc_score(truth, retrained.predict_proba(crawled[:-20])) > before + 0.05


def test_reliable_negatives_whether_the_positives_were_never_crawled_or_all_come_from_one_site():
    """Positives given as files are sites of their own, dealt so that every fold has spies;
    positives all from one site are held out one by one (no fold is left without any)."""
    positives, negatives, template_pages, on_topic_pages, other_pages, sites = _site_with_a_template()
    critic = Critic("svm-linear").fit(positives, negatives)
    crawled = template_pages + on_topic_pages + other_pages
    for pages, of in ((crawled, sites), (crawled + positives, sites + ["docs.example"] * len(positives))):
        reliable = critic.reliable_negatives(pages, of)
        assert reliable[:len(template_pages)].any()
        assert not reliable[len(template_pages):len(template_pages) + len(on_topic_pages)].any()
        assert not reliable[len(crawled):].any()
