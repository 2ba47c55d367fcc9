"""The one crawl configuration: every knob and its default live here.

A crawl is described by a YAML file validated by :class:`CrawlConfig`. Command-line flags
build the same model, so there is exactly one place where defaults are decided.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


Classifier = Literal["nb-multinomial", "nb-normal", "nb-kernel", "svm-linear", "svm-poly2", "svm-poly3",
                     "nn-2", "nn-4", "nn-16",  # the learners of Pant §4 (make_classifier builds them)
                     "svm-cosine"]  # ours: Pant's linear SVM on pages of unit length
LEARNERS = get_args(Classifier)
EVAL_CONCURRENCY = 16  # eval's requests in flight per crawl, unless --concurrency says otherwise


# BINGO! §2.3.3: bfs 1/L, dfs L, best-first conf (the "classifier" strategy), classifier-bfs conf/L,
# classifier-dfs conf·L, bookmark conf of the seed the path started at; apprentice: Chakrabarti 2002
# the frontier's hand-out orders (frontier.py): within the best, within a band of it, or any ready host's best
Order = Literal["strict", "band", "host-parallel"]
ORDERS = get_args(Order)

Strategy = Literal["bfs", "dfs", "best-first", "classifier-bfs", "classifier-dfs", "bookmark", "apprentice"]


class ConfigError(ValueError):
    """A configuration that cannot be used; str() is one line per problem."""


class ModelError(ValueError):
    """A model file that cannot be used (a critic, a taxonomy, an apprentice): here beside
    ``ConfigError``, so that the command line names both without importing the learners."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TopicSettings(_Section):
    """What the user wants: example pages. Each entry is a URL, a file, a folder of files,
    or a text file listing URLs."""

    positive: list[str] = Field(default_factory=list)
    negative: list[str] = Field(default_factory=list)
    negatives_per_positive: float = Field(2.0, gt=0, description="Pant §5: twice the positives")
    taxonomy: str | None = Field(None, description="a folder from 'focuscrawl topics import': focus on all its topics")


class BudgetSettings(_Section):
    max_pages: int | None = Field(1000, gt=0, description="pages fetched, summed over resumes (URLs refused by robots.txt or policy do not count)")
    max_depth: int | None = Field(None, ge=0, description="links from the nearest seed")
    max_seconds: float | None = Field(None, gt=0, description="wall time of one run")


class PolitenessSettings(_Section):
    user_agent: str = Field("focuscrawl/0.1 (focused crawler)", description="add your contact URL or e-mail")
    robots: bool = True
    per_host_connections: int = Field(2, ge=1)
    min_interval: float = Field(1.0, ge=0, description="seconds between request starts on one host, and from its"
                                                            " last answer to the next start")
    crawl_delay_cap: float = Field(30.0, ge=0, description="Crawl-delay above this is capped")


class FetchSettings(_Section):
    concurrency: int = Field(64, ge=1, description="requests in flight over all hosts")
    processes: int | None = Field(None, ge=1, description="processes that share the per-page work: the crawl's own"
                                  " fetches and stores, the others parse and judge (1: all in the crawl's own process;"
                                  " unset: one per core of the machine)")
    connect_timeout: float = Field(10.0, gt=0)
    read_timeout: float = Field(20.0, gt=0, description="longest silence while reading a body")
    total_timeout: float = Field(60.0, gt=0)
    max_redirects: int = Field(5, ge=0)
    max_bytes: dict[str, int] = Field(
        default_factory=lambda: {"text/html": 5_000_000, "application/xhtml+xml": 5_000_000, "*": 1_000_000},
        description="cap on the decoded body per MIME type ('*' for the rest); the download is aborted",
    )
    mime_allow: list[str] = Field(default_factory=lambda: ["text/html", "application/xhtml+xml"])
    retries: int = Field(2, ge=0, description="extra attempts after a transient failure")
    backoff: float = Field(1.0, ge=0, description="first retry waits this long, then doubles")
    dns_cache_seconds: int = Field(300, ge=0)
    max_url_length: int = Field(1000, ge=16)
    max_host_length: int = Field(255, ge=1)
    slow_after_failures: int = Field(1, ge=1, description="BINGO!: a failing host is tagged slow")
    bad_after_failures: int = Field(3, ge=1, description="BINGO!: the third failure tags it bad")
    loopback_only: bool = Field(False, description="refuse every address outside 127.0.0.0/8")
    allow_networks: list[str] = Field(default_factory=list, description="private, link-local or reserved networks"
                                      " (CIDR) the crawl may reach; others are refused after DNS and every redirect")
    allow_loopback: bool = Field(True, description="loopback addresses may be crawled (local servers, the test web)")

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, networks: list[str]) -> list[str]:
        for network in networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"{network!r} is not a network (CIDR such as 10.0.0.0/8)") from None
        return networks

    @property
    def process_count(self) -> int:
        """``processes``, or the cores this process may run on."""
        return self.processes or len(os.sched_getaffinity(0))


