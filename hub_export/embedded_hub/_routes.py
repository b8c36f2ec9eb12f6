"""Hub-protocol routes of the embedded server: request in, :class:`Response` out, no socket code here.

Each route mirrors what huggingface_hub 2.4 sends and reads (``hf_api.py``, ``_commit_api.py``, ``lfs.py``,
``file_download.py``): the same paths, query parameters, JSON keys, ``X-Error-Code`` values and headers
(``X-Repo-Commit``, ``ETag``, ``X-Linked-Etag``, ``X-Linked-Size``). The LFS routes live in
:mod:`hub_export.embedded_hub._lfs`, upload rules and commit payloads in :mod:`hub_export.embedded_hub._uploads`,
storage in :mod:`hub_export.embedded_hub._gitstore`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import UTC, datetime
from functools import partial
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode

from hub_export.embedded_hub._access import AccessPolicy, unauthorized
from hub_export.embedded_hub._admin import RepoAdmin
from hub_export.embedded_hub._catalog import iter_repos, repo_info, select
from hub_export.embedded_hub._discussion_routes import DiscussionRoutes
from hub_export.embedded_hub._discussions import Discussions
from hub_export.embedded_hub._git_http import GitHttp
from hub_export.embedded_hub._gitstore import GitRepo, HubStore
from hub_export.embedded_hub._lfs import LfsRoutes
from hub_export.embedded_hub._names import check_ref_name, clean_path, entry_not_found, revision_not_found
from hub_export.embedded_hub._protocol import (
    Request,
    Response,
    error_response,
    iter_lines,
    json_body,
    json_response,
    ranged,
)
from hub_export.embedded_hub._uploads import GITATTRIBUTES, apply_operations, is_ignored, parse_commit, upload_mode
from hub_export.errors import StoreError

_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
_API_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
_SUBPATHS = {
    "revision",
    "refs",
    "branch",
    "tag",
    "tree",
    "paths-info",
    "preupload",
    "commit",
    "commits",
    "resolve",
    "discussions",
    "settings",
    "super-squash",
    "duplicate",
}
#: Writes whose access the route decides (a pull request's author may commit to it and comment without owning
#: the repo, as on the Hub).
_OWN_CHECKS = {"commit", "discussions", "preupload", "duplicate"}
_READ_POSTS = {"paths-info"}


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _count(value: str | None, name: str, default: int) -> int:
    """A non-negative integer query parameter (``default`` when absent).

    Raises:
        StoreError: 400 for anything but digits.
    """
    if value is None or value == "":
        return default
    if not value.isdigit() or len(value) > 12:
        raise StoreError(f"Invalid {name}: {value!r} (a non-negative integer)")
    return int(value)


class Router:
    """Maps Hub-protocol requests to the store.

    Args:
        store: The repositories.
        access: Who may do what (:mod:`hub_export.embedded_hub._access`); every route asks it.
        secret: Key signing LFS upload URLs (they carry no bearer token, like presigned S3 URLs).

    Attributes:
        lfs: The LFS routes (their ``multipart_threshold`` and ``chunk_size`` are the server's settings).
    """

    page_size = 1000

    def __init__(self, store: HubStore, access: AccessPolicy, secret: bytes):
        self.store, self.access = store, access
        self.lfs = LfsRoutes(store, secret, self.open_repo, access)
        self.discussions = DiscussionRoutes(store, access)
        self.admin = RepoAdmin(store, access, self.open_repo)
        self.git = GitHttp(self.open_repo)
        self._secret = secret
        self._pages: Any = None  # the web pages (hub_export.embedded_hub.pages), made at their first request

    def handle(self, req: Request) -> Response:
        """Answer one request; store errors become Hub-shaped error responses."""
        try:
            req.identity = self.access.identify(req.headers.get("Authorization"))
            return self._dispatch(req, [unquote(s, errors="strict") for s in req.path.split("/")[1:]])
        except UnicodeDecodeError:
            return error_response(StoreError("Malformed URL encoding"))
        except StoreError as err:
            return error_response(err)

    def open_repo(self, req: Request, repo_type: str, repo_id: str, write: str | None = None) -> GitRepo:
        """The repo, if the request may read it (else 404, as if it did not exist), and write to it when ``write``
        names the action (else 401/403)."""
        repo = self.store.get(repo_type, repo_id)
        self.access.require_read(req.identity, repo.repo_id, bool(self.store.meta(repo)["private"]))
        if write is not None:
            self.access.require_write(req.identity, repo.repo_id.split("/")[0], write)
        return repo

    def _author(self, req: Request) -> str:
        return req.identity.user or self.access.default_user

    def _dispatch(self, req: Request, segs: list[str]) -> Response:
        if any("\x00" in s for s in segs):
            raise StoreError("Invalid path")
        method = req.method
        if segs[:1] == ["api"]:
            rest = segs[1:]
            if rest == ["whoami-v2"] and method == "GET":
                return self._whoami(req)
            if rest == ["validate-yaml"] and method == "POST":
                return self._validate_yaml(req)
            if rest == ["repos", "create"] and method == "POST":
                return self._create_repo(req)
            if rest == ["repos", "delete"] and method == "DELETE":
                body = json_body(req)
                repo_type = body.get("type") or "model"
                namespace = body.get("organization") or req.identity.user or self.access.default_user
                repo = self.open_repo(req, repo_type, f"{namespace}/{body.get('name')}", write="delete a repo")
                self.store.delete(repo_type, repo.repo_id)
                return json_response({})
            if len(rest) == 1 and rest[0] in _API_TYPES and method == "GET":
                return self._list_repos(req, _API_TYPES[rest[0]])
            if rest == ["repos", "move"] and method == "POST":
                return self.admin.move(req)
            if len(rest) >= 2 and rest[0] in _API_TYPES:
                return self._repo_api(req, _API_TYPES[rest[0]], rest[1:])
            raise StoreError(f"Not found: {req.path}", 404)
        repo_type = "model"
        if len(segs) > 3 and segs[0] in ("datasets", "spaces"):
            repo_type, segs = segs[0][:-1], segs[1:]
        for n in (1, 2):
            if segs[n:] in (["info", "refs"], ["git-upload-pack"], ["git-receive-pack"]):  # git over smart HTTP
                repo_id = "/".join(segs[:n])
                return self.git.handle(req, repo_type, repo_id.removesuffix(".git"), segs[n:])
            if len(segs) > n + 1 and segs[n] == "resolve" and method in ("GET", "HEAD"):
                rev, i = self._rev(segs[n + 1 :], 0)
                repo = self.open_repo(req, repo_type, "/".join(segs[:n]))
                return self._resolve(req, repo, rev, segs[n + 1 + i :])
            if len(segs) > n + 3 and segs[n - 1].endswith(".git") and segs[n : n + 3] == ["info", "lfs", "objects"]:
                repo_id = "/".join(segs[:n])[:-4]
                return self.lfs.handle(req, repo_type, repo_id, segs[n + 3 :])
        page = self._page(req, segs) if repo_type == "model" else None
        if page is not None:
            return page
        raise StoreError(f"Not found: {req.path}", 404)

    def _page(self, req: Request, segs: list[str]) -> Response | None:
        """The web page at this URL (None when it is not a page's)."""
        if self._pages is None:
            try:
                from hub_export.embedded_hub.pages import PageRoutes

                self._pages = PageRoutes(self.store, self.access, self._secret)
            except ImportError as exc:
                raise StoreError(
                    f"The hub's web pages need {exc.name or 'jinja2'}: pip install 'hub-export[hub]'", 501
                ) from None
        return self._pages.handle(req, segs)

    @staticmethod
    def _rev(tail: list[str], i: int) -> tuple[str, int]:
        """Read a revision at ``tail[i]``, accepting an unencoded ``refs/pr/N``; return it and the next index."""
        if i >= len(tail):
            raise StoreError("Missing revision")
        if tail[i] == "refs" and len(tail) > i + 2 and tail[i + 1] in ("pr", "convert", "heads", "tags"):
            return "/".join(tail[i : i + 3]), i + 3
        return tail[i], i + 1

    def _repo_api(self, req: Request, repo_type: str, rest: list[str]) -> Response:
        n = 2 if len(rest) >= 2 and rest[1] not in _SUBPATHS else 1
        repo_id, tail = "/".join(rest[:n]), rest[n:]
        action, method = (tail[0] if tail else ""), req.method
        write = method not in ("GET", "HEAD") and action not in _READ_POSTS and action not in _OWN_CHECKS
        repo = self.open_repo(req, repo_type, repo_id, write=f"{action or 'change'} this repo" if write else None)
        if action == "discussions":
            return self.discussions.handle(req, repo, tail[1:])
        if (method, tail[:1]) == ("PUT", ["settings"]) and len(tail) == 1:
            return self.admin.settings(req, repo)
        if method == "POST" and action == "super-squash" and len(tail) > 1:
            return self.admin.super_squash(req, repo, "/".join(tail[1:]))
        if (method, tail) == ("POST", ["duplicate"]):
            return self.admin.duplicate(req, repo)
        if method == "GET" and action in ("", "revision"):
            return self._info(req, repo, self._rev(tail, 1)[0] if tail else "main")
        if method == "GET" and tail == ["refs"]:
            return self._refs(req, repo)
        if action == "branch" and len(tail) > 1 and method in ("POST", "DELETE"):
            return self._branch(req, repo, "/".join(tail[1:]))
        if action == "tag" and len(tail) > 1 and method in ("POST", "DELETE"):
            return self._tag(req, repo, "/".join(tail[1:]))
        if action == "tree" and len(tail) > 1 and method == "GET":
            rev, i = self._rev(tail, 1)
            return self._tree(req, repo, rev, "/".join(tail[i:]))
        if action == "resolve" and len(tail) > 2 and method in ("GET", "HEAD"):
            rev, i = self._rev(tail, 1)
            return self._resolve(req, repo, rev, tail[i:])
        if len(tail) > 1 and (method, action) in {
            ("POST", "paths-info"),
            ("POST", "preupload"),
            ("POST", "commit"),
            ("GET", "commits"),
        }:
            rev, _ = self._rev(tail, 1)
            return getattr(self, "_" + action.replace("-", "_"))(req, repo, rev)
        raise StoreError(f"Not found: {req.path}", 404)

    # -- account and repos ---------------------------------------------------------------------------
    def _whoami(self, req: Request) -> Response:
        identity = req.identity
        if identity.anonymous or (self.access.open and not req.headers.get("Authorization")):
            raise unauthorized()
        name = identity.user
        return json_response(
            {
                "type": "user",
                "id": name,
                "name": name,
                "fullname": name,
                "email": None,
                "emailVerified": False,
                "isPro": False,
                "orgs": [
                    {"type": "org", "name": org, "roleInOrg": role} for org, role in sorted(identity.orgs.items())
                ],
                "auth": {
                    "type": "access_token",
                    "accessToken": {"displayName": identity.token_name or "hub-export", "role": identity.scope},
                },
            }
        )

    def _validate_yaml(self, req: Request) -> Response:
        import yaml  # here, not at module level: importing the package needs no third-party module

        content = str(json_body(req).get("content", ""))
        match = re.match(r"---\s*\n(.*?)\n---\s*(\n|$)", content, re.S)
        try:
            if match and not isinstance(yaml.safe_load(match[1]) or {}, dict):
                raise ValueError("metadata must be a YAML mapping")
        except (ValueError, yaml.YAMLError) as exc:
            return json_response({"errors": [{"message": str(exc)}], "warnings": []}, 400)
        return json_response({"errors": [], "warnings": []})

    def _url(self, req: Request, repo: GitRepo) -> str:
        return f"{req.base_url}/{_PREFIX[repo.repo_type]}{repo.repo_id}"

    def _create_repo(self, req: Request) -> Response:
        body = json_body(req)
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            raise StoreError("Missing repo name")
        repo_type = body.get("type") or "model"
        namespace = body.get("organization") or req.identity.user or self.access.default_user
        repo_id = f"{namespace}/{body['name']}"
        url = f"{req.base_url}/{_PREFIX.get(repo_type, '')}{self.store.canonical_id(repo_id)}"
        self.access.require_write(req.identity, str(namespace), "create a repo")
        if self.store.exists(repo_type, repo_id):
            return json_response({"error": "You already created this model repo", "url": url}, 409)
        try:
            initial = {".gitattributes": GITATTRIBUTES.encode()}
            private = body.get("visibility") == "private" or body.get("private") is True
            repo = self.store.create(repo_type, repo_id, initial, private=private)
        except StoreError as err:
            if err.status == 409:
                return json_response({"error": str(err), "url": url}, 409)
            raise
        return json_response({"url": self._url(req, repo), "name": repo.repo_id, "id": repo.repo_id})

    def _info(self, req: Request, repo: GitRepo, rev: str) -> Response:
        sha, _ = repo.resolve(rev)
        commit = repo.read_commit(sha)
        siblings = []
        for path, oid in repo.files(commit.tree).items():
            sibling: dict = {"rfilename": path}
            if req.flag("blobs"):
                info = repo.file_info(oid)
                sibling.update(size=info.size, blobId=oid)
                if info.lfs_oid:
                    sibling["lfs"] = {"sha256": info.lfs_oid, "size": info.size, "pointerSize": info.pointer_size}
            siblings.append(sibling)
        data = repo_info(self.store, repo, sha, siblings=siblings, card=True)
        return json_response({**data, "spaces": [], "sdk": self.store.meta(repo).get("sdk")})

    def _list_repos(self, req: Request, repo_type: str) -> Response:
        """``list_models`` (and datasets, spaces): the readable repos matching the query, a page at a time."""
        limit, cursor = _count(req.param("limit"), "limit", self.page_size), _count(req.param("cursor"), "cursor", 0)
        full, card = req.flag("full"), req.flag("cardData")
        items = []
        for repo in iter_repos(self.store, repo_type):
            if not self.access.can_read(
                req.identity, repo.repo_id.split("/")[0], bool(self.store.meta(repo)["private"])
            ):
                continue
            sha, _ = repo.resolve("main")
            siblings = [{"rfilename": p} for p in repo.files(repo.read_commit(sha).tree)] if full else None
            items.append(repo_info(self.store, repo, sha, siblings=siblings, card=card))
        chosen = select(
            items,
            search=req.param("search"),
            author=req.param("author"),
            filters=req.query.get("filter", []),
            pipeline_tag=req.param("pipeline_tag"),
            sort=req.param("sort"),
            direction=req.param("direction"),
        )
        size = max(1, min(limit, self.page_size))
        page = chosen[cursor : cursor + size]
        headers = {}
        if cursor + size < len(chosen):
            query = {k: v for k, v in req.query.items()}
            query["cursor"] = [str(cursor + size)]
            headers["Link"] = f'<{req.base_url}{req.path}?{urlencode(query, doseq=True)}>; rel="next"'
        return json_response(page, headers=headers)

    # -- refs ----------------------------------------------------------------------------------------
    def _refs(self, req: Request, repo: GitRepo) -> Response:
        def _refs_of(prefix: str, full: bool = False) -> list[dict]:
            return [
                {"name": f"{prefix}/{name}" if full else name, "ref": f"{prefix}/{name}", "targetCommit": oid}
                for name, oid in repo.list_refs(prefix).items()
            ]

        data = {"branches": _refs_of("refs/heads"), "tags": _refs_of("refs/tags"), "converts": _refs_of("refs/convert")}
        if req.flag("include_prs") or req.flag("include_pull_requests"):
            data["pullRequests"] = sorted(_refs_of("refs/pr", True), key=lambda r: int(r["ref"].split("/")[-1]))
        return json_response(data)

    def _branch(self, req: Request, repo: GitRepo, name: str) -> Response:
        ref = f"refs/heads/{check_ref_name(name)}"
        with self.store.lock(repo.repo_type, repo.repo_id):
            if req.method == "DELETE":
                if repo.read_ref(ref) is None:
                    raise revision_not_found(name)
                if name == "main":
                    raise StoreError("Cannot delete the default branch 'main'", 403)
                repo.delete_ref(ref)
                return json_response({})
            body = json_body(req)
            if repo.read_ref(ref) is not None:
                raise StoreError(f"Reference already exists: {ref}", 409)
            repo.write_ref(ref, repo.resolve(str(body.get("startingPoint") or "main"))[0])
        return json_response({})

    def _tag(self, req: Request, repo: GitRepo, target: str) -> Response:
        with self.store.lock(repo.repo_type, repo.repo_id):
            if req.method == "DELETE":
                ref = f"refs/tags/{check_ref_name(target)}"
                if repo.read_ref(ref) is None:
                    raise revision_not_found(target)
                repo.delete_ref(ref)
                return json_response({})
            tag = json_body(req).get("tag")
            ref = f"refs/tags/{check_ref_name(str(tag or ''))}"
            sha, _ = repo.resolve(target)
            if repo.read_ref(ref) is not None:
                raise StoreError(f"Tag already exists: {tag}", 409)
            repo.write_ref(ref, sha)
        return json_response({})

    # -- listing -------------------------------------------------------------------------------------
    def _entry(self, repo: GitRepo, path: str, is_dir: bool, oid: str, last: dict | None) -> dict:
        if is_dir:
            entry = {"type": "directory", "oid": oid, "size": 0, "path": path}
        else:
            info = repo.file_info(oid)
            entry = {"type": "file", "oid": oid, "size": info.size, "path": path}
            if info.lfs_oid:
                entry["lfs"] = {"oid": info.lfs_oid, "size": info.size, "pointerSize": info.pointer_size}
        if last is not None:
            entry["lastCommit"] = last.get(path)
        return entry

    @staticmethod
    def _last_commits(repo: GitRepo, head: str, paths: list[str]) -> dict[str, dict]:
        """For each path, the newest first-parent commit that changed it."""
        out, pending = {}, set(paths)
        for commit in repo.history(head, limit=1000):
            parent_tree = repo.read_commit(commit.parents[0]).tree if commit.parents else None
            for path in list(pending):
                before = repo.lookup(parent_tree, path) if parent_tree else None
                if before != repo.lookup(commit.tree, path):
                    out[path] = {"id": commit.oid, "title": commit.title, "date": _iso(commit.timestamp)}
                    pending.discard(path)
            if not pending:
                break
        return out

    def _tree(self, req: Request, repo: GitRepo, rev: str, path: str) -> Response:
        sha, _ = repo.resolve(rev)
        tree = repo.read_commit(sha).tree
        path = clean_path(path, folder=True) if path else ""
        found = repo.lookup(tree, path)
        if found is None or not found[0]:
            raise entry_not_found(path or "/", sha)
        prefix = f"{path}/" if path else ""
        items = [(prefix + p, d, o) for p, d, o in repo.walk(found[1]) if req.flag("recursive") or "/" not in p]
        size = max(1, min(_count(req.param("limit"), "limit", self.page_size), self.page_size))
        start = _count(req.param("cursor"), "cursor", 0)
        page = items[start : start + size]
        last = self._last_commits(repo, sha, [p for p, _, _ in page]) if req.flag("expand") else None
        headers = {}
        if start + size < len(items):
            query = {k: v[0] for k, v in req.query.items()}
            query["cursor"] = str(start + size)
            headers["Link"] = f'<{req.base_url}{req.path}?{urlencode(query)}>; rel="next"'
        return json_response([self._entry(repo, *item, last) for item in page], headers=headers)

    def _paths_info(self, req: Request, repo: GitRepo, rev: str) -> Response:
        raw = req.read_body()
        if "json" in (req.headers.get("Content-Type") or ""):
            try:
                body = json.loads(raw)
                paths, expand = body.get("paths", []), bool(body.get("expand"))
            except (ValueError, AttributeError):
                raise StoreError("Malformed JSON body") from None
        else:
            form = parse_qs(raw.decode("utf-8", "replace"))
            paths, expand = form.get("paths", []), (form.get("expand", ["false"])[0].lower() == "true")
        if not isinstance(paths, list):
            raise StoreError("paths must be a list")
        sha, _ = repo.resolve(rev)
        tree = repo.read_commit(sha).tree
        found = []
        for path in dict.fromkeys(clean_path(str(p), folder=True) for p in paths):
            hit = repo.lookup(tree, path)
            if hit is not None:
                found.append((path, *hit))
        last = self._last_commits(repo, sha, [p for p, _, _ in found]) if expand else None
        return json_response([self._entry(repo, *item, last) for item in found])

    def _commits(self, req: Request, repo: GitRepo, rev: str) -> Response:
        sha, _ = repo.resolve(rev)
        return json_response(
            [
                {
                    "id": c.oid,
                    "title": c.title,
                    "message": c.message,
                    "date": _iso(c.timestamp),
                    "authors": [{"user": c.author, "avatar": None}],
                }
                for c in repo.history(sha)
            ]
        )

    # -- uploads -------------------------------------------------------------------------------------
    def _text_at(self, repo: GitRepo, tree: str, path: str) -> str:
        hit = repo.lookup(tree, path)
        return repo.read_object(hit[1])[1].decode("utf-8", "replace") if hit and not hit[0] else ""

    def _preupload(self, req: Request, repo: GitRepo, rev: str) -> Response:
        # the first call of every commit: a read token is refused here (the commit decides the rest)
        self.access.require_contributor(req.identity, "upload files")
        body = json_body(req)
        files = body.get("files") if isinstance(body, dict) else None
        if not isinstance(files, list):
            raise StoreError("Malformed preupload payload: 'files' must be a list")
        sha, _ = repo.resolve(rev)
        tree = repo.read_commit(sha).tree
        attributes = self._text_at(repo, tree, ".gitattributes")
        gitignore = body.get("gitIgnore")
        gitignore = gitignore if isinstance(gitignore, str) else self._text_at(repo, tree, ".gitignore")
        out = []
        for item in files:
            if not isinstance(item, dict) or not isinstance(item.get("size"), int):
                raise StoreError("Malformed preupload payload: each file needs a path and a size")
            path = clean_path(item.get("path"))
            try:
                sample = base64.b64decode(str(item.get("sample", "")), validate=True)
            except binascii.Error:
                raise StoreError(f"Malformed sample for {path!r}") from None
            entry = {
                "path": path,
                "uploadMode": upload_mode(path, item["size"], sample, attributes),
                "shouldIgnore": is_ignored(gitignore, path),
            }
            hit = repo.lookup(tree, path)
            if hit and not hit[0]:
                info = repo.file_info(hit[1])
                entry["oid"] = info.lfs_oid or info.oid
            out.append(entry)
        return json_response({"files": out, "commitOid": sha})

    def _commit(self, req: Request, repo: GitRepo, rev: str) -> Response:
        create_pr = req.flag("create_pr")
        pr_number = self.discussions.may_commit(req, repo, rev, create_pr)
        # Read (and store the regular files of) the payload line by line before taking the repo's lock.
        header, ops = parse_commit(iter_lines(req.chunks(), req.max_buffered), partial(repo.write_object, "blob"))
        with self.store.lock(repo.repo_type, repo.repo_id):
            head, ref = repo.resolve(rev)
            if ref is None or not ref.startswith(("refs/heads/", "refs/pr/")):
                raise StoreError(f"Cannot commit to {rev!r}: not a branch or a pull request", 400)
            parent = str(header.get("parentCommit") or "").lower()
            if parent and not head.startswith(parent):
                raise StoreError("A commit has happened since. Please refresh and try again.", 412)
            files, blobs = apply_operations(repo, repo.files(repo.read_commit(head).tree), ops)
            for data in blobs.values():
                repo.write_object("blob", data)
            commit = repo.create_commit(
                repo.write_tree(files),
                [head],
                header["summary"],
                str(header.get("description") or ""),
                self._author(req),
            )
            pr_url = None
            board = Discussions(repo)
            if create_pr:
                opened = board.create(
                    header["summary"],
                    str(header.get("description") or ""),
                    self._author(req),
                    pull_request=True,
                    status="open",
                )
                pr_number = opened["num"]
                ref, pr_url = f"refs/pr/{pr_number}", f"{self._url(req, repo)}/discussions/{pr_number}"
            repo.write_ref(ref, commit)
            if pr_number is not None:
                board.record_commit(pr_number, commit, header["summary"], self._author(req))
        return json_response(
            {
                "success": True,
                "commitOid": commit,
                "commitUrl": f"{self._url(req, repo)}/commit/{commit}",
                "hookOutput": "",
                "pullRequestUrl": pr_url,
            }
        )

    # -- downloads -----------------------------------------------------------------------------------
    def _resolve(self, req: Request, repo: GitRepo, rev: str, parts: list[str]) -> Response:
        path = clean_path("/".join(parts))
        sha, _ = repo.resolve(rev)
        hit = repo.lookup(repo.read_commit(sha).tree, path)
        if hit is None or hit[0]:
            raise entry_not_found(path, sha)
        info = repo.file_info(hit[1])
        headers = {"X-Repo-Commit": sha, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if info.lfs_oid:
            file = repo.lfs_path(info.lfs_oid)
            if not file.is_file():
                raise entry_not_found(path, sha)
            headers.update(
                {"ETag": f'"{info.lfs_oid}"', "X-Linked-Etag": f'"{info.lfs_oid}"', "X-Linked-Size": str(info.size)}
            )
            resp = Response(200, headers, file=file, length=info.size)
        else:
            headers["ETag"] = f'"{info.oid}"'
            resp = Response(200, headers, stream=partial(repo.stream_blob, info.oid), length=info.size)
        return ranged(req.headers.get("Range"), resp, info.size)
