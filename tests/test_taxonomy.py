"""Topic taxonomies: bookmarks and folder imports, training, hierarchical classification."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
import yaml

from focuscrawl.config import validate_config
from focuscrawl.fetch.hosts import Hosts
from focuscrawl.fetch.http import Fetcher
from focuscrawl.taxonomy import Node, TaxonomyError, TaxonomyModel, load_tree
from focuscrawl.topics import import_taxonomy, read_bookmarks, read_folder_tree

# what Firefox writes (abridged): folders are <H3>, their contents the <DL> that follows
FIREFOX_EXPORT = """<!DOCTYPE NETSCAPE-Bookmark-file-1>
<!-- This is an automatically generated file. -->
<META HTTP-EQUIV="Content-Type" CONTENT="text/html; charset=UTF-8">
<TITLE>Bookmarks</TITLE>
<H1>Bookmarks Menu</H1>
<DL><p>
    <DT><H3 ADD_DATE="1700000000" LAST_MODIFIED="1700000001">Science</H3>
    <DL><p>
        <DT><H3>Mathematics</H3>
        <DL><p>
            <DT><A HREF="{base}/algebra" ADD_DATE="1700000002">Groups and rings</A>
            <DT><H3>Stochastics</H3>
            <DL><p>
                <DT><A HREF="{base}/probability">Probability</A>
            </DL><p>
        </DL><p>
        <DT><H3>Arts</H3>
        <DL><p>
            <DT><A HREF="{base}/painting">Painting</A>
            <DT><A HREF="{base}/missing">Gone</A>
        </DL><p>
        <DT><H3>OTHERS</H3>
        <DL><p>
            <DT><A HREF="{base}/sports">Sports</A>
            <DT><A HREF="{base}/cooking">Cooking</A>
        </DL><p>
        <DT><H3>Empty folder</H3>
        <DL><p>
        </DL><p>
    </DL><p>
    <DT><A HREF="place:sort=8&maxResults=10">Recently used</A>