class HostMapSettings(_Section):
    """Reach mirrored sites on loopback without changing their pages."""

    hosts: dict[str, str] = Field(default_factory=dict, description="hostname -> address:port")
    https_to_http: bool = Field(True, description="fetch https URLs of mapped hosts over plain http")

    @field_validator("hosts")
    @classmethod
    def _addresses_have_ports(cls, hosts: dict[str, str]) -> dict[str, str]:
        for name, address in hosts.items():
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{name}: {address!r} is not address:port")
        return {name.lower(): address for name, address in hosts.items()}


class UrlFilterSettings(_Section):
    allow: list[str] = Field(default_factory=list, description="regexes; if any, a URL must match one")
    deny: list[str] = Field(default_factory=list, description="regexes; a URL matching one is skipped")
    max_path_segments: int = Field(20, ge=1, description="crawler traps: URLs with deeper paths are skipped")
    max_segment_repeats: int = Field(3, ge=1, description="crawler traps: a path naming one segment more often"
                                                         " (/a/b/a/b/a/b/a/, relative links that go ever deeper) is skipped")

    @field_validator("allow", "deny")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"{pattern!r} is not a regular expression: {err}") from None
        return patterns


class TextSettings(_Section):
    language: str = Field("en", description="ISO 639-1 code of the stop-word list and stemmer")
    stem: bool = True
    language_check: bool = Field(False, description="BINGO! §2.3.6 stop-word counting")
    min_stopword_score: int = Field(0, description="d_STOP: pages scoring below are not classified")
    site_templates: Literal["none", "examples", "all"] = Field(
        "none", description="leave out the text a site repeats on many of its pages (navigation, footers;"
                            " focuscrawl.templates) from the examples, or from the examples and the judged and stored"
                            " pages; measured in the README, not a gain on every topic")

    @field_validator("language")
    @classmethod
    def _supported(cls, language: str) -> str:
        from focuscrawl.text import Analyzer  # scikit-learn's import, only when a config is checked

        Analyzer(language)  # raises ValueError naming what is missing
        return language


class LearnerSettings(_Section):
    learning_rate: float = Field(0.2, gt=0, description="nn-*: back-propagation learning rate (Pant §4.4: 0.1, 0.2, 0.4)")
    epochs: int = Field(500, ge=1, description="nn-*: training epochs")
    selection: Literal["mi", "ig"] | None = Field(None, description="feature selection first (BINGO! §2.3.2); none: Pant")
    features: int = Field(2000, ge=1, description="n_top: best features kept by the selection")
    candidates: int = Field(10000, ge=1, description="only the most frequent topic terms are scored")


class ApprenticeSettings(_Section):
    d_max: int = Field(5, ge=0, le=50, description="largest DOM offset of a <term, offset> feature (Chakrabarti §3.4)")
    batch: int = Field(500, ge=1, description="pages fetched between trainings of the apprentice (§2.2)")
    class_features: bool = Field(False, description="add the critic's class of the page and its prefixes (§3.8)")
    cocitation: bool = Field(False, description="add <HIGH|LOW, d> of nearby links to judged pages (§2.2.3)")
    url_words: bool = Field(False, description="add the words of the target URL as <§url:word, 0> (beyond the paper)")
    rescore_growth: float = Field(1.0, ge=0, description="re-score the frontier when the apprentice has learnt this"
                                                          " share more instances than at the last re-scoring (0: every batch)")
    blend: bool = Field(True, description="weigh the apprentice against the source page's critic score, as learnt"
                                          " on held-out instances (off: the paper's apprentice alone)")


class FocusSettings(_Section):
    """Which pages' links are followed and how far through rejected pages (BINGO! §2.3.3)."""

    accept: Literal["any", "soft", "sharp"] = Field(
        "any", description="whose links get the strategy's priority: any page (Pant, Chakrabarti), a page"
        " classified into any topic (soft), or into its predecessor's topic (sharp)")
    tunnelling: int | None = Field(None, ge=0, description="links of a page not accepted are followed up to this many"
                                   " steps (BINGO!: 1 or 2); none: every page's links are followed")
    tunnel_decay: float = Field(0.5, gt=0, le=1, description="a tunnelled link's priority is its source's times this")
    queues: Literal["one", "per-topic"] = Field("one", description="per-topic: topics' sub-queues served round-robin")
    max_queued: int | None = Field(None, ge=1, description="BINGO!'s bounded queue: past this, the lowest are dropped")
    link_context: float | None = Field(
        None, ge=0, le=1, description="weight of the critic's score of a link's own context (its anchor text and the"
        " leaves around it, Pant & Srinivasan 2006) against its source page's score; none: the source page's alone")


