"""A user's topic tree and BINGO!'s hierarchical classifier over it (Sizov 2005 §2.2.1, §2.3.2–2.3.3).

Each node holds its own examples (D+), and a folder named OTHERS holds negatives of its parent
(D−). For a node T: D_POS(T) = D+(T) ∪ D_POS of its children (eq. 2.32), D_NEG(T) = D−(parent)
∪ D_POS of its siblings (eq. 2.33) ∪ D+(parent) — the parent's own examples belong to none of
its children (our addition: without it an only child, such as Stochastics alone under a
Mathematics that has pages of its own, would have nothing to learn against). A node and its
siblings share one feature space, the union of their best features by Mutual Information
(eq. 2.34), stored at the parent. A page goes down the tree (Fig. 2.7): every child of the
current node scores it by a linear SVM (over TF-IDF by default, BINGO!'s relative term
frequencies on request), normalised by the mean distance of its training documents
(eqs. 2.21–2.22); it moves to the best child whose confidence passes the threshold, else it
stays. A page holding fewer than N_w features of a node's space — or, where a topic has
indicator keywords, fewer than N_w of them — is not accepted there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import yaml

from focuscrawl.learn import Judgement, PlattSVM, load_model, save_model
from focuscrawl.text import Analyzer, FeatureSelector, PantTfidf, RelativeTf, count_matrix, topic_preview

OTHERS = "OTHERS"
TAXONOMY_FILE = "taxonomy.yml"
MODEL_FILE = "model.pkl"
# BINGO! weighs terms by relative frequency; on the test web Pant's TF-IDF (eq. 1) routes pages
# far better with few examples (see the note on issue 4), so it is the default
WEIGHTINGS = {"tfidf": PantTfidf, "rtf": RelativeTf}
SOFT_MARGIN = 100.0  # C · mean ‖x‖² of a topic's training vectors


class TaxonomyError(ValueError):
    """A taxonomy that cannot be read or trained; the message names the node or file."""


@dataclass
class Node:
    name: str
    positives: list[str] = field(default_factory=list)  # D+: URLs or files
    negatives: list[str] = field(default_factory=list)  # D−, from its OTHERS folder
    indicators: list[str] = field(default_factory=list)  # keywords a page must hold N_w of
    children: list[Node] = field(default_factory=list)

    def walk(self, prefix: str = ""):
        """(path, node) for this node and every descendant, parents first."""
        path = f"{prefix}/{self.name}" if prefix else self.name
        yield path, self
        for child in self.children:
            yield from child.walk(path)

    def to_dict(self) -> dict:
        data = {"name": self.name}
        for key in ("positives", "negatives", "indicators"):
            if getattr(self, key):
                data[key] = list(getattr(self, key))
        if self.children:
            data["children"] = [child.to_dict() for child in self.children]
        return data

    @classmethod
    def from_dict(cls, data: dict, where: str = "taxonomy") -> Node:
        if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"].strip():
            raise TaxonomyError(f"{where}: a node needs a name")
        name = data["name"]
        if "/" in name:
            raise TaxonomyError(f"{where}: topic name {name!r} holds a '/' (it separates topics in paths)")
        for key in ("positives", "negatives", "indicators", "children"):
            if not isinstance(data.get(key) or [], list):
                raise TaxonomyError(f"{where}/{name}: {key} must be a list")
        children = [cls.from_dict(child, f"{where}/{name}") for child in data.get("children") or []]
        names = [child.name for child in children]
        if len(set(names)) < len(names):
            raise TaxonomyError(f"{where}/{name}: two subtopics share a name")
        return cls(name, list(data.get("positives") or []), list(data.get("negatives") or []),
                   list(data.get("indicators") or []), children)


def save_tree(root: Node, directory: Path) -> Path:
    path = Path(directory) / TAXONOMY_FILE
    path.write_text(yaml.safe_dump(root.to_dict(), sort_keys=False, allow_unicode=True))
    return path


def load_tree(directory: Path) -> Node:
    path = Path(directory) / TAXONOMY_FILE
    try:
        return Node.from_dict(yaml.safe_load(path.read_text()), str(path))
    except OSError as err:
        raise TaxonomyError(f"{path}: cannot read: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise TaxonomyError(f"{path}: not YAML: {err}") from None


# -- the trained tree -------------------------------------------------------------------------

@dataclass
class ChildModel:
    """The classifier of one topic against its siblings, in its parent's feature space."""
    path: str
    svm: PlattSVM | None  # None: no negatives to learn from, pages never enter this topic
    svm_score: float  # eq. 2.21: mean distance of the training documents from the hyperplane
    weights: dict[str, float]  # MI weight of the topic's best features (for previews and `show`)
    indicators: frozenset[str]
    examples: tuple[int, int]  # |D_POS|, |D_NEG|


