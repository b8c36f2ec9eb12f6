"""Repo administration on the embedded Hub: settings (visibility, gating), move, duplicate, super-squash.

Each takes the repo's lock (both repos' for a move or a copy), builds the new state aside and puts it in place with a
rename, so a crash leaves the old state or the new one. Access as on the Hub: the owner changes settings, squashes
and moves (the destination namespace must be theirs too); anyone who may read a repo duplicates it into a namespace
of their own.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from typing import Any

from hub_export.embedded_hub._access import AccessPolicy
from hub_export.embedded_hub._gitstore import GitRepo, HubStore
from hub_export.embedded_hub._names import check_ref_name
from hub_export.embedded_hub._protocol import Request, Response, json_body, json_response
from hub_export.errors import StoreError

__all__ = ["RepoAdmin"]

_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
_GATED = ("auto", "manual", False)


def _link(source: str, destination: str) -> None:
    """Git and LFS objects never change once written (a new version is a new file): share them by a hard link."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


class RepoAdmin:
    """Answers ``PUT settings``, ``POST super-squash/<branch>``, ``POST duplicate`` and ``POST /api/repos/move``.

    Args:
        store: The repositories.
        access: The access policy.
        open_repo: ``open_repo(req, repo_type, repo_id, write=None | action)`` (the router's).
    """

    def __init__(self, store: HubStore, access: AccessPolicy, open_repo: Callable[..., GitRepo]):
        self.store, self.access, self.open_repo = store, access, open_repo

    def _write_meta(self, repo: GitRepo, meta: dict[str, Any]) -> None:
        temporary = repo.path / f".hub.json.{uuid.uuid4().hex}.tmp"
        temporary.write_text(json.dumps(meta))
        os.replace(temporary, repo.path / "hub.json")

    def settings(self, req: Request, repo: GitRepo) -> Response:
        """``update_repo_settings``: ``private`` / ``visibility`` and ``gated``."""
        body = json_body(req)
        with self.store.lock(repo.repo_type, repo.repo_id):
            meta = self.store.meta(repo)
            if "private" in body:
                if not isinstance(body["private"], bool):
                    raise StoreError("'private' must be true or false")
                meta["private"] = body["private"]
            if "visibility" in body:
                if body["visibility"] not in ("public", "private"):
                    raise StoreError("'visibility' must be 'public' or 'private'")
                meta["private"] = body["visibility"] == "private"
            if "gated" in body:
                if body["gated"] not in _GATED:
                    raise StoreError("'gated' must be 'auto', 'manual' or false")
                meta["gated"] = body["gated"]
            self._write_meta(repo, meta)
        return json_response({})

    def super_squash(self, req: Request, repo: GitRepo, branch: str) -> Response:
        """``super_squash_history``: the branch becomes one commit holding its current files."""
        message = json_body(req).get("message") or f"Super-squash branch '{branch}'"
        ref = f"refs/heads/{check_ref_name(branch)}"
        with self.store.lock(repo.repo_type, repo.repo_id):
            head = repo.read_ref(ref)
            if head is None:
                raise StoreError(f"Invalid rev id: {branch}", 404, "RevisionNotFound")
            tree = repo.read_commit(head).tree
            author = req.identity.user or self.access.default_user
            repo.write_ref(ref, repo.create_commit(tree, [], str(message)[:1000], "", author))
        return json_response({})

    def move(self, req: Request) -> Response:
        """``move_repo``: rename a repo, within a namespace or to another the user owns."""
        body = json_body(req)
        repo_type = body.get("type") or "model"
        source, target = str(body.get("fromRepo") or ""), str(body.get("toRepo") or "")
        repo = self.open_repo(req, repo_type, source, write="move this repo")
        target = self.store.canonical_id(target)
        self.access.require_write(req.identity, target.split("/")[0], "move a repo")
        self._copy(repo, repo_type, target, move=True, private=None)
        return json_response({"url": f"{req.base_url}/{_PREFIX.get(repo_type, '')}{target}"})

    def duplicate(self, req: Request, repo: GitRepo) -> Response:
        """``duplicate_repo``: a copy with the whole history (and LFS files) in a namespace of the user's."""
        body = json_body(req)
        target = self.store.canonical_id(str(body.get("repository") or ""))
        self.access.require_write(req.identity, target.split("/")[0], "create a repo")
        visibility = body.get("visibility")
        if visibility not in (None, "public", "private"):
            raise StoreError("'visibility' must be 'public' or 'private'")
        private = None if visibility is None else visibility == "private"
        self._copy(repo, repo.repo_type, target, move=False, private=private)
        return json_response({"url": f"{req.base_url}/{_PREFIX.get(repo.repo_type, '')}{target}"})

    def _copy(self, repo: GitRepo, repo_type: str, target: str, *, move: bool, private: bool | None) -> None:
        destination = self.store.path_of(repo_type, target)
        if target == repo.repo_id:
            raise StoreError(f"{target} is the repo itself", 409)
        first, second = sorted([repo.repo_id, target])
        with self.store.lock(repo_type, first), self.store.lock(repo_type, second):
            if (destination / "hub.json").is_file():
                raise StoreError(f"{target} already exists", 409)
            destination.parent.mkdir(parents=True, exist_ok=True)
            staging = destination.parent / f".new-{uuid.uuid4().hex}"
            try:
                shutil.copytree(
                    repo.path, staging, ignore=shutil.ignore_patterns(".tmp-*", "*.tmp", "uploads"), copy_function=_link
                )
                meta = json.loads((staging / "hub.json").read_text())
                meta["id"] = target
                if private is not None:
                    meta["private"] = private
                if not move:
                    (staging / "discussions.json").unlink(missing_ok=True)  # a copy starts without them
                    for ref in (staging / "refs" / "pr").glob("*"):
                        ref.unlink()
                fresh = staging / ".hub.json.new"
                fresh.write_text(json.dumps(meta))
                os.replace(fresh, staging / "hub.json")  # a new file: the copy's hub.json is linked to the source's
                os.replace(staging, destination)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            if move:
                self.store.delete(repo_type, repo.repo_id, locked=True)