class FrontierSettings(_Section):
    """Which queued URL a free connection gets: the order must survive parallel fetching and
    politeness, and one high-scored page must not pour the budget into one site."""

    order: Order = Field(
        "band", description="strict: only the best queued URL (ties across hosts); band: a URL within `band` of"
        " the best; host-parallel: the best URL of whichever host is ready (throughput crawls of many sites)")
    band: float = Field(0.05, ge=0, description="order band: how far below the frontier's best a handed-out URL may be")
    link_clusters: float | None = Field(
        10.0, gt=0, description="exploration: the out-links of one page are a cluster; as some are fetched, the"
        " others' priorities become the posterior mean of how they turn out, the strategy's priority a prior worth"
        " this many pages (none: the strategy's priorities alone)")
    host_clusters: float | None = Field(
        10.0, gt=0, description="exploration across sites: the URLs of one host are a cluster too, whose factor"
        " (learnt as a link cluster's, from the priorities the strategy gave its fetched pages) scales its queued and"
        " future URLs, a prior worth this many pages (none: off)")
    lease_seconds: float = Field(30.0, gt=0, description="a crawl shared by workers (--db): a worker's lease on a host"
                                 " lives this long unless renewed; a killed worker's URLs go to others after it")


class AdaptationSettings(_Section):
    """BINGO! §2.2.3 archetypes and retraining, learning and harvesting phases; Pant §7.4 pseudo examples."""

    retrain: bool = Field(False, description="retrain the critic with archetypes (BINGO!) when a trigger fires")
    learning_phase: bool = Field(False, description="start with BINGO!'s learning phase (seed hosts, depth, sharp focusing)")
    learning_pages: float = Field(0.25, gt=0, description="longest learning phase: pages, or a share of max_pages if < 1")
    learning_depth: int = Field(4, ge=0, description="links from the seeds, in the learning phase")
    link_analysis: bool = Field(False, description="HITS and PageRank of each topic at every trigger (graph.py)")
    authorities: int = Field(20, ge=0, description="N_auth: archetype candidates by authority")
    confident: int = Field(20, ge=0, description="N_conf: archetype candidates by classifier confidence")
    require_mean: bool = Field(True, description="archetypes must beat the training documents' mean confidence/authority")
    learning_archetypes: Literal["filtered", "all"] = Field(
        "filtered", description="at the end of the learning phase: archetypes by the two rules, or every positive"
        " page found (§2.5.3, for a handful of examples)")
    hubs: int = Field(10, ge=0, description="N_hub: best hubs whose unvisited links go to the head of the frontier")
    window: int = Field(100, ge=1, description="pages over which the critic-estimated harvest rate is watched")
    harvest_below: float | None = Field(0.3, ge=0, le=1, description="trigger when that harvest rate falls below this")
    every_positives: int | None = Field(200, ge=1, description="trigger after this many more positively classified pages")
    reclassify: bool = Field(False, description="judge the stored pages again with a retrained critic")
    guard: float | None = Field(None, ge=0, le=1, description="refuse a retraining unless a critic trained on the"
                                " archetypes alone ranks the user's examples with at least this ROC AUC (against drift)")
    pseudo_after: float | None = Field(None, gt=0, description="Pant §7.4: retrain once with pseudo examples after this many pages (a share of max_pages if < 1)")
    pseudo_positives: int = Field(15, ge=0, description="top pages by critic score taken as positives")
    pseudo_negatives: int = Field(30, ge=0, description="bottom pages taken as negatives")
    negatives_after: float | None = Field(
        0.1, gt=0, description="learn what the topic is not from the crawl's own pages (reliable negatives by the spy"
        " technique, Liu et al. 2002) after this many pages (a share of max_pages if < 1), and again each time the"
        " crawl doubles; the critic is retrained with them and the stored pages and queued links judged again."
        " Only in a crawl ordered by the critic (not bfs, dfs) whose positive examples are web pages (URLs, HTML"
        " files), not documents; none: the critic learns from your examples only, as in the papers")
    spy_quantile: float = Field(0.05, gt=0, lt=1, description="a reliable negative scores below this quantile of the"
                                " held-out positives (spies)")


