"""``focuscrawl serve``: one FastAPI application over one or more crawl directories — the search
page and its JSON API (``/api/...``, described at ``/openapi.json``). Crawled strings are hostile:
templates autoescape everything they show. It binds 127.0.0.1 unless given a token, and then
every request must carry it (``Authorization: Bearer …``, or ``?token=`` once, kept in a cookie)."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import os
import secrets
import tempfile
import threading
import time
import urllib.parse
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Literal

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import (FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response,
                               StreamingResponse)
from fastapi.staticfiles import StaticFiles
from starlette.background import BackgroundTask
from starlette.middleware.trustedhost import TrustedHostMiddleware
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel

from focuscrawl.corrections import RELEVANT
from focuscrawl.exports import MEDIA_TYPES, text_chunks, write_parquet
from focuscrawl.search import ATTRIBUTES, DEFAULT_WEIGHTS, PAGE_SIZE, QueryError, Search
from focuscrawl.search.feedback import Personalisation
from focuscrawl.config import load_config
from focuscrawl.learn import MIN_INDICATORS, ModelError
from focuscrawl.organise.clustering import OrganiseError
from focuscrawl.organise.subtopics import accept as accept_subtopic
from focuscrawl.organise.subtopics import suggest as suggest_subtopics
from focuscrawl.taxonomy import TaxonomyError
from focuscrawl.search.reviser import REVIEW_ORDERS, estimated_precision, feature_space, retrain, review_list
from focuscrawl.search.seeds import find_seeds
from focuscrawl.store import EXPORT_FIELDS, CrawlDir, CrawlDirError, export_rows, open_index, read_only
from focuscrawl.web.dashboard import ControlError, dashboard_state, pause_crawl, resume_crawl, stop_crawl

BAD_QUERY = {400: {"description": "the query, a weight or a date cannot be used (the reason in `detail`)"}}
UNKNOWN = {404: {"description": "no crawl of that name is served"}}
FORBIDDEN = {400: {"description": "the body is not JSON"},
             403: {"description": "missing or stale CSRF token (the X-CSRF-Token header of the portal's pages)"}}
EXPORTED = {200: {"description": "one result per line (JSON or CSV), or a Parquet file",
                   "content": {media_type: {} for media_type in MEDIA_TYPES.values()}}}
TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
TOKEN_COOKIE = "focuscrawl_token"
USER_COOKIE = "focuscrawl_user"  # whose feedback profile a browser searches with
ANONYMOUS = "anonymous"  # the profile of a browser that gave no name
EXPORT_COLUMNS = ("url", "title", "topic", "score", "relevance", "size", "mime", "modified", "preview")


class PortalError(ValueError):
    """``serve`` cannot start as asked (one line: what and why)."""


def check_binding(host: str, token: str | None) -> None:
    """Only loopback without a token: anyone who can reach another address could read the crawl."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not token:
        raise PortalError(f"--host {host} is reachable from other machines: give --token SECRET (every request must then carry it)")


class Crawls:
    """The served crawl directories by name, each read through one read-only connection per thread."""

    def __init__(self, directories: list[Path]):
        self.directories = {}
        for directory in directories:
            name = directory.resolve().name
            while name in self.directories:
                name += "_"
            self.directories[name] = directory
        self._local = threading.local()

    def search(self, name: str | None) -> tuple[str, Search]:
        name = name or next(iter(self.directories))
        if name not in self.directories:
            raise HTTPException(404, f"no crawl named {name!r} is served")
        engines = self._local.__dict__.setdefault("engines", {})
        if name not in engines:
            engines[name] = Search(open_index(self.directories[name]))
        return name, engines[name]

    def personalisation(self, name: str) -> Personalisation:
        """The crawl's users' profiles, learnt again when feedback was added (per thread)."""
        known = self._local.__dict__.setdefault("personalisation", {})
        _, engine = self.search(name)
        known[name] = known[name].current() if name in known else Personalisation(engine)
        return known[name]


