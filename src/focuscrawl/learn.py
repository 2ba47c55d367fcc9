"""Learners behind one scikit-learn interface, and the critic that scores every fetched page."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import numpy as np
from scipy import optimize, sparse
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.naive_bayes import MultinomialNB
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.svm import SVC

from focuscrawl.text import Analyzer


class ModelError(ValueError):
    """A model file that cannot be used."""


class PantTfidf(TransformerMixin, BaseEstimator):
    """Pant & Srinivasan 2005 eq. 1: w = (0.5 + 0.5·tf/max tf) · ln(|E| / df), for terms in the page;
    df and |E| come from the training examples and stay fixed while crawling."""

    def fit(self, counts: sparse.csr_matrix, y=None) -> PantTfidf:
        counts = sparse.csr_matrix(counts)
        df = np.bincount(counts.indices, minlength=counts.shape[1])
        self.idf_ = np.log(counts.shape[0] / np.maximum(df, 1))
        return self

    def transform(self, counts: sparse.csr_matrix) -> sparse.csr_matrix:
        weights = sparse.csr_matrix(counts, dtype=np.float64, copy=True)
        lengths = np.diff(weights.indptr)
        filled = lengths > 0
        row_max = np.ones(len(lengths))
        row_max[filled] = np.maximum.reduceat(weights.data, weights.indptr[:-1][filled]) if weights.nnz else 1.0
        weights.data = (0.5 + 0.5 * weights.data / np.repeat(row_max, lengths)) * self.idf_[weights.indices]
        weights.eliminate_zeros()  # terms found in every example carry no weight
        return weights


def make_classifier(name: str, analyzer: Analyzer) -> Pipeline:
    """Text in, Pr(class) out. Names are the config's ``classifier`` values."""
    vectorizer = CountVectorizer(analyzer=analyzer)
    if name == "svm-linear":
        # Pant §4.3: linear kernel, C = 1, outputs turned into probabilities by Platt's sigmoid
        return Pipeline([("counts", vectorizer), ("tfidf", PantTfidf()), ("svm", PlattSVM(kernel="linear", C=1.0))])
    if name == "nn-4":
        # Pant §4.4: three layers, 4 sigmoid hidden units, learning rate 0.2, 500 epochs
        # (one gradient step per epoch over the training set: per-example steps, as Weka takes, cost 20x
        # the time for the same ranking on our topics; the fixed epoch count is the stopping rule)
        network = MLPClassifier(hidden_layer_sizes=(4,), activation="logistic", solver="sgd", learning_rate_init=0.2,
                                momentum=0.0, max_iter=500, n_iter_no_change=500, random_state=0)
        return Pipeline([("counts", vectorizer), ("tfidf", PantTfidf()), ("nn", network)])
    if name == "nb-multinomial":
        # Chakrabarti eqs. 1-2: multinomial over term counts, Laplace smoothing
        return Pipeline([("counts", vectorizer), ("nb", MultinomialNB(alpha=1.0))])
    raise ValueError(f"unknown classifier {name!r}")


class PlattSVM(ClassifierMixin, BaseEstimator):
    """An SVM whose outputs g(x) become Pr(+1|x) = 1 / (1 + exp(A·g(x) + B)) (Platt 1999; Pant eq. 7).
    A and B are fitted on cross-validated outputs when each class has ``folds`` examples, else on
    the training outputs, as Weka's SMO does; targets are Platt's smoothed labels."""

    def __init__(self, kernel: str = "linear", C: float = 1.0, degree: int = 3, folds: int = 5):
        self.kernel, self.C, self.degree, self.folds = kernel, C, degree, folds

    def fit(self, X, y) -> PlattSVM:
        y = np.asarray(y)
        self.classes_ = np.unique(y)
        svm = SVC(kernel=self.kernel, C=self.C, degree=self.degree, gamma=1.0, coef0=1.0)
        smallest = min(np.sum(y == c) for c in self.classes_)
        if smallest >= self.folds:
            scores = cross_val_predict(svm, X, y, cv=StratifiedKFold(self.folds), method="decision_function")
        else:
            scores = None
        self.svm_ = svm.fit(X, y)
        # a linear SVM is the hyperplane w·x + b; keeping w dense makes scoring one sparse dot product
        self.hyperplane_ = (np.asarray(self.svm_.coef_.todense() if sparse.issparse(self.svm_.coef_) else self.svm_.coef_).ravel(),
                            float(self.svm_.intercept_[0])) if self.kernel == "linear" else None
        if scores is None:
            scores = self.decision_function(X)
        self.sigmoid_ = platt_sigmoid(scores, y == self.classes_[1])
        return self

    def decision_function(self, X) -> np.ndarray:
        if self.hyperplane_ is None:
            return self.svm_.decision_function(X)
        weights, bias = self.hyperplane_
        return np.asarray(X @ weights).ravel() + bias

    def predict_proba(self, X) -> np.ndarray:
        a, b = self.sigmoid_
        positive = 1.0 / (1.0 + np.exp(np.clip(a * self.decision_function(X) + b, -500, 500)))
        return np.column_stack([1.0 - positive, positive])

    def predict(self, X) -> np.ndarray:
        return self.classes_[(self.predict_proba(X)[:, 1] >= 0.5).astype(int)]


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

    def __init__(self, classifier: str = "svm-linear", language: str = "en", stem: bool = True):
        self.classifier = classifier
        self.language = language
        self.stem = stem

    def fit(self, positives: list[str], negatives: list[str]) -> Critic:
        if not positives or not negatives:
            raise ValueError("the critic needs at least one positive and one negative example")
        self.model_ = make_classifier(self.classifier, Analyzer(self.language, self.stem))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # Pant's networks stop after 500 epochs by design
            self.model_.fit(positives + negatives, [1] * len(positives) + [0] * len(negatives))
        self.positive_column_ = list(self.model_.classes_).index(1)
        return self

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        return self.model_.predict_proba(texts)[:, self.positive_column_]

    def score(self, text: str) -> float:
        return float(self.predict_proba([text])[0])

    def score_page(self, page) -> float:
        """What the crawler calls; reference critics used in evaluation judge by URL instead."""
        return self.score(page.text)

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL))
        tmp.replace(path)

    @staticmethod
    def load(path: Path) -> Critic:
        try:
            critic = pickle.loads(Path(path).read_bytes())
        except OSError as err:
            raise ModelError(f"{path}: cannot read model: {err.strerror}") from None
        except Exception as err:  # noqa: BLE001 - any unpickling failure means a bad file
            raise ModelError(f"{path}: not a usable model: {type(err).__name__}: {err}") from None
        if not isinstance(critic, Critic):
            raise ModelError(f"{path}: holds a {type(critic).__name__}, not a critic")
        return critic
