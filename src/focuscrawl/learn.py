"""Learners behind one scikit-learn interface, and the critic that scores every fetched page."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from scipy import sparse
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin, clone
from sklearn.calibration import CalibratedClassifierCV
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.frozen import FrozenEstimator
from sklearn.naive_bayes import MultinomialNB
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
        if weights.nnz:
            row_max = weights.max(axis=1).toarray().ravel()
            rows = np.repeat(np.arange(weights.shape[0]), np.diff(weights.indptr))
            weights.data = (0.5 + 0.5 * weights.data / row_max[rows]) * self.idf_[weights.indices]
        weights.eliminate_zeros()
        return weights


def make_classifier(name: str, analyzer: Analyzer, smallest_class: int) -> Pipeline:
    """Text in, Pr(class) out. Names are the config's ``classifier`` values."""
    vectorizer = CountVectorizer(analyzer=analyzer)
    if name == "svm-linear":
        # Pant §4.3: linear kernel, C = 1, outputs turned into probabilities by Platt's sigmoid,
        # fitted on cross-validated decision values (or, with one example of a class, on the training ones)
        svm = SVC(kernel="linear", C=1.0)
        folds = min(5, smallest_class)
        platt = (CalibratedClassifierCV(svm, method="sigmoid", cv=folds, ensemble=False) if folds >= 2
                 else _PlattOnTrainingData(svm))
        return Pipeline([("counts", vectorizer), ("tfidf", PantTfidf()), ("svm", platt)])
    if name == "nb-multinomial":
        # Chakrabarti eqs. 1-2: multinomial over term counts, Laplace smoothing
        return Pipeline([("counts", vectorizer), ("nb", MultinomialNB(alpha=1.0))])
    raise ValueError(f"unknown classifier {name!r}")


class _PlattOnTrainingData(ClassifierMixin, BaseEstimator):
    """Weka SMO's default: fit the SVM, then the sigmoid on its own training outputs."""

    def __init__(self, estimator):
        self.estimator = estimator

    def fit(self, X, y) -> _PlattOnTrainingData:
        fitted = clone(self.estimator).fit(X, y)
        self.calibrated_ = CalibratedClassifierCV(FrozenEstimator(fitted), method="sigmoid").fit(X, y)
        self.classes_ = self.calibrated_.classes_
        return self

    def predict_proba(self, X) -> np.ndarray:
        return self.calibrated_.predict_proba(X)


class Critic:
    """Pr(relevant | page) for the topic, trained from positive and negative example texts."""

    def __init__(self, classifier: str = "svm-linear", language: str = "en", stem: bool = True):
        self.classifier = classifier
        self.language = language
        self.stem = stem

    def fit(self, positives: list[str], negatives: list[str]) -> Critic:
        if not positives or not negatives:
            raise ValueError("the critic needs at least one positive and one negative example")
        self.model_ = make_classifier(self.classifier, Analyzer(self.language, self.stem),
                                      min(len(positives), len(negatives)))
        self.model_.fit(positives + negatives, [1] * len(positives) + [0] * len(negatives))
        self.positive_column_ = list(self.model_.classes_).index(1)
        return self

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        return self.model_.predict_proba(texts)[:, self.positive_column_]

    def score(self, text: str) -> float:
        return float(self.predict_proba([text])[0])

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
