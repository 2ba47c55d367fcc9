from pathlib import Path

import pytest

from focuscrawl.config import ConfigError, load_config, validate_config

BASE = {"seeds": ["http://example.com/"], "topic": {"positive": ["pos.html"]}}


def config_error(data, source="crawl.yaml"):
    with pytest.raises(ConfigError) as info:
        validate_config(data, source=source)
    return str(info.value).splitlines()


def test_defaults():
    config = validate_config(BASE)
    assert config.politeness.per_host_connections == 2
    assert config.politeness.robots is True
    assert config.classifier == "svm-cosine"
    assert config.strategy == "best-first"
    assert config.topic.negatives_per_positive == 2.0


@pytest.mark.parametrize(
    ("override", "path"),
    [
        ({"fetch": {"concurrency": 0}}, "fetch.concurrency"),
        ({"fetch": {"concurrency": "many"}}, "fetch.concurrency"),
        ({"politeness": {"per_host_connections": 0}}, "politeness.per_host_connections"),
        ({"topic": {"positive": ["p"], "negatives_per_positive": 0}}, "topic.negatives_per_positive"),
        ({"budget": {"max_pages": -5}}, "budget.max_pages"),
        ({"classifier": "knn"}, "classifier"),
        ({"strategy": "zigzag"}, "strategy"),
        ({"seeds": "http://example.com/"}, "seeds"),
    ],
)
def test_each_wrong_field_gives_one_line_naming_field_and_source(override, path):
    [line] = config_error({**BASE, **override})
    assert line.startswith(f"crawl.yaml: {path}: ")


def test_several_problems_give_several_lines():
    lines = config_error({**BASE, "classifier": "knn", "fetch": {"concurrency": 0, "retries": -1}})
    assert sorted(line.split(": ")[1] for line in lines) == ["classifier", "fetch.concurrency", "fetch.retries"]


@pytest.mark.parametrize(
    ("override", "path"), [({"colour": "red"}, "colour"), ({"fetch": {"speed": 9}}, "fetch.speed")]
)
def test_unknown_key_is_rejected(override, path):
    assert config_error({**BASE, **override}) == [f"crawl.yaml: {path}: Extra inputs are not permitted"]


def test_bad_regex_in_url_deny_is_reported():
    [line] = config_error({**BASE, "urls": {"deny": ["fine", "([a-z"]}})
    assert line.startswith("crawl.yaml: urls.deny: '([a-z' is not a regular expression")


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:70000", ":8080"])
def test_host_map_address_without_valid_port_is_rejected(address):
    [line] = config_error({**BASE, "host_map": {"hosts": {"example.com": address}}})
    assert line == f"crawl.yaml: host_map.hosts: example.com: {address!r} is not address:port"


def test_host_map_names_are_lowercased():
    config = validate_config({**BASE, "host_map": {"hosts": {"Example.COM": "127.0.0.1:8080"}}})
    assert config.host_map.hosts == {"example.com": "127.0.0.1:8080"}


def test_no_seeds_is_rejected():
    [line] = config_error({"topic": {"positive": ["p"]}})
    assert line.startswith("crawl.yaml: ")
    assert "'seeds'" in line and "'seeds_file'" in line


def test_seeds_file_counts_as_seeds():
    assert validate_config({"seeds_file": "seeds.txt", "strategy": "bfs"}).seeds_file == "seeds.txt"


def test_best_first_without_positive_examples_is_rejected():
    [line] = config_error({"seeds": ["http://example.com/"]})
    assert line.startswith("crawl.yaml: ")
    assert "best-first" in line and "topic.positive" in line


def test_pseudo_examples_need_one_topics_examples():
    for topic in ({}, {"taxonomy": "topics"}):
        [line] = config_error({"seeds": ["http://example.com/"], "strategy": "bfs", "topic": topic,
                               "adaptation": {"pseudo_after": 0.1}})
        assert "adaptation.pseudo_after" in line and "topic.positive" in line


def test_bfs_needs_no_positive_examples():
    assert validate_config({"seeds": ["http://example.com/"], "strategy": "bfs"}).topic.positive == []


@pytest.mark.parametrize(
    ("yaml_text", "where"),
    [("seeds: [http://a/\nfetch:\n  concurrency: : 3\n", ":2:6: "), ("seeds:\n  - a\n\tfoo: 1\n", ":3:1: ")],
)
def test_invalid_yaml_error_carries_file_line_and_column(tmp_path, yaml_text, where):
    path = tmp_path / "crawl.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}{where}invalid YAML: ")


def test_top_level_yaml_list_is_rejected(tmp_path):
    path = tmp_path / "crawl.yaml"
    path.write_text("- http://example.com/\n- http://example.org/\n")
    with pytest.raises(ConfigError, match="expected a mapping of settings, found list") as info:
        load_config(path)
    assert str(info.value).startswith(str(path))


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")


def test_validation_errors_name_the_config_file(tmp_path):
    path = tmp_path / "crawl.yaml"
    path.write_text("seeds: [http://example.com/]\nstrategy: bfs\nfetch:\n  concurrency: 0\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).splitlines() == [f"{path}: fetch.concurrency: Input should be greater than or equal to 1"]


def test_relative_paths_become_absolute_relative_to_the_config_file(tmp_path, monkeypatch):
    folder = tmp_path / "crawls" / "tcp"
    folder.mkdir(parents=True)
    (folder / "crawl.yaml").write_text(
        "seeds: [http://example.com/]\n"
        "seeds_file: seeds.txt\n"
        "topic:\n"
        "  positive: [pos/, ../shared.html, http://example.org/page, /abs/p.html]\n"
        "  negative: [neg.txt]\n"
    )
    monkeypatch.chdir(tmp_path)
    config = load_config(Path("crawls/tcp/crawl.yaml"))
    folder = folder.resolve()
    assert config.topic.positive == [
        str(folder / "pos"),
        str(folder.parent / "shared.html"),
        "http://example.org/page",
        "/abs/p.html",
    ]
    assert config.topic.negative == [str(folder / "neg.txt")]
    assert config.seeds_file == str(folder / "seeds.txt")


def test_loopback_only_refuses_a_host_map_address_off_loopback():
    lines = config_error({"seeds": ["http://a.test/"], "fetch": {"loopback_only": True},
                          "host_map": {"hosts": {"a.test": "10.1.2.3:80"}}})
    assert lines == ["crawl.yaml: host_map.hosts.a.test: 10.1.2.3:80 is not on loopback and fetch.loopback_only is set"]


def test_unsupported_language_is_refused_when_the_config_is_read():
    lines = config_error({"seeds": ["http://a.test/"], "text": {"language": "xx"}})
    assert lines == ["crawl.yaml: text.language: no stop-word list for language 'xx'"]