def create_app(directories: list[Path], token: str | None = None, allow_loopback: bool = False) -> FastAPI:
    crawls = Crawls(directories)
    app = FastAPI(title="focuscrawl portal", description="Search the pages of focused crawls (BINGO! §2.4.12, §4.1).")
    if token is not None:
        _require_token(app, token)
    else:  # loopback only: a page of another site whose name points at 127.0.0.1 (DNS rebinding) is refused
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1", "localhost", "[::1]"])
    csrf = secrets.token_urlsafe(24)  # in every page; state-changing requests must carry it
    _api_routes(app, crawls)
    _page_routes(app, crawls, csrf)
    _dashboard_routes(app, crawls, csrf, allow_loopback)
    _feedback_routes(app, crawls, csrf)
    _reviser_routes(app, crawls, csrf)
    _feature_routes(app, crawls, csrf)
    _subtopic_routes(app, crawls, csrf)
    app.mount("/static", StaticFiles(directory=str(Path(__file__).parent / "static")), name="static")
    return app


def _require_token(app: FastAPI, token: str) -> None:
    @app.middleware("http")
    async def require_token(request: Request, call_next):
        given = request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE) or \
            request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            return JSONResponse({"detail": "a token is required (Authorization: Bearer …)"}, status_code=401)
        if request.query_params.get("token") and not request.url.path.startswith("/api/"):
            # a browser's first visit: the token goes into a cookie and out of the address (history, links, logs)
            kept = [(key, value) for key, value in request.query_params.multi_items() if key != "token"]
            response = RedirectResponse(request.url.path + ("?" + urllib.parse.urlencode(kept) if kept else ""),
                                        status_code=303)
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
            return response
        return await call_next(request)


def run_search(crawls: Crawls, request: Request, crawl: str | None, q: str, page: int, within: str | None,
               words: bool, topic: str | None, host: str | None, mime: str | None, since: str | None,
               until: str | None) -> dict:
    """One page of results as the API returns it; weights come as ``w_<attribute>`` parameters."""
    name, engine = crawls.search(crawl)
    weights = {key[2:]: value for key, value in request.query_params.items() if key.startswith("w_") and value != ""}
    user = urllib.parse.unquote(request.cookies.get(USER_COOKIE, "")) or request.query_params.get("user") or ANONYMOUS
    try:
        started = time.perf_counter()
        ranking = "set by the user"
        if not weights and q.strip():  # §4.1: the user's or an aggregated profile's weights, else the defaults
            weights, ranking = crawls.personalisation(name).weights_for(q, user, page > 1 or bool(within))
        results = engine.search(q, weights, page, within or None, not words, topic or None, host or None,
                                mime or None, _day(since), _day(until, end=True))
    except (QueryError, ValueError) as error:
        raise HTTPException(400, str(error)) from None
    return {"crawl": name, "query": q, "within": within, "page": results.page, "pages": results.pages,
            "total": results.total, "capped": results.capped, "weights": results.weights, "ranking": ranking,
            "milliseconds": round((time.perf_counter() - started) * 1000, 1),
            "results": [{**hit, "modified": _date(hit["modified_at"])} for hit in results.hits]}


