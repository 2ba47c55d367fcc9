"""One contract for every learner: the critics (each classifier, the taxonomy, the reference
oracle) judge a page into [0, 1] and score texts with ``predict_proba``; the apprentice has
scikit-learn's ``fit``/``partial_fit``/``predict_proba``/``decision_function``; learnt state
ends in an underscore and survives a save."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from focuscrawl.apprentice import Apprentice, Blend
from focuscrawl.evaluate.crawlers import NoisyOracleCritic, OracleCritic
from focuscrawl.learn import LEARNERS, Critic, Judgement
from focuscrawl.parse import parse_html
from focuscrawl.taxonomy import Node, TaxonomyModel

NETWORK = ["TCP sockets carry packets between hosts over a network connection.",
           "The router forwards each packet to the next hop by its IP address.",
           "A server listens on a port and accepts client connections over TCP."]
BAKING = ["Knead the dough, let the yeast rise and bake the bread in the oven.",
          "Whisk the eggs with sugar, fold in the flour and bake the cake.",
          "Dust the loaf with flour and bake it until the crust is golden.",
          "Melt the butter, add the sugar and bake the biscuits for ten minutes.",
          "The pastry rests in the fridge before it is rolled and baked.",
          "Proof the yeast in warm water before mixing it into the flour."]
ON_TOPIC = "The client opens a TCP socket, connects to the server port and waits for the packet."
OFF_TOPIC = "Shape the risen dough into a loaf, dust it with flour and bake the bread."


def _taxonomy() -> TaxonomyModel:
    texts = {f"net{i}": t for i, t in enumerate(NETWORK)} | {f"bake{i}": t for i, t in enumerate(BAKING)}
    root = Node("Root", negatives=[f"bake{i}" for i in range(len(BAKING))],
                children=[Node("Networking", positives=[f"net{i}" for i in range(len(NETWORK))])])
    return TaxonomyModel(min_features=1).fit(root, texts, warn=lambda message: None)


CRITICS = {**{name: lambda name=name: Critic(name).fit(NETWORK, BAKING) for name in LEARNERS},
           "taxonomy": _taxonomy}


def _page(text: str):
    return parse_html(f"<html><body><p>{text}</p></body></html>".encode(), "http://127.0.0.1/page")


@pytest.fixture(params=sorted(CRITICS), scope="module")
def critic(request):
    return CRITICS[request.param]()


def test_every_critic_judges_a_page_into_the_unit_interval_and_prefers_the_topic(critic):
    on, off = critic.judge(_page(ON_TOPIC)), critic.judge(_page(OFF_TOPIC))
    assert isinstance(on, Judgement) and 0.0 <= off.relevance <= 1.0 and 0.0 <= on.relevance <= 1.0
    assert on.relevance > off.relevance


def test_every_critic_scores_texts_as_it_judges_pages(critic):
    scores = critic.predict_proba([ON_TOPIC, OFF_TOPIC])
    assert scores.shape == (2,)
    np.testing.assert_allclose(scores, [critic.judge(_page(ON_TOPIC)).relevance,
                                        critic.judge(_page(OFF_TOPIC)).relevance], rtol=1e-9)


def test_every_critic_judges_stored_texts_as_it_judges_pages(critic):
    for judged, text in zip(critic.judge_texts([ON_TOPIC, OFF_TOPIC]), [ON_TOPIC, OFF_TOPIC]):
        live = critic.judge(_page(text))
        assert (judged.relevance, judged.topic) == (pytest.approx(live.relevance), live.topic)


def test_every_critic_survives_a_save_with_its_learnt_state(critic, tmp_path):
    critic.save(tmp_path / "model.pkl")
    loaded = type(critic).load(tmp_path / "model.pkl")
    np.testing.assert_allclose(loaded.predict_proba([ON_TOPIC, OFF_TOPIC]), critic.predict_proba([ON_TOPIC, OFF_TOPIC]))
    learnt = [name for name in vars(critic) if name.endswith("_")]
    assert learnt and all(hasattr(loaded, name) for name in learnt)


def test_every_critic_retrains_into_one_of_its_kind_and_keeps_its_originals(critic):
    extra = "Packets of the TCP handshake: SYN, then SYN-ACK, then ACK."
    retrained = critic.refit({"Root/Networking": {"http://127.0.0.1/extra": extra}}, [BAKING[0]],
                             warn=lambda message: None)
    assert type(retrained) is type(critic) and retrained is not critic
    assert retrained.examples_ == critic.examples_  # archetypes are replaced at the next retraining
    assert "ack" in retrained.feature_space() - critic.feature_space()


def test_the_reference_critic_judges_by_the_truth_of_the_url():
    oracle = OracleCritic(lambda url: url.endswith("/page"))
    assert oracle.judge(_page(OFF_TOPIC)).relevance == 1.0
    assert oracle.refit({"": {"http://127.0.0.1/x": ON_TOPIC}}, [OFF_TOPIC]) is oracle
    assert OracleCritic(lambda url: False).judge(_page(ON_TOPIC)).relevance == 0.0


@pytest.mark.parametrize("auc", [0.85, 0.95])
def test_the_noisy_reference_critic_ranks_pages_at_the_auc_it_is_given_and_always_alike(auc):
    from sklearn.metrics import roc_auc_score

    pages = [parse_html(b"<p>same words</p>", f"http://127.0.0.1/{i}/{'on' if i % 3 == 0 else 'off'}") for i in range(6000)]
    noisy = NoisyOracleCritic(lambda url: url.endswith("/on"), auc)
    scores = [noisy.judge(page).relevance for page in pages]
    assert roc_auc_score([page.url.endswith("/on") for page in pages], scores) == pytest.approx(auc, abs=0.015)
    assert [NoisyOracleCritic(noisy.is_relevant, auc).judge(page).relevance for page in pages[:50]] == scores[:50]
    assert noisy.refit({"": {}}) is noisy and 0.0 < min(scores) < max(scores) < 1.0


def _instances(rng, count: int):
    features = [rng.integers(0, 50, size=rng.integers(1, 6)) for _ in range(count)]
    relevance = np.array([0.9 if f.min() < 10 else 0.1 for f in features])
    return features, relevance


def test_the_apprentice_learns_with_scikit_learns_names_batch_by_batch_as_at_once():
    rng = np.random.default_rng(3)
    features, relevance = _instances(rng, 200)
    online = Apprentice(blend=False)
    assert online.partial_fit(features[:100], relevance[:100]) is online
    online.partial_fit(features[100:], relevance[100:])
    offline = Apprentice(blend=False).fit(features, relevance, rng.random(200), [f"u{i}" for i in range(200)])
    probe = features[:20]
    np.testing.assert_allclose(online.predict_proba(probe), offline.predict_proba(probe))
    scores, margins = online.predict_proba(probe), online.decision_function(probe)
    assert ((scores >= 0) & (scores <= 1)).all() and (np.argsort(scores) == np.argsort(margins)).all()
    assert online.predict_proba([np.array([1])])[0] > online.predict_proba([np.array([40])])[0]


def test_an_apprentice_saved_before_the_names_ended_in_an_underscore_still_loads():
    rng = np.random.default_rng(4)
    apprentice = Apprentice().partial_fit(*_instances(rng, 60), parent_scores=rng.random(60))
    apprentice.partial_fit(*_instances(rng, 60), parent_scores=rng.random(60))
    state = apprentice.__getstate__()
    old = {name.rstrip("_"): value for name, value in state.items() if name != "blend"}
    old["blend"] = {name.rstrip("_"): value for name, value in vars(apprentice.blend).items()}
    restored = Apprentice.__new__(Apprentice)
    blend = Blend.__new__(Blend)
    blend.__setstate__(old.pop("blend"))
    restored.__setstate__({**old, "blend": blend})
    np.testing.assert_array_equal(restored.instances_, apprentice.instances_)
    probe = _instances(rng, 10)[0]
    np.testing.assert_allclose(restored.priority(probe, np.full(10, 0.5)), apprentice.priority(probe, np.full(10, 0.5)))
    assert pickle.loads(pickle.dumps(restored)).split_ == apprentice.split_


def test_the_crawls_critic_lives_in_its_database_and_older_crawls_keep_theirs_in_models(tmp_path):
    from focuscrawl.crawler import CRITIC_MODEL, crawl_critic
    from focuscrawl.store import CrawlDir, Store, upgrade_schema

    store = Store(tmp_path / "old")
    assert crawl_critic(tmp_path / "old") is None
    legacy = Critic("svm-linear").fit(NETWORK, BAKING)
    CrawlDir(tmp_path / "old").models.mkdir()
    legacy.save(CrawlDir(tmp_path / "old").legacy_critics[0])
    np.testing.assert_allclose(crawl_critic(tmp_path / "old").predict_proba([ON_TOPIC]), legacy.predict_proba([ON_TOPIC]))
    store.db.execute("DROP TABLE models")  # a crawl made before the table existed
    assert crawl_critic(tmp_path / "old").predict_proba([ON_TOPIC]) == pytest.approx(legacy.predict_proba([ON_TOPIC]))
    upgrade_schema(store.db)
    store.save_model(CRITIC_MODEL, pickle.dumps(_taxonomy()))
    assert isinstance(crawl_critic(tmp_path / "old"), TaxonomyModel)  # the database's wins
    store.close()
