"""The pages of one repo: its home (card, exports, branches, pull requests), files, history, discussions, and the
merge form of a pull request. Each takes the :class:`~hub_export.embedded_hub.pages._routes.PageRoutes` that
checked the visitor may read the repo."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import hub_export.embedded_hub.pages._views as views
from hub_export.embedded_hub._discussions import Discussions
from hub_export.embedded_hub._gitstore import GitRepo
from hub_export.embedded_hub._protocol import Request, Response
from hub_export.errors import StoreError

#: The :class:`~hub_export.embedded_hub.pages._routes.PageRoutes` serving the page (that module imports this one).
PageRoutes = Any

__all__ = ["HANDLERS", "home", "merge"]

_USAGE = {
    "dynamo": "pt2",
    "onnx": "onnx",
    "executorch": "pte",
    "openvino": "openvino",
}


def _split_rev(tail: list[str]) -> tuple[str, list[str]]:
    """``(revision, the path's segments)`` from a URL tail; ``refs/pr/1`` may come unencoded."""
    if not tail:
        return "main", []
    if tail[0] == "refs" and len(tail) > 2 and tail[1] in ("pr", "heads", "tags", "convert"):
        return "/".join(tail[:3]), tail[3:]
    return tail[0], tail[1:]


def _base(routes: PageRoutes, repo: GitRepo, **extra: Any) -> dict[str, Any]:
    return {
        "repo_id": repo.repo_id,
        "prefix": "/" + quote(repo.repo_id),
        "private": bool(routes.store.meta(repo)["private"]),
        "link": views.link,
        **extra,
    }


def home(routes: PageRoutes, req: Request, visitor: dict[str, Any], repo: GitRepo) -> Response:
    sha, _ = repo.resolve("main")
    commit = repo.read_commit(sha)
    context = _base(routes, repo, tab="card")
    card_html, card_note = views.card(routes.cache, repo, commit, context["prefix"])
    open_prs = Discussions(repo).listing(0, "pull_request", "open", None)[0]
    exports = views.exports(routes.cache, repo, commit)
    exported = views.exported_at(routes.cache, repo, commit, [row.folder for row in exports])
    return routes.render(
        req, visitor, "repo.html", **context, commit=commit, exports=exports, exported=exported,
        card_html=card_html, card_note=card_note, metadata=views.metadata(routes.cache, repo, sha),
        branches=sorted(repo.list_refs("refs/heads/").items()), tags=sorted(repo.list_refs("refs/tags/").items()),
        pull_requests=open_prs, base_url=req.base_url,
        usage=_USAGE,
    )  # fmt: skip


def tree(routes: PageRoutes, req: Request, visitor: dict[str, Any], repo: GitRepo, tail: list[str]) -> Response:
    rev, parts = _split_rev(tail)
    sha, _ = repo.resolve(rev)
    commit = repo.read_commit(sha)
    path = "/".join(parts)
    rows = views.tree_view(repo, commit, path)
    return routes.render(
        req, visitor, "tree.html", **_base(routes, repo, tab="files"), rev=rev, commit=commit, path=path,
        crumbs=_crumbs(parts), rows=rows,
    )  # fmt: skip


def blob(routes: PageRoutes, req: Request, visitor: dict[str, Any], repo: GitRepo, tail: list[str]) -> Response:
    rev, parts = _split_rev(tail)
    if not parts:
        raise StoreError("No file named in the URL", 404)
    sha, _ = repo.resolve(rev)
    commit = repo.read_commit(sha)
    path = "/".join(parts)
    return routes.render(
        req, visitor, "blob.html", **_base(routes, repo, tab="files"), rev=rev, commit=commit, path=path,
        crumbs=_crumbs(parts), file=views.blob_view(repo, commit, path),
    )  # fmt: skip


def commits(routes: PageRoutes, req: Request, visitor: dict[str, Any], repo: GitRepo, tail: list[str]) -> Response:
    rev, _ = _split_rev(tail)
    sha, _ = repo.resolve(rev)
    page = views.page_number(req.param("p"))
    items, more = views.history_view(repo, sha, page)
    return routes.render(
        req, visitor, "commits.html", **_base(routes, repo, tab="commits"), rev=rev, commits=items, page=page,
        more=more,
    )  # fmt: skip


def commit(routes: PageRoutes, req: Request, visitor: dict[str, Any], repo: GitRepo, tail: list[str]) -> Response:
    if len(tail) != 1:
        raise StoreError("Not found", 404)
    sha, _ = repo.resolve(tail[0])
    item = repo.read_commit(sha)
    return routes.render(
        req, visitor, "commit.html", **_base(routes, repo, tab="commits"), commit=item,
        changes=views.commit_view(repo, item),
    )  # fmt: skip


def discussions(routes: PageRoutes, req: Request, visitor: dict[str, Any], repo: GitRepo, tail: list[str]) -> Response:
    board = Discussions(repo)
    if not tail:
        page = views.page_number(req.param("p"))
        items, count = board.listing(page, None, None, None)
        return routes.render(
            req, visitor, "discussions.html", **_base(routes, repo, tab="discussions"), items=items, count=count
        )
    if len(tail) != 1 or not tail[0].isdigit() or len(tail[0]) > 9:
        raise StoreError("Not found", 404)
    item = board.get(int(tail[0]))
    context = _base(routes, repo, tab="discussions")
    review = views.pull_request_view(board, item)
    if item["isPullRequest"] and review["formats"]:  # the exports it adds or changes, as its head has them
        head = repo.read_commit(repo.resolve(f"refs/pr/{item['num']}")[0])
        rows = views.exports(routes.cache, repo, head)
        review["exports"] = [row for row in rows if row.folder in review["formats"]]
    mergeable = item["isPullRequest"] and item["status"] in ("open", "draft") and not review["conflicts"]
    comments = {  # comments are Markdown, as untrusted as a card
        event["id"]: views.comment_html(routes.cache, event["data"]["latest"]["raw"], context["prefix"])
        for event in item["events"]
        if event["type"] == "comment" and not event["data"].get("hidden")
    }
    return routes.render(
        req, visitor, "discussion.html", **context, item=item, review=review, comments=comments,
        may_merge=mergeable and routes.may_write(visitor, repo), merged=req.param("merged") == "1",
    )  # fmt: skip


def merge(
    routes: PageRoutes, req: Request, visitor: dict[str, Any], repo: GitRepo, number: int, form: dict[str, str]
) -> Response:
    """The merge button of a pull request's page (the CSRF token is already checked)."""
    routes.access.require_write(visitor["identity"], repo.repo_id.split("/")[0], "merge a pull request")
    if number < 0:
        raise StoreError("Not found", 404)
    comment = form.get("comment", "").strip()[:4000] or None
    with routes.store.lock(repo.repo_type, repo.repo_id):
        Discussions(repo).merge(number, visitor["identity"].user, comment)
    return routes.redirect(f"/{quote(repo.repo_id)}/discussions/{number}?merged=1")


def _crumbs(parts: list[str]) -> list[tuple[str, str]]:
    return [(part, "/".join(parts[: i + 1])) for i, part in enumerate(parts)]


HANDLERS = {"tree": tree, "blob": blob, "commits": commits, "commit": commit, "discussions": discussions}