</DL>
"""

TEXTS = {
    "algebra": "Groups rings and fields: a group is a set with an associative operation, a ring adds a second "
               "operation. Algebra studies homomorphisms between groups, rings, fields and vector spaces.",
    "probability": "Probability theory: random variables, distributions and expectation. The law of large numbers "
                   "and the central limit theorem describe sums of random variables and their distribution.",
    "painting": "Oil painting on canvas: the painter mixes pigments with linseed oil. Impressionist painters such as "
                "Monet painted light and colour outdoors; museums and galleries exhibit the paintings.",
    "sports": "The football match ended in a draw; the striker scored twice and the goalkeeper saved a penalty. "
              "The league table and the next fixtures of the season.",
    "cooking": "Recipe: fry the onions in butter, add the tomatoes and simmer the sauce for twenty minutes, "
               "season with salt and pepper and serve with pasta.",
}


@pytest.fixture()
def example_server(serve):
    return serve({f"/{name}": f"<html><title>{name}</title><body><p>{text}</p></body></html>"
                  for name, text in TEXTS.items()})


def test_bookmarks_with_nested_folders_and_others_import_into_the_right_tree(tmp_path):
    path = tmp_path / "bookmarks.html"
    path.write_text(FIREFOX_EXPORT.format(base="http://127.0.0.1:9"))
    warnings = []
    science = read_bookmarks(path, warnings.append)
    assert science.name == "Science"  # Firefox's "Bookmarks Menu" around it is unwrapped
    assert [c.name for c in science.children] == ["Mathematics", "Arts"]
    mathematics, arts = science.children
    assert mathematics.positives == ["http://127.0.0.1:9/algebra"]
    assert [c.name for c in mathematics.children] == ["Stochastics"]
    assert mathematics.children[0].positives == ["http://127.0.0.1:9/probability"]
    assert arts.positives == ["http://127.0.0.1:9/painting", "http://127.0.0.1:9/missing"]
    assert science.negatives == ["http://127.0.0.1:9/sports", "http://127.0.0.1:9/cooking"]  # OTHERS: D−(Science)
    assert warnings == ["Bookmarks Menu/Science/Empty folder: empty (no examples, no subtopics): left out"]


def test_a_file_that_is_not_a_bookmarks_export_is_refused(tmp_path):
    path = tmp_path / "notes.html"
    path.write_text("<html><body><p>just a page with <a href='http://a.test/'>a link</a></p></body></html>")
    with pytest.raises(TaxonomyError, match=r"notes.html: not a bookmarks file"):
        read_bookmarks(path)


def test_folder_tree_import_skips_empty_folders_and_refuses_an_empty_root(tmp_path):
    (tmp_path / "empty-root").mkdir()
    with pytest.raises(TaxonomyError, match="empty-root: empty folder"):
        read_folder_tree(tmp_path / "empty-root")
    root_dir = tmp_path / "Topics"
    for folder, name in (("Mathematics", "algebra"), ("Arts", "painting"), ("OTHERS", "sports")):
        (root_dir / folder).mkdir(parents=True)
        (root_dir / folder / f"{name}.txt").write_text(TEXTS[name])
    (root_dir / "Nothing here").mkdir()
    warnings = []
    root = read_folder_tree(root_dir, warnings.append)
    assert [c.name for c in root.children] == ["Arts", "Mathematics"]
    assert root.negatives == [str(root_dir / "OTHERS" / "sports.txt")]
    assert warnings == ["Topics/Nothing here: empty (no examples, no subtopics): left out"]


def _import(root: Node, out, others=()):
    config = validate_config({"seeds": ["http://127.0.0.1:9/"], "strategy": "bfs", "fetch": {"loopback_only": True},
                              "politeness": {"min_interval": 0}}, "test")
    warnings = []

    async def run():
        async with Fetcher(config, Hosts(config)) as fetcher:
            return await import_taxonomy(root, out, fetcher, list(others), warnings.append, min_features=1)

    return asyncio.run(run()), warnings


def test_import_fetches_examples_skips_unreachable_ones_and_routes_pages_down_the_tree(example_server, tmp_path):
    path = tmp_path / "bookmarks.html"
    path.write_text(FIREFOX_EXPORT.format(base=example_server.url("").rstrip("/")))
    model, warnings = _import(read_bookmarks(path), tmp_path / "taxonomy")
    assert any(w.startswith(example_server.url("/missing")) and "HTTP 404" in w for w in warnings), warnings
    tree = load_tree(tmp_path / "taxonomy")
    # the 404 stays in the tree, to be tried again by 'topics train', but nothing was learnt from it
    assert tree.children[1].positives == [example_server.url("/painting"), example_server.url("/missing")]
    assert model.child("Science/Arts").examples[0] == 1
    lines = (tmp_path / "taxonomy" / "examples.jsonl").read_text().splitlines()
    assert len(lines) == 5 and all(json.loads(line)["text"] for line in lines)

    reloaded = TaxonomyModel.load(tmp_path / "taxonomy")
    stochastic = reloaded.assign("random variables and their probability distribution, expectation and the limit theorem")
    assert stochastic.topic == "Science/Mathematics/Stochastics"
    assert [t for t, _ in stochastic.path] == ["Science/Mathematics", "Science/Mathematics/Stochastics"]
    painting = reloaded.assign("the painter mixed pigments in oil; impressionist paintings in the museum gallery")
    assert painting.topic == "Science/Arts"
    assert reloaded.assign("the striker scored and the football league table changed").topic is None


def test_a_page_with_too_few_features_of_the_space_is_rejected(example_server, tmp_path):
    root = Node("Root", negatives=[example_server.url("/sports"), example_server.url("/cooking")],
                children=[Node("Math", [example_server.url("/algebra"), example_server.url("/probability")]),
                          Node("Arts", [example_server.url("/painting")])])
    model, _ = _import(root, tmp_path / "t")
    model.min_features = 3
    judged = model.assign("rings")  # one feature of the space only
    assert (judged.topic, judged.relevance) == (None, 0.0)


def test_indicator_keywords_restrict_a_topic(example_server, tmp_path):
    def tree(indicators):
        return Node("Root", negatives=[example_server.url("/sports"), example_server.url("/cooking")],
                    children=[Node("Math", [example_server.url("/algebra"), example_server.url("/probability")]),
                              Node("Arts", [example_server.url("/painting")], indicators=indicators)])

    page = "the painter mixed pigments in oil; impressionist paintings in the museum gallery"
    plain, _ = _import(tree([]), tmp_path / "plain")
    assert plain.assign(page).topic == "Root/Arts"
    strict, _ = _import(tree(["Monet", "Renoir", "watercolour"]), tmp_path / "strict")
    strict.min_features = 2
    assert strict.assign(page).topic is None  # no indicator: not accepted for Arts
    assert strict.assign(page + " Monet and Renoir").topic == "Root/Arts"


def test_a_root_without_negatives_is_refused_with_a_clear_error(example_server, tmp_path):
    root = Node("Root", children=[Node("Math", [example_server.url("/algebra")]), Node("Arts", [example_server.url("/painting")])])
    with pytest.raises(TaxonomyError, match="Root: no negative examples at the root"):
        _import(root, tmp_path / "t")


@pytest.mark.slow
def test_topics_import_and_show_commands(example_server, tmp_path):
    path = tmp_path / "bookmarks.html"
    path.write_text(FIREFOX_EXPORT.format(base=example_server.url("").rstrip("/")))
    config = tmp_path / "fetch.yml"
    config.write_text(yaml.safe_dump({"seeds": ["http://127.0.0.1:9/"], "strategy": "bfs",
                                      "fetch": {"loopback_only": True}, "politeness": {"min_interval": 0}}))
    out = tmp_path / "taxonomy"
    run = subprocess.run([sys.executable, "-m", "focuscrawl", "topics", "import", str(path), "--out", str(out),
                          "--config", str(config), "--min-features", "1"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "warning: " + example_server.url("/missing") in run.stderr
    shown = subprocess.run([sys.executable, "-m", "focuscrawl", "topics", "show", str(out), "--features", "3"],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("Science  (0 examples, 2 negatives)")
    assert "    Stochastics  (1 examples; trained on 1 positive / 1 negative)" in shown.stdout
    bad = subprocess.run([sys.executable, "-m", "focuscrawl", "topics", "import", str(config), "--out", str(out)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip() == f"error: {config}: not a bookmarks file (no <DL> lists of <A HREF> bookmarks in Netscape format)"


def test_topics_train_after_editing_the_tree_uses_the_cached_examples(example_server, tmp_path):
    root = Node("Root", negatives=[example_server.url("/sports"), example_server.url("/cooking")],
                children=[Node("Math", [example_server.url("/algebra"), example_server.url("/probability")]),
                          Node("Arts", [example_server.url("/painting")])])
    _import(root, tmp_path / "t")
    page = "the painter mixed pigments in oil; impressionist paintings in the museum gallery"
    assert TaxonomyModel.load(tmp_path / "t").assign(page).topic == "Root/Arts"
    tree = yaml.safe_load((tmp_path / "t" / "taxonomy.yml").read_text())
    tree["children"][1]["indicators"] = ["Monet", "Renoir"]
    (tmp_path / "t" / "taxonomy.yml").write_text(yaml.safe_dump(tree))
    fetched_before = len(example_server.requests)
    run = subprocess.run([sys.executable, "-m", "focuscrawl", "topics", "train", str(tmp_path / "t")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "indicators: Monet, Renoir" in run.stdout
    assert len(example_server.requests) == fetched_before  # nothing fetched again
    model = TaxonomyModel.load(tmp_path / "t")
    assert model.min_features == 1  # the options of the first training
    assert model.assign(page).topic is None and model.assign(page + " by Monet").topic == "Root/Arts"


def test_tree_files_with_bad_names_or_shapes_are_refused(tmp_path):
    for tree, message in (({"name": "A/B", "children": []}, "holds a '/'"),
                          ({"name": "R", "children": [{"name": "X"}, {"name": "X"}]}, "two subtopics share a name"),
                          ({"name": "R", "positives": "http://a.test/"}, "positives must be a list")):
        (tmp_path / "taxonomy.yml").write_text(yaml.safe_dump(tree))
        with pytest.raises(TaxonomyError, match=message):
            load_tree(tmp_path)


def test_folder_names_with_slashes_and_twins_stay_distinct_topics(tmp_path):
    root = Node("Root", negatives=["x"], children=[Node("News/Politics", ["a"]), Node("Art", ["b"]), Node("Art", ["c"])])
    from focuscrawl.topics import _fold_others

    folded = _fold_others(root)
    assert [c.name for c in folded.children] == ["News-Politics", "Art", "Art (2)"]


def test_retraining_a_taxonomy_adds_archetypes_to_a_topic_without_piling_them_up():
    root = Node("Science", negatives=["sports", "cooking"], children=[
        Node("Mathematics", positives=["algebra", "probability"]), Node("Arts", positives=["painting"])])
    model = TaxonomyModel(min_features=1).fit(root, dict(TEXTS), warn=lambda message: None)
    sculpture = {"http://museum.test/sculpture": "Sculpture: the sculptor carves marble and casts bronze statues; "
                                                  "the museum gallery exhibits sculptures next to the paintings."}
    retrained = model.refit({"Science/Arts": sculpture}, warn=lambda message: None)
    assert model.child("Science/Arts").examples[0] == 1  # the original model is untouched
    assert retrained.child("Science/Arts").examples[0] == 2
    assert {"sculptor", "marbl", "bronz"} & (retrained.feature_space() - model.feature_space())
    again = retrained.refit({"Science/Arts": {}}, warn=lambda message: None)  # archetypes are replaced, not kept
    assert again.child("Science/Arts").examples[0] == 1


def test_reviewers_corrections_retrain_a_taxonomy_and_its_indicators_restrict_a_topic():
    from focuscrawl.corrections import NOT_RELEVANT, Corrections

    root = Node("Science", negatives=["sports", "cooking"], children=[
        Node("Mathematics", positives=["algebra", "probability"]), Node("Arts", positives=["painting"])])
    model = TaxonomyModel(min_features=1).fit(root, dict(TEXTS), warn=lambda message: None)
    painting = "the painter mixed pigments in oil; impressionist paintings in the museum gallery"
    assert model.assign(painting).topic == "Science/Arts"
    corrections = Corrections({1: "Science/Arts", 2: NOT_RELEVANT}, set(), {"Science/Arts": {"sculptor"}})
    assert corrections.contradicted(model, "Science/Mathematics", 1) and corrections.contradicted(model, "Science/Arts", 2)
    assert not corrections.contradicted(model, "Science/Arts", 1) and not corrections.contradicted(model, "Science/Arts", 3)
    sculpture = {"http://museum.test/sculpture": "Sculpture: the sculptor carves marble and casts bronze statues; "
                                                  "the museum gallery exhibits sculptures next to the paintings."}
    retrained = corrections.refit(model, {"Science/Arts": sculpture}, [], warn=lambda message: None)
    assert retrained.child("Science/Arts").examples[0] == 2 and retrained.child("Science/Arts").indicators == {"sculptor"}
    assert retrained.assign(painting).topic is None  # without the indicator: not accepted for Arts
    assert retrained.assign(painting + " and a sculptor").topic == "Science/Arts"
