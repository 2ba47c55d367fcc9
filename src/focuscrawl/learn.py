"""Learners behind one scikit-learn interface, and the critic that scores every fetched page."""

from __future__ import annotations

import pickle
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import optimize, sparse
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.naive_bayes import MultinomialNB
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.svm import SVC, LinearSVC

from focuscrawl.config import LEARNERS, ModelError
from focuscrawl.text import Analyzer, FeatureSelector, PantTfidf, TermCounts, as_csr, topic_preview


CRITIC_MODEL = "critic"  # the crawl's critic among the store's models (a single topic's, or a taxonomy)
RELEVANT = 0.5  # a two-class critic's decision boundary: at or above, the page is on the topic
MIN_INDICATORS = 3  # BINGO!'s N_w: the indicator terms a page must hold (all of them, when fewer are chosen)
WITHOUT_INDICATORS = 0.49  # the most a page without them scores: rejected, its links still followed as close calls


@dataclass(slots=True)
class Judgement:
    """What a critic says of a page: Pr(on topic), and with a taxonomy which topic, how surely
    (BINGO! eq. 2.22) and the topic-specific preview (thesis §2.3.3)."""
    relevance: float
    topic: str | None = None
    confidence: float | None = None
    preview: str | None = None


def make_classifier(name: str, analyzer: Analyzer, learning_rate: float = 0.2, epochs: int = 500,
                    selection: str | None = None, features: int = 2000, candidates: int = 10000) -> Pipeline:
    """Text in, Pr(class) out. ``name`` is one of LEARNERS (the config's ``classifier``); every
    learner but multinomial NB sees Pant's TF-IDF vectors (eq. 1); ``selection`` ('mi' or 'ig')
    first keeps BINGO!'s ``features`` best of the ``candidates`` most frequent topic terms."""
    if name not in LEARNERS:
        raise ValueError(f"unknown classifier {name!r} (known: {', '.join(LEARNERS)})")
    steps = [("counts", TermCounts(analyzer))]
    if selection:
        steps.append(("select", FeatureSelector(selection, features, candidates)))
    family, _, variant = name.partition("-")
    if name == "nb-multinomial":
        # Chakrabarti eqs. 1-2: multinomial over term counts, Laplace smoothing
        return Pipeline([*steps, ("nb", MultinomialNaiveBayes(alpha=1.0))])
    if family == "nb":
        # Pant §4.2: per-term class densities, normal (MLE mean and variance) or a Gaussian kernel
        # on every training value with σ = 1/√n (John & Langley 1995)
        return Pipeline([*steps, ("tfidf", PantTfidf()), ("nb", NormalNB() if variant == "normal" else KernelNB())])
    if name == "svm-cosine":
        # ours: the linear SVM on rows of unit length, each page a direction, as cosine similarity
        # has it. On Pant's TF-IDF alone a page's margin grows with its number of distinct terms
        # (each at least half its idf), so long pages outscore short ones (plotting on the test
        # web: gnuplot's pages, 1.5 KB and all on the topic, 0.49 on average; 0.71 so). Unit rows
        # make the examples separable with room to spare: C = 10 is a hard margin (3 to 100 rank
        # the same). See the README for what it measured.
        return Pipeline([*steps, ("tfidf", PantTfidf(unit=True)), ("svm", PlattSVM(C=10.0))])
    if family == "svm":
        # Pant §4.3: polynomial kernels of degree 1, 2, 3, C = 1, Platt's sigmoid on the outputs.
        # Weka's SMO scales attributes to [0, 1] before a polynomial kernel; unit rows bound it alike
        degree = 1 if variant == "linear" else int(variant[-1])
        kernel = {"kernel": "linear"} if degree == 1 else {"kernel": "poly", "degree": degree}
        return Pipeline([*steps, ("tfidf", PantTfidf(unit=degree > 1)), ("svm", PlattSVM(C=1.0, **kernel))])
    # Pant §4.4: three layers, 2/4/16 sigmoid hidden units, learning rate 0.1/0.2/0.4, 500 epochs
    # (one gradient step per epoch over the training set: per-example steps, as Weka takes, cost 20x
    # the time for the same ranking on our topics; the fixed epoch count is the stopping rule)
    network = SigmoidNetwork(hidden_layer_sizes=(int(variant),), activation="logistic", solver="sgd",
                             learning_rate_init=learning_rate, momentum=0.0, max_iter=epochs, n_iter_no_change=epochs,
                             random_state=0)
    return Pipeline([*steps, ("tfidf", PantTfidf()), ("nn", network)])


