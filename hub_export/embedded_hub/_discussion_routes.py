"""The discussion and pull-request routes of the embedded Hub, under ``/api/{type}s/{repo}/discussions``.

As on the Hub: whoever may read a repo reads its discussions; any user with a write token who may read it opens a
discussion or a pull request, comments, and commits to their own pull request (``refs/pr/N``); the author or the
repo's owner renames, closes and reopens; only the owner merges. Storage and merging live in
:mod:`hub_export.embedded_hub._discussions`.
"""

from __future__ import annotations

import re

from hub_export.embedded_hub._access import AccessPolicy
from hub_export.embedded_hub._discussions import PAGE_SIZE, Discussions
from hub_export.embedded_hub._gitstore import GitRepo, HubStore
from hub_export.embedded_hub._protocol import Request, Response, json_body, json_response
from hub_export.errors import StoreError

__all__ = ["DiscussionRoutes"]

_PR_REF = re.compile(r"refs/pr/(\d+)")


class DiscussionRoutes:
    """Answers ``.../discussions[/N[/action]]`` for every repo of a store.

    Args:
        store: The repositories (its per-repo lock serialises changes).
        access: The access policy.
    """

    def __init__(self, store: HubStore, access: AccessPolicy):
        self.store, self.access = store, access

    def _owner(self, req: Request, repo: GitRepo) -> bool:
        identity = req.identity
        if identity.anonymous or identity.scope != "write":
            return False
        try:
            self.access.require_write(identity, repo.repo_id.split("/")[0], "write")
        except StoreError:
            return False
        return True

    def may_commit(self, req: Request, repo: GitRepo, rev: str, create_pr: bool) -> int | None:
        """Check that the request may commit to ``rev`` of ``repo``; returns the pull request number when ``rev``
        is ``refs/pr/N`` (whose author may commit there without owning the repo).

        Raises:
            StoreError: 401/403 as :class:`AccessPolicy` says.
        """
        match = _PR_REF.fullmatch(rev)
        if create_pr or match:
            self.access.require_contributor(req.identity, "open or update a pull request")
            if match:
                number = int(match[1])
                try:
                    author = Discussions(repo).get(number)["author"]
                except StoreError:
                    author = None
                if author != req.identity.user and not self._owner(req, repo):
                    raise StoreError(
                        f"Only the author of pull request #{number} or the repo's owner may commit to it", 403
                    )
                return number
            return None
        self.access.require_write(req.identity, repo.repo_id.split("/")[0], "commit")
        return None

    def handle(self, req: Request, repo: GitRepo, tail: list[str]) -> Response:
        """Answer a request for ``.../discussions/<tail...>``."""
        board, method = Discussions(repo), req.method
        if not tail:
            if method == "GET":
                return self._list(req, board)
            if method == "POST":
                self.access.require_contributor(req.identity, "open a discussion")
                body = json_body(req)
                with self.store.lock(repo.repo_type, repo.repo_id):
                    item = board.create(
                        body.get("title"),
                        body.get("description") or "",
                        req.identity.user,
                        pull_request=bool(body.get("pullRequest")),
                    )
                return json_response(board.summary(item))
        if not tail[0].isdigit() or len(tail[0]) > 9:
            raise StoreError(f"Invalid discussion number: {tail[0]!r}")
        num = int(tail[0])
        action = "/".join(tail[1:])
        if method == "GET" and not action:
            return json_response(board.details(board.get(num), with_diff=req.flag("diff")))
        if method != "POST":
            raise StoreError(f"Not found: {req.path}", 404)
        body = json_body(req)
        self.access.require_contributor(req.identity, "take part in a discussion")
        user = req.identity.user
        with self.store.lock(repo.repo_type, repo.repo_id):
            item = board.get(num)
            if action == "comment":
                return json_response({"newMessage": board.comment(num, user, body.get("comment"))})
            if action in ("title", "status"):
                if item["author"] != user and not self._owner(req, repo):
                    raise StoreError(f"Only the author of #{num} or the repo's owner may change it", 403)
                if action == "title":
                    return json_response({"newTitle": board.rename(num, user, body.get("title"))})
                comment = body.get("comment")
                event = board.set_status(num, user, str(body.get("status")), str(comment) if comment else None)
                return json_response({"newStatus": event})
            if action == "merge":
                self.access.require_write(req.identity, repo.repo_id.split("/")[0], "merge a pull request")
                comment = body.get("comment")
                board.merge(num, user, str(comment) if comment else None)
                return json_response({})
            match = re.fullmatch(r"comment/([0-9a-f]{1,64})/(edit|hide)", action)
            if match:
                owner = self._owner(req, repo)
                event = board.change_comment(num, match[1], match[2], str(body.get("content") or ""), user, owner)
                return json_response({"updatedComment": event})
        raise StoreError(f"Not found: {req.path}", 404)

    def _list(self, req: Request, board: Discussions) -> Response:
        page = req.param("p") or "0"
        if not page.isdigit() or len(page) > 6:
            raise StoreError(f"Invalid page: {page!r}")
        kind, status = req.param("type"), req.param("status")
        if kind not in (None, "all", "discussion", "pull_request"):
            raise StoreError(f"Invalid type: {kind!r}")
        if status not in (None, "all", "open", "closed", "draft", "merged"):
            raise StoreError(f"Invalid status: {status!r}")
        items, count = board.listing(int(page), kind, status, req.param("author"))
        return json_response({"discussions": items, "count": count, "start": int(page) * PAGE_SIZE})