def _api_routes(app: FastAPI, crawls: Crawls) -> None:
    @app.get("/api/crawls")
    def api_crawls() -> list[dict]:
        """The crawls served, with the pages in each one's index and its topics."""
        served = []
        for name in crawls.directories:
            _, engine = crawls.search(name)
            served.append({"name": name, "pages": engine.index.size(),
                           "topics": [{"topic": t, "pages": n} for t, n in engine.index.topics()]})
        return served

    @app.get("/api/search", responses={**BAD_QUERY, **UNKNOWN})
    def api_search(request: Request, q: str = Query(..., description="BINGO! syntax: word, -word, word%, \"a phrase\""),
                   page: int = Query(1, ge=1), crawl: str | None = None, within: str | None = None,
                   words: bool = Query(False, description="match surface words, not stems"),
                   topic: str | None = None, host: str | None = None, mime: str | None = None,
                   since: str | None = Query(None, description="modified on or after YYYY-MM-DD"),
                   until: str | None = Query(None, description="modified on or before YYYY-MM-DD")) -> dict:
        """Ranked results, 25 a page; weights of the ranking attributes as ``w_<attribute>=…``
        (bm25, confidence, authority, hub, pagerank, topic_pagerank, recency, inverse_recency)."""
        return run_search(crawls, request, crawl, q, page, within, words, topic, host, mime, since, until)

    @app.get("/api/search.{extension}", response_class=Response, responses={**EXPORTED, **BAD_QUERY, **UNKNOWN})
    def api_search_export(request: Request, extension: Literal["jsonl", "csv", "parquet"], q: str = Query(...),
                          crawl: str | None = None, within: str | None = None, words: bool = False,
                          topic: str | None = None, host: str | None = None, mime: str | None = None,
                          since: str | None = None, until: str | None = None):
        """Every result of a search (the best 1 000 matches, ranked): JSON lines, CSV or Parquet."""
        found = run_search(crawls, request, crawl, q, 0, within, words, topic, host, mime, since, until)["results"]
        rows = [{field: hit.get(field) for field in EXPORT_COLUMNS} for hit in found]
        return _exported(rows, EXPORT_COLUMNS, extension, "results")

    @app.get("/api/crawls/{crawl}/export.{extension}", response_class=StreamingResponse,
             responses={**EXPORTED, **UNKNOWN})
    def api_export(crawl: str, extension: Literal["jsonl", "csv", "parquet"]):
        """The whole collection, one record per fetch (what ``focuscrawl export`` writes): JSON
        lines or CSV streamed, or a Parquet file."""
        name, _ = crawls.search(crawl)
        db = read_only(crawls.directories[name], any_thread=True)  # the response pulls chunks from several threads
        return _exported(export_rows(db), EXPORT_FIELDS, extension, name, db.close)

    @app.get("/api/seeds", responses=BAD_QUERY)
    def api_seeds(q: str = Query(..., description="BINGO! syntax"), count: int = Query(20, ge=1, le=1000),
                  per_host: int = Query(2, ge=1)) -> list[dict]:
        """Seed URLs for a new crawl from every served crawl's index, a few per host."""
        try:
            return find_seeds(list(crawls.directories.values()), q, None, count, per_host)
        except QueryError as error:
            raise HTTPException(400, str(error)) from None

    @app.get("/api/pages/{crawl}/{url_id}/similar", responses=UNKNOWN)
    def api_similar(crawl: str, url_id: int) -> dict:
        """The 25 pages most similar to the page (cosine of TF-IDF vectors)."""
        name, engine = crawls.search(crawl)
        return {"crawl": name, "url_id": url_id, "similar": engine.similar(url_id)}

    @app.get("/api/pages/{crawl}/{url_id}/neighbours", responses=UNKNOWN)
    def api_neighbours(crawl: str, url_id: int) -> dict:
        """Stored pages that link to the page, and those it links to."""
        return neighbours(crawls, crawl, url_id)


def _exported(rows, fields, extension: str, name: str, done=None) -> Response:
    """Rows as a download: text formats streamed a chunk at a time, Parquet written to a
    temporary file first (its index is at its end). ``done`` runs once the rows are read."""
    headers = {"Content-Disposition": f'attachment; filename="{name}.{extension}"'}
    if extension != "parquet":
        def chunks():
            try:
                yield from text_chunks(rows, extension, fields)
            finally:
                if done:
                    done()
        return StreamingResponse(chunks(), media_type=MEDIA_TYPES[extension], headers=headers)
    with tempfile.NamedTemporaryFile(suffix=".parquet", delete=False) as file:
        try:
            write_parquet(rows, fields, file)
        except BaseException:
            os.unlink(file.name)
            raise
        finally:
            if done:
                done()
    return FileResponse(file.name, media_type=MEDIA_TYPES[extension], headers=headers,
                        background=BackgroundTask(os.unlink, file.name))


def neighbours(crawls: Crawls, crawl: str, url_id: int) -> dict:
    name, engine = crawls.search(crawl)
    predecessors, successors = engine.index.neighbours(url_id)
    found = engine.index.details(predecessors + successors)
    return {"crawl": name, "url_id": url_id, "links_from": [found[i] for i in predecessors if i in found],
            "links_to": [found[i] for i in successors if i in found]}


def _page_routes(app: FastAPI, crawls: Crawls, csrf: str) -> None:
    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def search_page(request: Request, q: str = "", page: int = Query(1, ge=1), crawl: str | None = None,
                    within: str = "", words: bool = False, topic: str = "", host: str = "", mime: str = "",
                    since: str = "", until: str = ""):
        name, engine = crawls.search(crawl)
        context = {"crawls": list(crawls.directories), "crawl": name, "q": q, "within": within, "words": words,
                   "csrf": csrf, "user": urllib.parse.unquote(request.cookies.get(USER_COOKIE, "")), "page_size": PAGE_SIZE,
                   "topic": topic, "host": host, "mime": mime, "since": since, "until": until,
                   "topics": engine.index.topics(), "attributes": ATTRIBUTES, "error": None, "results": None,
                   "weights": {a: request.query_params.get(f"w_{a}", "") for a in ATTRIBUTES}, "defaults": DEFAULT_WEIGHTS}
        if q.strip():
            try:
                context["results"] = run_search(crawls, request, name, q, page, within, words, topic, host, mime,
                                                since, until)
            except HTTPException as error:
                context["error"] = error.detail
        return TEMPLATES.TemplateResponse(request, "search.html", context)

    @app.get("/neighbours/{crawl}/{url_id}", response_class=HTMLResponse, include_in_schema=False)
    def neighbours_page(request: Request, crawl: str, url_id: int):
        _, engine = crawls.search(crawl)
        page = engine.index.details([url_id]).get(url_id)
        if page is None:
            return RedirectResponse(f"/?crawl={crawl}")
        return TEMPLATES.TemplateResponse(request, "neighbours.html", {
            "page": page, "similar": engine.similar(url_id), **neighbours(crawls, crawl, url_id)})


