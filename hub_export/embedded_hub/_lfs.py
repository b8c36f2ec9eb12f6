"""The git-lfs routes of the embedded Hub, under ``/<repo>.git/info/lfs/objects``.

* ``POST batch``: upload or download actions per object (:func:`~hub_export.embedded_hub._uploads.lfs_batch`);
* ``PUT <oid>?size&exp&sig``: a single-part upload, streamed to disk and hashed on the way;
* ``PUT <oid>/multipart/<id>/<n>?size&chunk&exp&sig``: part ``n`` of a multipart upload, answered with an
  ``ETag``; ``POST <oid>/multipart/<id>?...``: its completion (:mod:`~hub_export.embedded_hub._multipart`);
* ``POST <oid>/verify``: whether the object is stored with the size the client expects;
* ``GET <oid>``: the object, with ``Range`` support.

Upload URLs carry no bearer token (the client sends none there, as to S3): their HMAC signature, bound to
the repo, oid, size, expiry and part, is the authorisation.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable

from hub_export.embedded_hub._access import AccessPolicy
from hub_export.embedded_hub._gitstore import GitRepo, HubStore
from hub_export.embedded_hub._multipart import MultipartUploads
from hub_export.embedded_hub._protocol import Request, Response, json_body, json_response, ranged
from hub_export.embedded_hub._uploads import DEFAULT_CHUNK_SIZE, DEFAULT_MULTIPART_THRESHOLD, lfs_batch, sign_upload
from hub_export.errors import StoreError

_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}


class LfsRoutes:
    """Answers the LFS routes of every repo of a store.

    Args:
        store: The repositories.
        secret: Key signing upload URLs.
        open_repo: ``open_repo(req, repo_type, repo_id)``: the repo if the request may read it, else 404.
        access: The access policy (an upload needs a write token; the commit decides what lands).

    Attributes:
        multipart_threshold: Objects of at least this size get multipart uploads (see
            :class:`~hub_export.embedded_hub.server.HubServer`).
        chunk_size: Part size of multipart uploads.
    """

    multipart_threshold = DEFAULT_MULTIPART_THRESHOLD
    chunk_size = DEFAULT_CHUNK_SIZE

    def __init__(self, store: HubStore, secret: bytes, open_repo: Callable[..., GitRepo], access: AccessPolicy):
        self.store, self.secret, self.open_repo, self.access = store, secret, open_repo, access
        self.multipart = MultipartUploads()

    def handle(self, req: Request, repo_type: str, repo_id: str, tail: list[str]) -> Response:
        """Answer a request for ``<repo>.git/info/lfs/objects/<tail...>``."""
        method = req.method
        if tail == ["batch"] and method == "POST":
            return self._batch(req, repo_type, repo_id)
        if len(tail) == 2 and tail[1] == "verify" and method == "POST":
            repo, body = self.open_repo(req, repo_type, repo_id), json_body(req)
            self.access.require_contributor(req.identity, "upload files")
            stored = repo.lfs_size(tail[0])
            if stored is None or body.get("size", stored) != stored:
                raise StoreError(f"LFS object {tail[0]} not found", 404)
            return json_response({})
        if len(tail) == 1 and method == "PUT":
            return self._put(req, self.store.get(repo_type, repo_id), tail[0])
        if len(tail) in (3, 4) and tail[1] == "multipart" and (method, len(tail)) in (("PUT", 4), ("POST", 3)):
            return self._multipart(req, self.store.get(repo_type, repo_id), tail)
        if len(tail) == 1 and method in ("GET", "HEAD"):
            # a download link from a batch answer carries its signature; without one, the request's access counts
            repo = self.store.get(repo_type, repo_id) if req.param("sig") else self.open_repo(req, repo_type, repo_id)
            size = repo.lfs_size(tail[0])
            if size is None:
                raise StoreError(f"LFS object {tail[0]} not found", 404)
            if req.param("sig"):
                self._signed_download(req, repo, tail[0], size)
            resp = Response(200, {"Accept-Ranges": "bytes"}, file=repo.lfs_path(tail[0]), length=size)
            return ranged(req.headers.get("Range"), resp, size)
        raise StoreError(f"Not found: {req.path}", 404)

    def _batch(self, req: Request, repo_type: str, repo_id: str) -> Response:
        body = json_body(req)
        upload = body.get("operation") == "upload"
        repo = self.open_repo(req, repo_type, repo_id)
        if upload:  # a pull request's author uploads without owning the repo; the commit decides what lands
            self.access.require_contributor(req.identity, "upload files")
        if upload:
            self.multipart.sweep(repo)
        base = f"{req.base_url}/{_PREFIX[repo.repo_type]}{repo.repo_id}.git/info/lfs/objects"
        answer = lfs_batch(repo, body, upload, base, self.secret, self.multipart_threshold, self.chunk_size)
        return json_response(answer, headers={"Content-Type": "application/vnd.git-lfs+json"})

    def _signed(
        self, req: Request, repo: GitRepo, oid: str, upload_id: str | None = None, part: int | None = None
    ) -> tuple[int, int]:
        """Check an upload URL's signature; return its ``(size, chunk)`` (chunk 0 for a single PUT).

        Raises:
            StoreError: 403 for a missing, forged or expired signature.
        """
        size, chunk, expires = (req.param(k) or "" for k in ("size", "chunk", "exp"))
        valid = size.isdigit() and expires.isdigit() and int(expires) > time.time()
        if upload_id is None:
            valid, fields = valid and not chunk, ()
        else:
            valid = valid and chunk.isdigit() and int(chunk) > 0
            fields = (upload_id, chunk, *(() if part is None else (part,)))
        if valid:
            signature = sign_upload(self.secret, repo, oid, int(size), int(expires), *fields)
            valid = hmac.compare_digest(signature, req.param("sig") or "")
        if not valid:
            raise StoreError("Invalid or expired upload URL", 403)
        return int(size), int(chunk or 0)

    def _signed_download(self, req: Request, repo: GitRepo, oid: str, size: int) -> None:
        """Check a download link's signature (bound to the repo, the object, its size and the expiry).

        Raises:
            StoreError: 403 for a forged or expired link.
        """
        expires = req.param("exp") or ""
        valid = expires.isdigit() and int(expires) > time.time()
        if valid:
            signature = sign_upload(self.secret, repo, oid, size, int(expires), "download")
            valid = hmac.compare_digest(signature, req.param("sig") or "")
        if not valid:
            raise StoreError("Invalid or expired download URL", 403)

    def _put(self, req: Request, repo: GitRepo, oid: str) -> Response:
        repo.lfs_path(oid)  # validates the oid
        size, _ = self._signed(req, repo, oid)
        if repo.lfs_size(oid) == size:
            req.discard_body()
        else:
            repo.lfs_store(oid, size, req.chunks())
        return json_response({})

    def _multipart(self, req: Request, repo: GitRepo, tail: list[str]) -> Response:
        oid, upload_id = tail[0], tail[2]
        repo.lfs_path(oid)  # validates the oid
        if req.method == "PUT":
            if not tail[3].isdigit():
                raise StoreError(f"Invalid part number: {tail[3]!r}")
            size, chunk = self._signed(req, repo, oid, upload_id, int(tail[3]))
            etag = self.multipart.write_part(repo, upload_id, size, chunk, int(tail[3]), req.chunks())
            return Response(200, {"ETag": etag})
        size, chunk = self._signed(req, repo, oid, upload_id)
        self.multipart.complete(repo, upload_id, oid, size, chunk, json_body(req))
        return json_response({})
