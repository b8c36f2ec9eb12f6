"""The embedded hub's web pages, on the Hub's own URLs: ``/``, ``/{repo}``, ``/{repo}/tree|blob/{rev}/{path}``,
``/{repo}/commits/{rev}``, ``/{repo}/commit/{sha}``, ``/{repo}/discussions[/N]``, ``/login``.

Server-rendered (Jinja2, autoescaped) and script-free: every response carries a Content-Security-Policy that allows
no script and no content from elsewhere. Access is the API's (:mod:`hub_export.embedded_hub._access`): a browser acts
as the token it signed in with (:mod:`._session`), else as an anonymous visitor (or, on a hub run open, as its
default user); a private repo it may not read is the same 404 page as a repo that does not exist. A form that
changes something (sign-in, sign-out, merging a pull request) needs the browser's CSRF token and a same-origin
``Origin``. Model cards and ``export.json`` files are untrusted (:mod:`._cards`, :mod:`._exports`).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import hub_export.embedded_hub.pages._repo_pages as repo_pages
import hub_export.embedded_hub.pages._views as views
from hub_export.embedded_hub._access import AccessPolicy
from hub_export.embedded_hub._accounts import Identity
from hub_export.embedded_hub._catalog import iter_repos
from hub_export.embedded_hub._gitstore import GitRepo, HubStore
from hub_export.embedded_hub._protocol import Request, Response
from hub_export.embedded_hub.pages._session import CSRF_COOKIE, SESSION_COOKIE, Sessions, cookie_header, read_cookies
from hub_export.errors import StoreError

__all__ = ["CONTENT_SECURITY_POLICY", "PageRoutes"]

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_HERE = Path(__file__).resolve().parent
_REPO_PAGES = {"tree", "blob", "commits", "commit", "discussions"}
_MAX_FORM = 16 * 1024


class PageRoutes:
    """Answers the page URLs for every repo of a store (None for a URL that is not a page).

    Args:
        store: The repositories.
        access: The access policy the API uses.
        secret: Key of the CSRF tokens.
    """

    def __init__(self, store: HubStore, access: AccessPolicy, secret: bytes):
        import jinja2

        self.store, self.access = store, access
        self.sessions = Sessions(secret)
        self.cache = views.Cache()
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters.update(size=_size, when=views.when, quote=lambda s: quote(str(s), safe="/"))

    # -- dispatch ------------------------------------------------------------------------------------------
    def handle(self, req: Request, segs: list[str]) -> Response | None:
        """The page for ``segs`` (the unquoted path segments), or None when the URL is not a page's."""
        method = req.method
        if segs == ["-", "hub.css"] and method in ("GET", "HEAD"):
            css = (_HERE / "static" / "hub.css").read_bytes()
            return Response(200, {"Content-Type": "text/css; charset=utf-8", "Cache-Control": "max-age=3600"}, css)
        page = self._which(segs, method)
        if page is None:
            return None
        try:
            visitor = self._visitor(req)
        except StoreError as err:
            return self._error(req, None, err)
        try:
            if method == "POST":
                return self._post(req, visitor, page, segs)
            return getattr(self, "_" + page)(req, visitor, segs)
        except StoreError as err:
            return self._error(req, visitor, err)

    @staticmethod
    def _which(segs: list[str], method: str) -> str | None:
        if method == "POST":
            if segs in (["login"], ["logout"]):
                return segs[0]
            if len(segs) == 5 and segs[2] == "discussions" and segs[4] == "merge":
                return "merge"
            return None
        if method not in ("GET", "HEAD"):
            return None
        if segs in ([], [""]):
            return "index"
        if segs == ["login"]:
            return "login"
        if len(segs) == 2 and all(segs):
            return "repo_home"
        if len(segs) >= 3 and all(segs[:2]) and segs[2] in _REPO_PAGES:
            return "repo_page"
        return None

    # -- who is asking -------------------------------------------------------------------------------------
    def _visitor(self, req: Request) -> dict[str, Any]:
        cookies = read_cookies(req.headers.get("Cookie"))
        sid = cookies.get(SESSION_COOKIE)
        session = self.sessions.get(sid)
        identity: Identity | None = None
        if session is not None:
            try:
                identity = self.access.identify(f"Bearer {session.token}")
            except StoreError:  # revoked or expired since: signed out
                self.sessions.end(sid)
                session = None
        if identity is None:
            identity = req.identity if req.identity is not None else self.access.identify(None)
        nonce = cookies.get(CSRF_COOKIE) or ""
        fresh = not (16 <= len(nonce) <= 64 and nonce.replace("-", "").replace("_", "").isalnum())
        if fresh:
            nonce = secrets.token_urlsafe(24)
        return {
            "identity": identity,
            "sid": sid if session else None,
            "nonce": nonce,
            "csrf": self.sessions.csrf_token(nonce),
            "set_nonce": fresh,
            "open": self.access.open,
        }

    def repo(self, visitor: dict[str, Any], segs: list[str]) -> GitRepo:
        """The repo of a page's URL, if the visitor may read it (else the 404 of a repo that does not exist)."""
        repo = self.store.get("model", "/".join(segs[:2]))
        self.access.require_read(visitor["identity"], repo.repo_id, bool(self.store.meta(repo)["private"]))
        return repo

    def may_write(self, visitor: dict[str, Any], repo: GitRepo) -> bool:
        """Whether the visitor may change ``repo`` (merge its pull requests)."""
        try:
            self.access.require_write(visitor["identity"], repo.repo_id.split("/")[0], "merge")
        except StoreError:
            return False
        return True

    # -- rendering -----------------------------------------------------------------------------------------
    def render(
        self, req: Request, visitor: dict[str, Any] | None, template: str, code: int = 200, **context: Any
    ) -> Response:
        identity = visitor["identity"] if visitor else None
        body = self.templates.get_template(template).render(
            visitor=visitor,
            user=None if identity is None or identity.anonymous else identity.user,
            open_hub=self.access.open,
            **context,
        )
        headers = {
            "Content-Type": "text/html; charset=utf-8",
            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
            "X-Content-Type-Options": "nosniff",
            "X-Frame-Options": "DENY",
            "Referrer-Policy": "same-origin",
            "Cache-Control": "no-store",
        }
        if visitor and visitor["set_nonce"]:
            headers["Set-Cookie"] = cookie_header(CSRF_COOKIE, visitor["nonce"])
        return Response(code, headers, b"" if req.method == "HEAD" else body.encode())

    def _error(self, req: Request, visitor: dict[str, Any] | None, err: StoreError) -> Response:
        status = err.status if 400 <= err.status < 600 else 500
        message = "Not found." if status == 404 else str(err)
        return self.render(req, visitor, "error.html", status, status=status, message=message)

    @staticmethod
    def redirect(location: str, cookie: str | None = None) -> Response:
        headers = {"Location": location, "Cache-Control": "no-store"}
        if cookie:
            headers["Set-Cookie"] = cookie
        return Response(303, headers)

    # -- pages ---------------------------------------------------------------------------------------------
    def _index(self, req: Request, visitor: dict[str, Any], segs: list[str]) -> Response:
        search = (req.param("search") or "").strip()[:100]
        wanted_format = (req.param("format") or "").strip()[:64]
        wanted_task = (req.param("task") or "").strip()[:64]
        page = views.page_number(req.param("p"))
        rows, formats, tasks = [], set(), set()
        for repo in iter_repos(self.store, "model"):
            meta = self.store.meta(repo)
            if not self.access.can_read(visitor["identity"], repo.repo_id.split("/")[0], bool(meta["private"])):
                continue
            sha, _ = repo.resolve("main")
            row_formats, row_tasks, updated = self._row(repo, sha)
            formats.update(row_formats)
            tasks.update(row_tasks)
            if search and search.lower() not in repo.repo_id.lower():
                continue
            if (wanted_format and wanted_format not in row_formats) or (wanted_task and wanted_task not in row_tasks):
                continue
            rows.append(
                {
                    "id": repo.repo_id,
                    "private": meta["private"],
                    "formats": row_formats,
                    "tasks": row_tasks,
                    "updated": updated,
                }
            )
        rows.sort(key=lambda r: -r["updated"])
        shown = rows[page * views.PAGE : (page + 1) * views.PAGE]
        return self.render(
            req, visitor, "index.html", rows=shown, total=len(rows), page=page,
            more=len(rows) > (page + 1) * views.PAGE, search=search, format=wanted_format, task=wanted_task,
            formats=sorted(formats), tasks=sorted(tasks),
        )  # fmt: skip

    def _login(self, req: Request, visitor: dict[str, Any], segs: list[str]) -> Response:
        return self.render(req, visitor, "login.html", failed=False)

    def _row(self, repo: GitRepo, sha: str) -> tuple[list[str], list[str], int]:
        """A repo's row in the list at commit ``sha``: its export formats, its tasks, its time (cached)."""
        return self.cache.get(("row", str(repo.path), sha), lambda: self._make_row(repo, sha))

    def _make_row(self, repo: GitRepo, sha: str) -> tuple[list[str], list[str], int]:
        commit = repo.read_commit(sha)
        exports = views.exports(self.cache, repo, commit)
        card = views.metadata(self.cache, repo, sha)
        tasks = {e.task for e in exports if e.task} | {str(card.get("pipeline_tag") or "")}
        return sorted({e.format for e in exports if e.format}), sorted(tasks - {""}), commit.timestamp

    def _repo_home(self, req: Request, visitor: dict[str, Any], segs: list[str]) -> Response:
        return repo_pages.home(self, req, visitor, self.repo(visitor, segs))

    def _repo_page(self, req: Request, visitor: dict[str, Any], segs: list[str]) -> Response:
        return repo_pages.HANDLERS[segs[2]](self, req, visitor, self.repo(visitor, segs), segs[3:])

    # -- forms ---------------------------------------------------------------------------------------------
    def _form(self, req: Request) -> dict[str, str]:
        announced = str(req.headers.get("Content-Length") or "0")
        if not announced.isdigit() or int(announced) > _MAX_FORM:
            raise StoreError("Form too large", 413)
        raw = req.read_body()
        if len(raw) > _MAX_FORM:
            raise StoreError("Form too large", 413)
        fields = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)
        return {k: v[0] for k, v in fields.items()}

    def _check_origin(self, req: Request) -> None:
        origin = req.headers.get("Origin")
        if origin and origin != "null":
            mine = urlsplit(req.base_url)
            theirs = urlsplit(origin)
            if (theirs.scheme, theirs.netloc) != (mine.scheme, mine.netloc):
                raise StoreError("This form was sent from another site", 403)

    def _post(self, req: Request, visitor: dict[str, Any], page: str, segs: list[str]) -> Response:
        self._check_origin(req)
        form = self._form(req)
        cookie_nonce = read_cookies(req.headers.get("Cookie")).get(CSRF_COOKIE)
        if not self.sessions.csrf_ok(cookie_nonce, form.get("csrf")):
            raise StoreError("The form's CSRF token is missing or wrong: reload the page and send it again", 403)
        if page == "logout":
            self.sessions.end(visitor["sid"])
            return self.redirect("/", cookie_header(SESSION_COOKIE, "", max_age=0))
        if page == "login":
            token = form.get("token", "").strip()
            try:
                identity = self.access.identify(f"Bearer {token}") if token else None
            except StoreError:
                identity = None
            if identity is None or identity.anonymous:
                return self.render(req, visitor, "login.html", 401, failed=True)
            sid, _ = self.sessions.start(token)
            return self.redirect("/", cookie_header(SESSION_COOKIE, sid))
        return repo_pages.merge(
            self,
            req,
            visitor,
            self.repo(visitor, segs),
            int(segs[3]) if segs[3].isdigit() and len(segs[3]) < 10 else -1,
            form,
        )


def _size(value: int) -> str:
    size = float(value)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"  # pragma: no cover - the loop returns