def _dashboard_routes(app: FastAPI, crawls: Crawls, csrf: str, allow_loopback: bool) -> None:
    """The crawl dashboard and its live feed; stop, pause and resume are POSTs that carry the page's
    CSRF token (a page of another site cannot submit them)."""

    def directory_of(crawl: str) -> Path:
        if crawl not in crawls.directories:
            raise HTTPException(404, f"no crawl named {crawl!r} is served")
        return crawls.directories[crawl]

    @app.get("/api/crawls/{crawl}/status", responses=UNKNOWN)
    def api_status(crawl: str) -> dict:
        """Pages, harvest, frontier, errors by kind, hosts, and the harvest log as series."""
        return dashboard_state(directory_of(crawl))

    @app.get("/api/crawls/{crawl}/events", response_class=StreamingResponse, responses=UNKNOWN)
    async def api_events(crawl: str, every: float = Query(2.0, ge=0.5, le=60)):
        """Server-sent events: the status above every ``every`` seconds while the client listens."""
        directory = directory_of(crawl)

        async def events():
            while True:
                state = await asyncio.to_thread(dashboard_state, directory)
                yield f"data: {json.dumps(state)}\n\n"
                await asyncio.sleep(every)

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    @app.get("/crawls", response_class=HTMLResponse, include_in_schema=False)
    def crawls_page(request: Request):
        states = {name: dashboard_state(directory) for name, directory in crawls.directories.items()}
        return TEMPLATES.TemplateResponse(request, "crawls.html", {"states": states})

    @app.get("/crawls/{crawl}", response_class=HTMLResponse, include_in_schema=False)
    def dashboard_page(request: Request, crawl: str, message: str = ""):
        return TEMPLATES.TemplateResponse(request, "dashboard.html", {
            "crawl": crawl, "state": dashboard_state(directory_of(crawl)), "csrf": csrf, "message": message})

    @app.post("/crawls/{crawl}/{action}", include_in_schema=False)
    async def control(request: Request, crawl: str, action: Literal["stop", "pause", "resume"]):
        _check_csrf(str((await request.form()).get("csrf", "")), csrf)
        act, message = {"stop": (stop_crawl, "stopping: committed pages stay"), "pause": (pause_crawl, "pausing"),
                        "resume": (partial(resume_crawl, allow_loopback=allow_loopback), "resuming")}[action]
        try:
            act(directory_of(crawl))
        except ControlError as error:
            message = str(error)
        return RedirectResponse(f"/crawls/{crawl}?message={urllib.parse.quote(message)}", status_code=303)


def _check_csrf(given: str, csrf: str) -> None:
    if not hmac.compare_digest(given, csrf):
        raise HTTPException(403, "missing or stale CSRF token: reload the page")


def _feedback_routes(app: FastAPI, crawls: Crawls, csrf: str) -> None:
    """Users' marks on results (BINGO! §4.1.1)."""

    @app.post("/api/feedback", responses={**FORBIDDEN, **UNKNOWN})
    async def api_feedback(request: Request, mark: Feedback) -> dict:
        """A user's mark on a result (BINGO! §4.1.1); the user's later pages of results and
        refinements are ranked with weights learnt from their marks. Needs the page's
        X-CSRF-Token header (pages of other sites cannot send it)."""
        user = mark.user or urllib.parse.unquote(request.cookies.get(USER_COOKIE, "")) or ANONYMOUS
        name = await _write_marks(request, crawls, csrf, mark.crawl,
                                  lambda marks: marks.add_feedback(user, mark.query, mark.url_id, mark.relevant))
        return {"crawl": name, "user": user, "query": mark.query, "url_id": mark.url_id, "relevant": mark.relevant}