class _NaiveBayes(ClassifierMixin, BaseEstimator):
    """Naive Bayes from per-class log likelihoods log p(x|c) + log Pr(c) (Pant eqs. 2–4), which
    subclasses give as ``_joint_log_likelihood``. Scoring skips scikit-learn's input checks: the
    crawler asks about one page at a time, and the checks would cost more than the arithmetic."""

    def predict_proba(self, X) -> np.ndarray:
        return _softmax(np.asarray(self._joint_log_likelihood(X)))

    def decision_function(self, X) -> np.ndarray:
        """log Pr(c₁|x) − log Pr(c₀|x): exact where the probabilities round to 0 or 1."""
        joint = np.asarray(self._joint_log_likelihood(X))
        return joint[:, 1] - joint[:, 0]

    def predict(self, X) -> np.ndarray:
        return self.classes_[np.argmax(self._joint_log_likelihood(X), axis=1)]


class MultinomialNaiveBayes(_NaiveBayes, MultinomialNB):
    """Chakrabarti eqs. 1–2: scikit-learn's multinomial Naive Bayes, scored without its checks."""

    def fit(self, X, y, sample_weight=None) -> MultinomialNaiveBayes:
        super().fit(X, y, sample_weight)
        self.term_log_prob_ = np.ascontiguousarray(self.feature_log_prob_.T)  # the transposed view is copied per call
        return self

    def _joint_log_likelihood(self, X) -> np.ndarray:
        return X @ self.term_log_prob_ + self.class_log_prior_


class NormalNB(_NaiveBayes):
    """Naive Bayes with a normal density per term and class (Pant §4.2), fitted by maximum
    likelihood on sparse vectors. A standard deviation never falls below ``min_std`` (Weka's
    floor: its default precision 0.01 / 6), so terms a class never shows still have a density."""

    def __init__(self, min_std: float = 0.01 / 6):
        self.min_std = min_std

    def fit(self, X, y) -> NormalNB:
        X, y = sparse.csr_matrix(X, dtype=np.float64), np.asarray(y)
        self.classes_ = np.unique(y)
        means, variances = [], []
        for c in self.classes_:
            rows = X[y == c]
            mean = np.asarray(rows.mean(axis=0)).ravel()
            variances.append(np.asarray(rows.multiply(rows).mean(axis=0)).ravel() - mean ** 2)
            means.append(mean)
        self.mean_ = np.array(means)
        self.var_ = np.maximum(np.array(variances), self.min_std ** 2)
        self.log_prior_ = np.log(np.array([np.mean(y == c) for c in self.classes_]))
        # Σ_j log N(x_j; μ, σ²) = −½ Σ log 2πσ² − Σ μ²/2σ² − Σ x²/2σ² + Σ xμ/σ²: the first two
        # terms are the same for every page, the last two only need the page's non-zero terms
        self.half_precision_ = np.ascontiguousarray((0.5 / self.var_).T)  # a view would be copied per call
        self.mean_precision_ = np.ascontiguousarray((self.mean_ / self.var_).T)
        self.constant_ = self.log_prior_ - 0.5 * np.sum(np.log(2 * np.pi * self.var_) + self.mean_ ** 2 / self.var_, axis=1)
        return self

    def _joint_log_likelihood(self, X) -> np.ndarray:
        X = as_csr(X)
        squares = sparse.csr_matrix((X.data ** 2, X.indices, X.indptr), shape=X.shape)
        return self.constant_ - squares @ self.half_precision_ + X @ self.mean_precision_