@dataclass
class NodeModel:
    """What a node stores for its children: the shared feature space F (eq. 2.34) and their models."""
    features: dict[str, int]  # term -> column
    children: list[ChildModel]
    weighting: PantTfidf | RelativeTf  # fitted on the node's training documents


@dataclass
class Assignment:
    topic: str | None  # the deepest node that accepted the page; None: not on any topic
    confidence: float  # eq. 2.22 at that node (0 when rejected at the root)
    relevance: float  # Pr(page is on one of the user's topics): Platt's sigmoid at the root level
    path: list[tuple[str, float]]  # (topic, confidence) for every level passed


class TaxonomyModel:
    """The hierarchical classifier: ``fit`` from the tree and example texts, then ``assign``."""

    def __init__(self, language: str = "en", stem: bool = True, features: int = 2000, candidates: int = 10000,
                 min_features: int = 3, threshold: float = 0.0, weighting: str = "tfidf"):
        if weighting not in WEIGHTINGS:
            raise TaxonomyError(f"weighting: {weighting!r} is not one of {', '.join(WEIGHTINGS)}")
        self.language, self.stem, self.weighting = language, stem, weighting
        self.features, self.candidates = features, candidates
        self.min_features, self.threshold = min_features, threshold
        self.analyzer = Analyzer(language, stem)

    def fit(self, root: Node, texts: dict[str, str], warn=print) -> TaxonomyModel:
        """``texts``: example entry -> text (entries that could not be read are simply absent)."""
        self.root_name = root.name
        self.tree_ = root.to_dict()
        self.nodes_: dict[str, NodeModel] = {}
        terms = {entry: self.analyzer.term_frequencies(text) for entry, text in texts.items() if text.strip()}
        d_pos = {path: [e for _, n in node.walk(path.rpartition("/")[0]) for e in n.positives if e in terms]
                 for path, node in root.walk()}
        if not any(e in terms for e in root.negatives):
            raise TaxonomyError(f"{root.name}: no negative examples at the root (an {OTHERS} folder or --others)")
        for path, node in root.walk():
            if node.children:
                self.nodes_[path] = self._fit_node(path, node, d_pos, terms, warn)
        self.examples_ = dict(texts)
        return self

    def refit(self, archetypes: dict[str, dict[str, str]], negatives: Sequence[str] = (), keep: bool = False,
              warn=print) -> TaxonomyModel:
        """BINGO! retraining, with every critic's signature: a new model from the original tree and
        examples plus, for each topic path, archetype pages (url -> text) as its positives, and
        ``negatives`` for the root (its OTHERS); feature selection runs again. The new model keeps
        the same originals, so archetypes are replaced at the next retraining — unless ``keep``:
        then they join the originals (the learning phase's training basis)."""
        if not hasattr(self, "examples_"):
            raise TaxonomyError("this taxonomy model was saved without its examples; it cannot be retrained")
        root = Node.from_dict(self.tree_)
        texts = dict(self.examples_)
        nodes = dict(root.walk())
        for path, pages in archetypes.items():
            if path in nodes:
                nodes[path].positives += [url for url in pages if url not in nodes[path].positives]
                texts.update(pages)
        extra = {f"negative:{hashlib.md5(text.encode()).hexdigest()}": text for text in negatives}
        root.negatives += [key for key in extra if key not in root.negatives]
        texts.update(extra)
        model = TaxonomyModel(**self.options()).fit(root, texts, warn)
        if not keep:
            model.tree_, model.examples_ = self.tree_, self.examples_
        return model

    def with_indicators(self, indicators: dict[str, set[str]]) -> TaxonomyModel:
        """Each topic (path -> terms) accepting only pages that hold N_w of its indicators: its
        tree's and these (the reviser's)."""
        for node in self.nodes_.values():
            node.children = [replace(child, indicators=child.indicators | frozenset(indicators[child.path]))
                             if indicators.get(child.path) else child for child in node.children]
        return self

    def feature_space(self) -> set[str]:
        """Every term some node's classifiers see."""
        return {term for node in self.nodes_.values() for term in node.features}

    def _fit_node(self, path: str, node: Node, d_pos: dict, terms: dict, warn) -> NodeModel:
        own_negatives = [e for e in node.negatives + node.positives if e in terms]
        child_paths = [f"{path}/{child.name}" for child in node.children]
        documents = sorted({e for p in child_paths for e in d_pos[p]} | set(own_negatives))
        vocabulary = sorted({t for e in documents for t in terms[e]})
        column = {t: i for i, t in enumerate(vocabulary)}
        counts = count_matrix([terms[e] for e in documents], column)
        row = {e: i for i, e in enumerate(documents)}
        selected: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for child_path in child_paths:
            positives = set(d_pos[child_path])
            negatives = set(own_negatives) | {e for p in child_paths if p != child_path for e in d_pos[p]}
            negatives -= positives
            if not positives or not negatives:
                warn(f"{child_path}: {'no examples' if not positives else 'no negative examples (no siblings, no OTHERS, no examples of its parent)'};"
                     f" pages stop at {path}")
                continue
            rows = np.array([row[e] for e in sorted(positives)] + [row[e] for e in sorted(negatives)])
            y = np.array([1] * len(positives) + [0] * len(negatives))
            selector = FeatureSelector("mi", self.features, self.candidates).fit(counts[rows], y)
            selected[child_path] = (rows, y, selector)
        space = sorted({int(i) for _, _, s in selected.values() for i in s.ranking_})
        features = {vocabulary[i]: k for k, i in enumerate(space)}
        weighting = WEIGHTINGS[self.weighting]().fit(counts[:, space])
        by_name = {c.name: c for c in node.children}
        children = []
        for child_path in child_paths:
            child = by_name[child_path.rpartition("/")[2]]
            indicators = frozenset(self.analyzer.terms(" ".join(child.indicators)))
            if child_path not in selected:
                children.append(ChildModel(child_path, None, 1.0, {}, indicators, (len(d_pos[child_path]), 0)))
                continue
            rows, y, selector = selected[child_path]
            X = weighting.transform(counts[rows][:, space])
            # C scaled to the vectors: relative frequencies are short (‖x‖² ≈ 1/length) and a fixed
            # C = 1 leaves every page inside the margin. C · mean ‖x‖² = 100 is near a hard margin,
            # as text usually allows, like Pant's C = 1 on TF-IDF vectors (‖x‖² ≈ 400 here).
            svm = PlattSVM(kernel="linear", C=SOFT_MARGIN / max(float(X.multiply(X).sum()) / X.shape[0], 1e-12)).fit(X, y)
            distances = np.abs(svm.decision_function(X))
            weights = {vocabulary[i]: float(w) for i, w in zip(selector.ranking_, selector.weights_)}
            children.append(ChildModel(child_path, svm, float(distances.mean()) or 1.0, weights, indicators,
                                       (int(y.sum()), int((1 - y).sum()))))
        return NodeModel(features, children, weighting)

    def assign(self, text: str, frequencies: dict[str, int] | None = None) -> Assignment:
        """Top-down classification of one page (thesis Fig. 2.7); ``frequencies``: its terms, if known."""
        counts = self.analyzer.term_frequencies(text) if frequencies is None else frequencies
        path, node_path, relevance = [], self.root_name, None
        while node_path in self.nodes_:
            node = self.nodes_[node_path]
            present = [t for t in counts if t in node.features]
            if len(present) < self.min_features:
                relevance = 0.0 if relevance is None else relevance
                break
            vector = node.weighting.transform(count_matrix([counts], node.features))
            best, best_confidence, best_probability = None, -np.inf, 0.0
            for child in node.children:
                if child.svm is None:
                    continue
                confidence = float(child.svm.decision_function(vector)[0]) / child.svm_score
                probability = float(child.svm.predict_proba(vector)[0, 1])
                if relevance is None:
                    best_probability = max(best_probability, probability)
                if (confidence > self.threshold and confidence > best_confidence
                        and len(child.indicators & counts.keys()) >= min(self.min_features, len(child.indicators))):
                    best, best_confidence = child, confidence
            if relevance is None:
                relevance = best_probability
            if best is None:
                break
            path.append((best.path, best_confidence))
            node_path = best.path
        return Assignment(path[-1][0] if path else None, path[-1][1] if path else 0.0, relevance or 0.0, path)

    def judge_texts(self, texts: list[str]) -> list[Judgement]:
        """Stored pages judged again: relevance, topic and confidence (no preview)."""
        return [Judgement(a.relevance, a.topic, a.confidence) for a in map(self.assign, texts)]

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        """Pr(in the taxonomy's topics) of each text, as :meth:`judge` gives it (re-judging stored pages)."""
        return np.array([self.assign(text).relevance for text in texts])

    def options(self) -> dict:
        """The constructor's arguments, to train again the same way."""
        return {"language": self.language, "stem": self.stem, "features": self.features, "candidates": self.candidates,
                "min_features": self.min_features, "threshold": self.threshold, "weighting": self.weighting}

    def judge(self, page) -> Judgement:
        """The crawler's question: how relevant is this page, to which topic, and its preview."""
        assignment = self.assign(page.text, self.analyzer.page_frequencies(page))
        preview = self.preview(page.content_leaves(), assignment.topic) if assignment.topic else None
        return Judgement(assignment.relevance, assignment.topic, assignment.confidence, preview or None)

    def child(self, topic: str) -> ChildModel | None:
        parent = self.nodes_.get(topic.rpartition("/")[0])
        return next((c for c in parent.children if c.path == topic), None) if parent else None

    def preview(self, leaves: list[str], topic: str, sentences: int = 3) -> str:
        child = self.child(topic)
        return topic_preview(leaves, child.weights, self.analyzer, sentences) if child is not None else ""

    def save(self, path: Path) -> None:
        save_model(self, path)

    @staticmethod
    def load(path: Path) -> TaxonomyModel:
        path = Path(path)
        return load_model(path / MODEL_FILE if path.is_dir() else path, (TaxonomyModel,), "a taxonomy model")

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("analyzer")
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.analyzer = Analyzer(self.language, self.stem)


def render_tree(root: Node, model: TaxonomyModel | None = None, features: int = 0) -> str:
    """The tree as indented text: examples per topic and, with ``features``, its best terms by MI."""
    lines = []
    for path, node in root.walk():
        depth = path.count("/")
        child = model.child(path) if model else None
        counts = f"{len(node.positives)} examples" + (f", {len(node.negatives)} negatives" if node.negatives else "")
        if child is not None:
            counts += f"; trained on {child.examples[0]} positive / {child.examples[1]} negative"
            if child.svm is None:
                counts += " (not trained: no negatives)"
        if node.indicators:
            counts += f"; indicators: {', '.join(node.indicators)}"
        lines.append(f"{'  ' * depth}{node.name}  ({counts})")
        if child is not None and features:
            best = sorted(child.weights.items(), key=lambda item: -item[1])[:features]
            lines.append(f"{'  ' * depth}  features: " + ", ".join(f"{term} {weight:.3f}" for term, weight in best))
    return "\n".join(lines)