def _reviser_routes(app: FastAPI, crawls: Crawls, csrf: str) -> None:
    """BINGO!'s reviser (§2.4.13): review a topic's best pages, relabel them, estimate
    precision, look at the feature space, retrain."""

    @app.get("/api/reviser/{crawl}", responses=UNKNOWN)
    def api_review(crawl: str, topic: str | None = None, by: Literal["confidence", "authority", "hub"] = "confidence",
                   count: int = Query(20, ge=1, le=500)) -> dict:
        """A topic's best pages for review (none: a one-topic crawl's accepted pages), with their
        labels, and every topic's precision estimated from the reviewed pages."""
        name, engine = crawls.search(crawl)
        return {"crawl": name, "topic": topic, "by": by, "pages": review_list(engine.index, topic or None, by, count),
                "precision": estimated_precision(engine.index)}

    @app.post("/api/labels", responses={**FORBIDDEN, **UNKNOWN})
    async def api_label(request: Request, label: Label) -> dict:
        """A reviewed page's true topic ('relevant' in a one-topic crawl; '' for not relevant)."""
        name = await _write_marks(request, crawls, csrf, label.crawl,
                                  lambda marks: marks.set_label(label.url_id, label.label, label.user or ANONYMOUS))
        return {"crawl": name, "url_id": label.url_id, "label": label.label}

    @app.get("/reviser/{crawl}", response_class=HTMLResponse, include_in_schema=False)
    def reviser_page(request: Request, crawl: str, topic: str = "", by: str = "confidence", count: int = 20):
        found = api_review(crawl, topic or None, by if by in REVIEW_ORDERS else "confidence", min(max(count, 1), 500))
        _, engine = crawls.search(crawl)
        return TEMPLATES.TemplateResponse(request, "reviser.html", {
            **found, "topics": [t for t, _ in engine.index.topics()], "orders": REVIEW_ORDERS, "count": count,
            "csrf": csrf, "relevant": RELEVANT})

    @app.post("/reviser/{crawl}/retrain", response_class=HTMLResponse, include_in_schema=False)
    async def retrain_page(request: Request, crawl: str):
        _check_csrf(str((await request.form()).get("csrf", "")), csrf)
        name, _ = crawls.search(crawl)
        try:
            outcome = await asyncio.to_thread(retrain, crawls.directories[name])
        except (CrawlDirError, ModelError) as error:
            outcome = {"error": str(error)}
        return TEMPLATES.TemplateResponse(request, "retrained.html", {"crawl": name, **outcome})


def _feature_routes(app: FastAPI, crawls: Crawls, csrf: str) -> None:
    """The reviser's feature space (§2.4.13, Figure 2.24): terms excluded from the critic's
    training, or made a topic's indicators."""

    @app.post("/api/terms", responses={**FORBIDDEN, **UNKNOWN})
    async def api_term(request: Request, term: Term) -> dict:
        """Exclude a term (a stem) from what the critic learns at the next retraining, or include it again."""
        name = await _write_marks(request, crawls, csrf, term.crawl,
                                  lambda marks: marks.exclude_term(term.term, term.excluded, term.user or ANONYMOUS))
        return {"crawl": name, "term": term.term, "excluded": term.excluded}

    @app.post("/api/indicators", responses={**FORBIDDEN, **UNKNOWN})
    async def api_indicator(request: Request, term: Indicator) -> dict:
        """Make a term (a stem) an indicator of a topic ('' in a one-topic crawl), or no longer:
        from the next retraining, the topic accepts only pages holding N_w of its indicators."""
        name = await _write_marks(request, crawls, csrf, term.crawl, lambda marks: marks.set_indicator(
            term.topic, term.term, term.indicator, term.user or ANONYMOUS))
        return {"crawl": name, "topic": term.topic, "term": term.term, "indicator": term.indicator}

    @app.get("/reviser/{crawl}/features", response_class=HTMLResponse, include_in_schema=False)
    def features_page(request: Request, crawl: str, topic: str = ""):
        name, engine = crawls.search(crawl)
        try:
            terms, error = feature_space(crawls.directories[name], engine.index, topic or None), None
        except (ModelError, QueryError) as failure:
            terms, error = [], str(failure)
        return TEMPLATES.TemplateResponse(request, "features.html", {
            "crawl": name, "topic": topic, "terms": terms, "error": error, "csrf": csrf, "min_indicators": MIN_INDICATORS,
            "excluded": sorted(engine.index.marks.excluded_terms()),
            "indicators": sorted(engine.index.marks.indicators().get(topic, set()))})