class KernelNB(_NaiveBayes):
    """Naive Bayes with kernel density estimation (Pant eq. 5): p(x_j | c) is the mean of Gaussian
    kernels N(x_j; x_ij, σ_c) over the class's training examples, σ_c = 1/√n_c. Most values are
    0, so the kernels on a term's zero values are one weighted kernel, the log density of a 0 is
    summed once per class at training time, and each page only pays for its own non-zero terms.
    The classes' examples sit side by side (class c's term j is column c·V + j), each column's
    values sorted, so a page costs one pass of array operations over the values near its own."""

    NEGLIGIBLE = 36.0  # kernels e^-36 below the largest: even a thousand of them change the sum by < 1e-12

    def fit(self, X, y) -> KernelNB:
        X, y = sparse.csr_matrix(X, dtype=np.float64), np.asarray(y)
        self.classes_ = np.unique(y)
        self.terms_ = X.shape[1]
        by_class = [X[y == c] for c in self.classes_]
        self.examples_ = np.array([rows.shape[0] for rows in by_class])
        self.sigma_ = 1.0 / np.sqrt(self.examples_)
        self.log_prior_ = np.log(self.examples_ / len(y))
        stacked = sparse.hstack([sparse.csc_matrix(rows, shape=(max(self.examples_), X.shape[1])) for rows in by_class],
                                format="csc")
        # values in units of √2·σ of their class (a kernel's exponent is then −(x − x_i)²), sorted
        # within each column, and keyed column · span + value for finding the values near x
        self.scale_ = 1.0 / (np.sqrt(2.0) * self.sigma_)
        column = np.repeat(np.arange(stacked.shape[1]), np.diff(stacked.indptr))
        values = stacked.data * self.scale_[column // self.terms_]
        order = np.lexsort((values, column))
        self.span_ = float(np.ceil(values.max(initial=0.0))) + 1.0
        # an endless sentinel at the end: the value after any column's last is always there to read
        self.values_ = np.append(values[order], np.inf)
        self.keys_ = np.append(column[order] * self.span_ + values[order], np.inf)
        self.indptr_ = stacked.indptr
        every = np.arange(len(self.classes_) * X.shape[1])
        self.log_zero_ = self._log_density(every, np.zeros(len(every))).reshape(len(self.classes_), X.shape[1])
        self.log_zero_total_ = self.log_zero_.sum(axis=1)
        return self

    def _log_density(self, columns: np.ndarray, values: np.ndarray) -> np.ndarray:
        """log p(values[k] | class, term) for stacked columns[k]: a log-mean-exp of the kernels on
        the column's training values near x (the others are negligible) and, once, of the
        kernel at 0 times the number of zeros."""
        of_class = columns // self.terms_
        x = values * self.scale_[of_class]
        starts, ends = self.indptr_[columns], self.indptr_[columns + 1]
        zeros = self.examples_[of_class] - (ends - starts)
        base = columns * self.span_
        above = np.searchsorted(self.keys_, base + x)  # the first stored value ≥ x, and the one before
        below_gap = np.where(above > starts, x - self.values_[above - 1], np.inf)
        above_gap = np.where(above < ends, self.values_[above] - x, np.inf)
        nearest = np.minimum(np.minimum(below_gap, above_gap) ** 2, np.where(zeros > 0, x * x, np.inf))  # −(largest exponent)
        radius = np.sqrt(nearest + self.NEGLIGIBLE)
        low = np.maximum(np.searchsorted(self.keys_, base + x - radius, "left"), starts)
        lengths = np.maximum(np.minimum(np.searchsorted(self.keys_, base + x + radius, "right"), ends) - low, 0)
        offsets = np.cumsum(lengths) - lengths
        near = np.arange(lengths.sum()) + np.repeat(low - offsets, lengths)
        exponents = np.repeat(x, lengths) - self.values_[near]
        exponents *= exponents
        exponents -= np.repeat(nearest, lengths)
        total = zeros * np.exp(nearest - x * x)
        filled = lengths > 0
        if filled.any():
            total[filled] += np.add.reduceat(np.exp(-exponents), offsets[filled])
        sigma = self.sigma_[of_class]
        return np.log(total) - nearest - np.log(self.examples_[of_class]) - np.log(sigma * np.sqrt(2 * np.pi))

    def _joint_log_likelihood(self, X) -> np.ndarray:
        X = as_csr(X)
        classes = len(self.classes_)
        result = np.tile(self.log_zero_total_ + self.log_prior_, (X.shape[0], 1))
        for i in range(X.shape[0]):
            columns = X.indices[X.indptr[i]:X.indptr[i + 1]]
            if len(columns):
                stacked = (columns[None, :] + self.terms_ * np.arange(classes)[:, None]).ravel()
                gain = self._log_density(stacked, np.tile(X.data[X.indptr[i]:X.indptr[i + 1]], classes))
                result[i] += (gain - self.log_zero_.ravel()[stacked]).reshape(classes, -1).sum(axis=1)
        return result


def _softmax(scores: np.ndarray) -> np.ndarray:
    scores = scores - scores.max(axis=1, keepdims=True)
    exp = np.exp(scores)
    return exp / exp.sum(axis=1, keepdims=True)


GRAM_MAX_PAGES = 4000  # PlattSVM: the kernel's matrix of at most these many pages (128 MB)


class PlattSVM(ClassifierMixin, BaseEstimator):
    """An SVM whose outputs g(x) become Pr(+1|x) = 1 / (1 + exp(A·g(x) + B)) (Platt 1999; Pant eq. 7).
    A and B are fitted on cross-validated outputs when each class has ``folds`` examples, else on
    the training outputs, as Weka's SMO does (and also when folds of a tiny set rank so badly that
    the fitted sigmoid falls as g rises); targets are Platt's smoothed labels. libsvm solves on
    the kernel's matrix of the training pages, worked out once for the folds and the final fit
    (a critic's retraining on 177 pages: 374 → 16 ms), or with its own kernel and cache past
    ``GRAM_MAX_PAGES``."""

    def __init__(self, kernel: str = "linear", C: float = 1.0, degree: int = 3, folds: int = 5):
        self.kernel, self.C, self.degree, self.folds = kernel, C, degree, folds

    def fit(self, X, y) -> PlattSVM:
        y = np.asarray(y)
        self.classes_ = np.unique(y)
        X = as_csr(X).astype(np.float64)
        if X.shape[0] <= GRAM_MAX_PAGES:
            pages, svm = self._kernel(X, X), SVC(kernel="precomputed", C=self.C)
        else:
            pages, svm = X, SVC(kernel=self.kernel, C=self.C, degree=self.degree, gamma=1.0, coef0=0.0)  # Weka: (x·y)^p
        smallest = min(np.sum(y == c) for c in self.classes_)
        if smallest >= self.folds:  # (each fold's part of the matrix: scikit-learn cuts a precomputed kernel)
            scores = cross_val_predict(svm, pages, y, cv=StratifiedKFold(self.folds), method="decision_function")
        else:
            scores = None
        self._keep_plain_arrays(svm.fit(pages, y), X[svm.support_])
        positive = y == self.classes_[1]
        self.sigmoid_ = platt_sigmoid(scores, positive) if scores is not None else (0.0, 0.0)
        if self.sigmoid_[0] >= 0:  # no cross-validation, or folds too small to rank: an inverted or flat fit
            self.sigmoid_ = platt_sigmoid(self.decision_function(X), positive)
        return self

    def _kernel(self, A: sparse.csr_matrix, B: sparse.csr_matrix) -> np.ndarray:
        """K(a, b) for the rows of A and B: a·b, or Weka's polynomial (a·b)^p."""
        products = (A @ B.T).toarray()
        if self.kernel == "linear":
            return products
        if self.kernel == "poly":
            return products ** self.degree
        raise ValueError(f"PlattSVM has no kernel {self.kernel!r} (linear, poly)")

    def _keep_plain_arrays(self, svm: SVC, support_vectors) -> None:
        """g(x) = Σ α_i y_i K(s_i, x) + b of a fitted ``svm`` kept as plain arrays, so scoring one
        page is one product: w·x for the linear kernel (w dense), (S·x)^p for Weka's polynomial
        (x·y)^p. ``support_vectors``: the s_i (the svm keeps none when it was given the kernel's matrix)."""
        dual_coef = np.asarray(svm.dual_coef_.toarray() if sparse.issparse(svm.dual_coef_) else svm.dual_coef_).ravel()
        if self.kernel == "linear":
            self.weights_ = np.asarray(sparse.csr_matrix(support_vectors).T @ dual_coef).ravel()
        else:
            self.support_vectors_ = sparse.csr_matrix(support_vectors)
            self.dual_coef_ = dual_coef
        self.intercept_ = float(svm.intercept_[0])

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        if "svm_" in state and "weights_" not in state and "dual_coef_" not in state:  # pickled before they were kept
            self._keep_plain_arrays(self.svm_, self.svm_.support_vectors_)

    def decision_function(self, X) -> np.ndarray:
        if self.kernel == "linear":
            return np.asarray(X @ self.weights_).ravel() + self.intercept_
        X = as_csr(X)
        margins = np.empty(X.shape[0])
        for start in range(0, X.shape[0], 256):  # pages as dense columns, a few at a time: scipy's fastest product
            rows = X[start:start + 256] if X.shape[0] > 256 else X
            pages = np.zeros((X.shape[1], rows.shape[0]))
            pages[rows.indices, np.repeat(np.arange(rows.shape[0]), np.diff(rows.indptr))] = rows.data
            margins[start:start + rows.shape[0]] = self.dual_coef_ @ (self.support_vectors_ @ pages) ** self.degree
        return margins + self.intercept_

    def predict_proba(self, X) -> np.ndarray:
        a, b = self.sigmoid_
        positive = 1.0 / (1.0 + np.exp(np.clip(a * self.decision_function(X) + b, -500, 500)))
        return np.column_stack([1.0 - positive, positive])

    def predict(self, X) -> np.ndarray:
        return self.classes_[(self.predict_proba(X)[:, 1] >= 0.5).astype(int)]


class SigmoidNetwork(MLPClassifier):
    """Pant §4.4's network: scikit-learn's multi-layer perceptron, with the forward pass of one
    hidden layer of sigmoid units written out (its own ``predict_proba`` checks the input first,
    which costs more than the pass itself for one page)."""

    def predict_proba(self, X) -> np.ndarray:
        hidden = expit(X @ self.coefs_[0] + self.intercepts_[0])
        positive = expit(hidden @ self.coefs_[1] + self.intercepts_[1]).ravel()
        return np.column_stack([1.0 - positive, positive])


def platt_sigmoid(scores: np.ndarray, positive: np.ndarray) -> tuple[float, float]:
    """(A, B) minimising the log loss against Platt's targets (N+ + 1)/(N+ + 2) and 1/(N- + 2)."""
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    targets = np.where(positive, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))

    def loss(params: np.ndarray) -> tuple[float, np.ndarray]:
        z = params[0] * scores + params[1]
        p = 1.0 / (1.0 + np.exp(np.clip(z, -500, 500)))
        # −log p = log(1 + e^z), −log(1 − p) = log(1 + e^−z); d/dz of the sum is t − p
        value = np.sum(targets * np.logaddexp(0, z) + (1 - targets) * np.logaddexp(0, -z))
        gradient_z = targets - p
        return value, np.array([np.dot(gradient_z, scores), gradient_z.sum()])

    start = np.array([0.0, np.log((n_neg + 1.0) / (n_pos + 1.0))])
    result = optimize.minimize(loss, start, jac=True, method="L-BFGS-B")
    return float(result.x[0]), float(result.x[1])