class StoreSettings(_Section):
    warc: bool = True
    warc_max_bytes: int = Field(1_000_000_000, gt=0, description="start a new WARC file past this size")
    commit_pages: int = Field(32, ge=1, description="pages per SQLite commit (1: a commit per page); a page not yet"
                                                   " committed is still in flight, fetched again after a kill")
    commit_seconds: float = Field(1.0, gt=0, description="commit at least this often while pages are handled")
    search_index: bool = Field(True, description="index each stored page for `focuscrawl serve` in its own transaction;"
                                                 " anchor texts of links found later every second")
    near_duplicates: bool = Field(False, description="sign each page (where it is judged) and do not expand a page"
                                                     " whose text nearly repeats one stored before (Jaccard >= 0.8)")
    database: str | None = Field(None, pattern=r"^postgres(ql)?://", description="postgresql://…: a crawl shared by"
                                 " workers keeps its frontier and repository there (none: crawl.db in the crawl directory)")
    crawl_name: str | None = Field(None, pattern=r"^[a-z0-9_]{1,40}$", description="with database: the crawl's name"
                                   " there (its schema crawl_NAME; default: from the crawl directory's name)")


class CrawlConfig(_Section):
    seeds: list[str] = Field(default_factory=list)
    seeds_file: str | None = None
    topic: TopicSettings = Field(default_factory=TopicSettings)
    classifier: Classifier = "svm-cosine"
    learner: LearnerSettings = Field(default_factory=LearnerSettings)
    strategy: Strategy = "best-first"
    apprentice: ApprenticeSettings = Field(default_factory=ApprenticeSettings)
    focus: FocusSettings = Field(default_factory=FocusSettings)
    adaptation: AdaptationSettings = Field(default_factory=AdaptationSettings)
    frontier: FrontierSettings = Field(default_factory=FrontierSettings)
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    politeness: PolitenessSettings = Field(default_factory=PolitenessSettings)
    fetch: FetchSettings = Field(default_factory=FetchSettings)
    urls: UrlFilterSettings = Field(default_factory=UrlFilterSettings)
    host_map: HostMapSettings = Field(default_factory=HostMapSettings)
    text: TextSettings = Field(default_factory=TextSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    harvest_log_every: int = Field(50, ge=1, description="pages between lines of harvest.jsonl")

    @model_validator(mode="after")
    def _map_stays_on_loopback(self) -> CrawlConfig:
        if self.fetch.loopback_only:
            for name, address in self.host_map.hosts.items():
                host = address.rpartition(":")[0].strip("[]")
                try:
                    loopback = ipaddress.ip_address(host).is_loopback
                except ValueError:
                    loopback = host == "localhost"
                if not loopback:
                    raise ValueError(f"host_map.hosts.{name}: {address} is not on loopback and fetch.loopback_only is set")
        return self

    @model_validator(mode="after")
    def _has_seeds(self) -> CrawlConfig:
        if not self.seeds and not self.seeds_file:
            raise ValueError("seeds: none given (set 'seeds' or 'seeds_file')")
        if self.strategy not in ("bfs", "dfs") and not self.topic.positive and not self.topic.taxonomy:
            raise ValueError(f"strategy: {self.strategy} needs topic.positive examples or a topic.taxonomy")
        if self.topic.taxonomy and self.topic.positive:
            raise ValueError("topic: give either positive examples or a taxonomy, not both")
        if self.adaptation.pseudo_after is not None and not self.topic.positive:
            raise ValueError("adaptation.pseudo_after: retrains the critic of one topic given by topic.positive examples"
                             " (a taxonomy's or no critic cannot)")
        return self


def validate_config(data: dict, source: str = "config") -> CrawlConfig:
    """Build the model, turning pydantic's report into one line per problem."""
    try:
        return CrawlConfig.model_validate(data)
    except ValidationError as err:
        lines = []
        for problem in err.errors():
            message = problem["msg"].removeprefix("Value error, ")
            field = ".".join(str(part) for part in problem["loc"])
            lines.append(f"{source}: {field}: {message}" if field else f"{source}: {message}")
        raise ConfigError("\n".join(lines)) from None


def read_config_data(path: Path) -> dict:
    """The raw mapping of a YAML config file; unreadable or malformed YAML is a ConfigError."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        reason = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{where}: invalid YAML: {reason}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, found {type(data).__name__}")
    return data


def load_config(path: str | Path) -> CrawlConfig:
    """Read a YAML config; relative paths inside it are relative to the file."""
    path = Path(path)
    return resolve_paths(validate_config(read_config_data(path), source=str(path)), path.parent)


def resolve_paths(config: CrawlConfig, base: Path) -> CrawlConfig:
    """Make file references absolute so the copy in the crawl directory still works."""

    def fix(entry: str) -> str:
        if "://" in entry or Path(entry).is_absolute():
            return entry
        return str((base / entry).resolve())

    topic = config.topic.model_copy(
        update={"positive": [fix(e) for e in config.topic.positive], "negative": [fix(e) for e in config.topic.negative]}
    )
    seeds_file = fix(config.seeds_file) if config.seeds_file else None
    return config.model_copy(update={"topic": topic, "seeds_file": seeds_file})


def dump_config(config: CrawlConfig, path: Path) -> None:
    path.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