def _subtopic_routes(app: FastAPI, crawls: Crawls, csrf: str) -> None:
    """Subtopics suggested by restrictive meta clustering (BINGO! §3.1.6), in the reviser; a
    taxonomy crawl's suggestion can be accepted into its own taxonomy folder."""

    @app.get("/api/reviser/{crawl}/subtopics", responses={400: {"description": "the topic cannot be split so"}, **UNKNOWN})
    async def api_subtopics(crawl: str, topic: str = "", k: int = Query(3, ge=2, le=20)) -> dict:
        """A topic's pages ("" for a one-topic crawl's) split into k suggested subtopics, each with
        its best terms, sentences and pages; pages the methods disagree on stay in the topic."""
        name, _ = crawls.search(crawl)
        try:
            return {"crawl": name, **await asyncio.to_thread(suggest_subtopics, crawls.directories[name], topic, k)}
        except OrganiseError as error:
            raise HTTPException(400, str(error)) from None

    @app.get("/reviser/{crawl}/subtopics", response_class=HTMLResponse, include_in_schema=False)
    async def subtopics_page(request: Request, crawl: str, topic: str = "", k: int = 3, message: str = ""):
        try:
            found, error = await api_subtopics(crawl, topic, min(max(k, 2), 20)), None
        except HTTPException as failure:
            found, error = {"crawl": crawl, "clusters": []}, failure.detail
        taxonomy = load_config(CrawlDir(crawls.directories[found["crawl"]]).config).topic.taxonomy
        return TEMPLATES.TemplateResponse(request, "subtopics.html", {
            **found, "topic": topic, "k": k, "error": error, "message": message, "csrf": csrf, "taxonomy": taxonomy})

    @app.post("/reviser/{crawl}/subtopics/accept", include_in_schema=False)
    async def accept_page(request: Request, crawl: str):
        form = await request.form()
        _check_csrf(str(form.get("csrf", "")), csrf)
        name, _ = crawls.search(crawl)
        directory, topic = crawls.directories[name], str(form.get("topic", ""))
        taxonomy = load_config(CrawlDir(directory).config).topic.taxonomy
        try:
            if not taxonomy:
                raise OrganiseError("a one-topic crawl has no taxonomy to add to: use focuscrawl topics accept --taxonomy DIR")
            node = await asyncio.to_thread(accept_subtopic, directory, Path(taxonomy), int(form.get("cluster", 0)),
                                           str(form.get("name", "")).strip() or "Subtopic", topic)
            message = f"added {node.name!r} with {len(node.positives)} pages; train it: focuscrawl topics train {taxonomy}"
        except (OrganiseError, TaxonomyError, ValueError) as error:
            message = str(error)
        return RedirectResponse(f"/reviser/{name}/subtopics?topic={urllib.parse.quote(topic)}&message="
                                f"{urllib.parse.quote(message)}", status_code=303)


async def _write_marks(request: Request, crawls: Crawls, csrf: str, crawl: str | None, act) -> str:
    """A user's mark written into a crawl (its own connection, waiting for the crawl's commits),
    if the request carries the page's CSRF token; returns the crawl's name."""
    _check_csrf(request.headers.get("x-csrf-token", ""), csrf)
    name, _ = crawls.search(crawl)

    def write() -> None:
        index = open_index(crawls.directories[name], writable=True)
        try:
            act(index.marks)
        finally:
            index.db.close()

    await asyncio.to_thread(write)
    return name


class Mark(BaseModel):
    """What every user's mark says besides itself: which crawl (none: the only one served) and who."""
    crawl: str | None = None
    user: str | None = None


class Term(Mark):
    term: str
    excluded: bool


class Indicator(Mark):
    topic: str = ""
    term: str
    indicator: bool


class Label(Mark):
    url_id: int
    label: str


class Feedback(Mark):
    query: str
    url_id: int
    relevant: bool


def _day(text: str | None, end: bool = False) -> float | None:
    """A YYYY-MM-DD date as a Unix time (the start of the day, or the end of it)."""
    if not text:
        return None
    try:
        day = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    except ValueError:
        raise ValueError(f"date {text!r} is not YYYY-MM-DD") from None
    return day.timestamp() + (86400 if end else 0)


def _date(timestamp: float | None) -> str | None:
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%d") if timestamp else None