class Critic:
    """Pr(relevant | page) for the topic, trained from positive and negative example texts."""

    indicators: frozenset[str] = frozenset()  # the reviser's (BINGO! §2.3.2): terms an accepted page holds

    def __init__(self, classifier: str = "svm-linear", language: str = "en", stem: bool = True, **options):
        """``classifier``: by default Pant's linear SVM (a crawl's default, ``svm-cosine``, is the
        config's); ``options``: make_classifier's keywords (learning_rate, epochs, selection,
        features, candidates)."""
        self.classifier = classifier
        self.language = language
        self.stem = stem
        self.options = options

    def fit(self, positives: list[str], negatives: list[str]) -> Critic:
        if not positives or not negatives:
            raise ValueError("the critic needs at least one positive and one negative example")
        self.model_ = make_classifier(self.classifier, Analyzer(self.language, self.stem), **self.options)
        if "nn" in self.model_.named_steps:  # one gradient step per epoch (see make_classifier)
            self.model_.set_params(nn__batch_size=len(positives) + len(negatives))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # Pant's networks stop after 500 epochs by design
            self.model_.fit(positives + negatives, [1] * len(positives) + [0] * len(negatives))
        self.positive_column_ = list(self.model_.classes_).index(1)
        self.preview_weights_ = self._mutual_information(positives, negatives)
        self.examples_ = (list(positives), list(negatives))
        return self

    def refit(self, archetypes: dict[str, dict[str, str]], negatives: Sequence[str] = (), keep: bool = False,
              warn=print, part: str = "archetypes") -> Critic:
        """Every critic's retraining: a new critic of the same kind trained on the original
        examples plus ``archetypes`` (topic -> {url: text}; a single topic's critic takes every
        topic's as positives: BINGO!'s archetypes, Pant's pseudo examples) and ``negatives``;
        feature selection, when configured, runs again. They are the ``part`` of its training
        basis that this kind of retraining owns: the next one of the same kind replaces them, not
        piles them up, and the other kinds' parts stay (BINGO!'s archetypes and the reliable
        negatives each retrain without undoing the other). With ``keep`` they join the originals
        instead (the training basis of the learning phase, §2.5.3). ``warn`` is a taxonomy's
        (topics it cannot train); a single topic's critic has nothing to say."""
        if not hasattr(self, "examples_"):
            raise ModelError("this critic was saved without its training examples; it cannot be retrained")
        originals = self.examples_
        positives = [text for pages in archetypes.values() for text in pages.values()]
        parts = {**self.parts, part: (positives, list(negatives))}
        critic = Critic(self.classifier, self.language, self.stem, **self.options)
        critic.fit(originals[0] + [text for texts, _ in parts.values() for text in texts],
                   originals[1] + [text for _, texts in parts.values() for text in texts])
        critic.user_examples_ = self.user_examples
        if keep:
            critic.examples_ = (originals[0] + positives, originals[1] + list(negatives))
            del parts[part]
        else:
            critic.examples_ = originals
        critic.parts_ = parts
        return critic

    def judging_copy(self) -> Critic:
        """This critic without its training texts (most of its size: 8 of 9.7 MB pickled on a
        test-web topic with reliable negatives), for the judging workers: judging needs none of
        them; the copy cannot be retrained."""
        copy = type(self).__new__(type(self))
        copy.__dict__ = {key: value for key, value in self.__dict__.items()
                         if key not in ("examples_", "user_examples_", "parts_")}
        return copy

    @property
    def parts(self) -> dict[str, tuple[list[str], list[str]]]:
        """What each kind of retraining added to the originals: kind -> (positives, negatives)."""
        return getattr(self, "parts_", {})

    @property
    def user_examples(self) -> tuple[list[str], list[str]]:
        """The examples the user gave (a retrained critic's ``examples_`` may hold archetypes too)."""
        return getattr(self, "user_examples_", self.examples_)

    def agreement(self, positives: list[str], negatives: list[str]) -> float:
        """How well a critic of the same kind trained on these pages alone ranks the user's own
        examples (ROC AUC): do archetypes still describe the user's topic?"""
        probe = Critic(self.classifier, self.language, self.stem, **self.options).fit(positives, negatives)
        mine, theirs = self.user_examples
        return float(roc_auc_score([1] * len(mine) + [0] * len(theirs), probe.predict_proba(mine + theirs)))

    def reliable_negatives(self, unlabeled: list[str], sites: list[str], spy_quantile: float = 0.05,
                           folds: int = 5, seed: int = 0) -> np.ndarray:
        """Which of the crawl's pages (``unlabeled``, from ``sites``) are surely off the topic: the
        spy technique of Liu, Lee, Yu & Li (ICML 2002, S-EM's first step), cross-fitted by site.
        Each fold holds out whole sites, with those of the user's positives that were crawled
        there (found by their text; a positive given as a file is a site of its own), and a linear
        SVM on Pant's TF-IDF learns the other positives against the other crawled pages and the
        user's negatives. The held-out positives ("spies") behave as the on-topic pages among the
        crawled ones do; a held-out page whose margin is below the ``spy_quantile`` of the spies'
        is a reliable negative. Why sites: a seed's site shares its template with its off-topic
        pages, and a critic learns the template as the topic; a site's pages held out with its
        seeds are judged by their own words, with nothing learnt of the site's template, whether
        the site is off the topic (its pages fall below the spies) or wholly on it (they score as
        its seeds do). With the positives all on one site, they are held out one by one instead."""
        positives, negatives = self.user_examples
        reliable = np.zeros(len(unlabeled), dtype=bool)
        given = set(positives)
        site_of_text = dict(zip(unlabeled, sites))
        rows = [i for i, text in enumerate(unlabeled) if text not in given]  # the seeds are crawled too
        if len(rows) < 2 or len(positives) < 2:
            return reliable
        texts = positives + [unlabeled[i] for i in rows] + list(negatives)
        groups = [site_of_text.get(text, f"example {i}") for i, text in enumerate(positives)]
        if len(set(groups)) < 2:  # one site: no fold could learn the topic without it
            groups = [f"example {i}" for i in range(len(positives))]
        folds = min(folds, len(set(groups)))
        fold = np.concatenate([_folds_of(groups, [sites[i] for i in rows], folds, seed),
                               np.full(len(negatives), -1)])  # the user's negatives are always learnt
        X = make_pipeline(TermCounts(Analyzer(self.language, self.stem)), PantTfidf()).fit_transform(texts)
        is_positive = np.arange(len(texts)) < len(positives)
        margins = np.zeros(len(texts))
        for k in range(folds):  # every fold holds positives (_folds_of), so every training part has some too
            held = np.flatnonzero(fold == k)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)  # liblinear's iteration cap: the margins still rank
                svm = LinearSVC(C=1.0).fit(X[fold != k], is_positive[fold != k])
            margins[held] = svm.decision_function(X[held])  # held out only: an SVM fits its own training pages
        threshold = np.quantile(margins[is_positive], spy_quantile)  # the held-out positives are the spies
        reliable[np.array(rows)[margins[len(positives):len(positives) + len(rows)] < threshold]] = True
        return reliable

    def feature_space(self) -> set[str]:
        """The terms the learner sees (after feature selection, when there is one)."""
        names = self.model_.named_steps["counts"].get_feature_names_out()
        selector = self.model_.named_steps.get("select")
        return set((names[selector.support_] if selector is not None else names).tolist())

    def _mutual_information(self, positives: list[str], negatives: list[str]) -> dict[str, float]:
        """MI weights of the topic's best terms (BINGO! §2.3.2), for the pages' previews."""
        vectorizer = self.model_.named_steps["counts"]
        selector = FeatureSelector("mi").fit(vectorizer.transform(positives + negatives),
                                             [1] * len(positives) + [0] * len(negatives))
        names = vectorizer.get_feature_names_out()
        return {names[i]: float(w) for i, w in zip(selector.ranking_, selector.weights_)}

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        relevance = self._learner().predict_proba(self._features(texts))[:, self.positive_column_]
        if self.indicators:
            analyzer = self.model_.named_steps["counts"].analyzer
            relevance = np.array([self._indicated(float(p), analyzer.term_frequencies(text))
                                  for p, text in zip(relevance, texts)])
        return relevance

    def with_indicators(self, indicators: dict[str, set[str]]) -> Critic:
        """The critic accepting only pages that hold N_w of these terms (the topic's, under '')."""
        self.indicators = frozenset(term for terms in indicators.values() for term in terms)
        return self

    def _indicated(self, relevance: float, frequencies: dict[str, int]) -> float:
        """BINGO!'s restriction by indicators: an accepted page without N_w of them is rejected."""
        if relevance >= RELEVANT and len(self.indicators & frequencies.keys()) < min(MIN_INDICATORS, len(self.indicators)):
            return min(relevance, WITHOUT_INDICATORS)
        return relevance

    def _features(self, texts: list[str] | None = None, frequencies: list[dict[str, int]] | None = None):
        """The pipeline's transforms, called directly (the Pipeline's own per-call bookkeeping
        costs ~0.2 ms, a tenth of classifying a page); from texts, or their term frequencies."""
        steps = self.model_.steps[:-1]
        features = steps[0][1].from_frequencies(frequencies) if texts is None else steps[0][1].transform(texts)
        for _, step in steps[1:]:
            features = step.transform(features)
        return features

    def _learner(self):
        return self.model_.steps[-1][1]

    def decision_function(self, texts: list[str]) -> np.ndarray:
        """The learner's own margin where it has one (SVM, density NB), else the log-odds."""
        if hasattr(self._learner(), "decision_function"):
            margin = self._learner().decision_function(self._features(texts))
            return margin if self.positive_column_ == 1 else -margin
        p = np.clip(self.predict_proba(texts), 1e-12, 1 - 1e-12)
        return np.log(p) - np.log1p(-p)

    def judge_texts(self, texts: list[str]) -> list[Judgement]:
        """Stored pages judged again (no preview: their leaves are not kept)."""
        return [Judgement(float(p)) for p in self.predict_proba(texts)]

    def judge(self, page) -> Judgement:
        """What the crawler calls (a relevant page also gets its preview); reference critics used
        in evaluation judge by URL instead."""
        counts = self.model_.named_steps["counts"]
        if hasattr(counts, "from_frequencies"):  # the page's terms may be known already (the apprentice's)
            frequencies = counts.analyzer.page_frequencies(page)
            relevance = float(self._learner().predict_proba(self._features(frequencies=[frequencies]))[0, self.positive_column_])
            if self.indicators:
                relevance = self._indicated(relevance, frequencies)
        else:  # a critic saved with scikit-learn's CountVectorizer
            relevance = float(self.predict_proba([page.text])[0])
        weights = getattr(self, "preview_weights_", None)  # critics saved before previews have none
        if relevance < RELEVANT or not weights:
            return Judgement(relevance)
        analyzer = counts.analyzer
        return Judgement(relevance, preview=topic_preview(page.content_leaves(), weights, analyzer, terms=analyzer.known_terms(page))
                         or None)

    def save(self, path: Path) -> None:
        save_model(self, path)

    @staticmethod
    def load(path: Path) -> Critic:
        return load_model(path, (Critic,), "a critic")


def _folds_of(positive_groups: list[str], page_groups: list[str], folds: int, seed: int) -> np.ndarray:
    """A fold for each positive and each page, a group's items in one fold: in a seeded shuffle,
    the groups that hold positives are dealt first to the fold with fewest positives (so every
    fold has spies), then the other groups, largest first, to the fold with fewest items."""
    positives, sizes = Counter(positive_groups), Counter(positive_groups + page_groups)
    names = list(sizes)
    np.random.default_rng(seed).shuffle(names)
    spies, load, fold_of = np.zeros(folds), np.zeros(folds), {}
    for name in sorted(names, key=lambda n: (-positives[n], -sizes[n])):
        fold_of[name] = int(np.lexsort((load, spies))[0]) if positives[name] else int(np.argmin(load))
        spies[fold_of[name]] += positives[name]
        load[fold_of[name]] += sizes[name]
    return np.array([fold_of[group] for group in positive_groups + page_groups])


def save_model(model, path: Path) -> None:
    """Pickle atomically: a crash never leaves half a model behind."""
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL))
    tmp.replace(path)


def load_model(path: Path, kinds: tuple[type, ...], what: str):
    """A pickled model of one of ``kinds``; anything else is a ModelError naming the file."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise ModelError(f"{path}: cannot read model: {err.strerror}") from None
    return model_from_bytes(data, kinds, what, str(path))


def model_from_bytes(data: bytes, kinds: tuple[type, ...], what: str, where: str):
    """A pickled model of one of ``kinds``; anything else is a ModelError naming ``where`` it was."""
    try:
        model = pickle.loads(data)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means a bad model
        raise ModelError(f"{where}: not a usable model: {type(err).__name__}: {err}") from None
    if not isinstance(model, kinds):
        raise ModelError(f"{where}: holds a {type(model).__name__}, not {what}")
    return model
