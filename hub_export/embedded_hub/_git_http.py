"""``git clone`` and ``git fetch`` over smart HTTP, served by dulwich (``hub-export[hub]``).

Each Hub repo is a bare git repository (:mod:`hub_export.embedded_hub._gitstore`), so dulwich's upload-pack
serves it as ``git http-backend`` would: ``GET <repo>/info/refs?service=git-upload-pack`` advertises the refs,
``POST <repo>/git-upload-pack`` answers the client's wants with a pack (stateless RPC; the client falls back from
protocol v2 to v0). LFS files are pointers in git, as on the Hub; ``git lfs pull`` fetches them from the LFS routes
(``<repo>.git/info/lfs``). Pushing goes through huggingface_hub, not git (``git-receive-pack`` is refused).

Access is the Hub's: anyone reads a public repo; for a private one git is asked for credentials (401 with a Basic
challenge: the user name is ignored, the password is a token), and a repo the request may not read answers as if it
did not exist.
"""

from __future__ import annotations

import gzip
import tempfile
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from hub_export.embedded_hub._gitstore import GitRepo
from hub_export.embedded_hub._protocol import Request, Response
from hub_export.errors import StoreError

__all__ = ["GitHttp"]

_SERVICE = "git-upload-pack"
_BASIC = 'Basic realm="hub-export", charset="UTF-8"'
_PIECE = 1 << 20


def _dulwich() -> Any:
    try:
        from dulwich import protocol, repo, server
    except ImportError:
        raise StoreError("git clone needs dulwich on the hub's machine: pip install 'hub-export[hub]'", 501) from None
    return protocol, repo, server


class GitHttp:
    """Answers ``<repo>[.git]/info/refs`` and ``<repo>[.git]/git-upload-pack``.

    Args:
        open_repo: ``open_repo(req, repo_type, repo_id)``: the repo if the request may read it, else 404.
        max_request: Largest request body (the client's wants and haves) read.
    """

    def __init__(self, open_repo: Callable[..., GitRepo], max_request: int = 32 * 1024**2):
        self.open_repo, self.max_request = open_repo, max_request

    def handle(self, req: Request, repo_type: str, repo_id: str, tail: list[str]) -> Response:
        """Answer a git smart-HTTP request for ``repo_id``."""
        if tail == ["git-receive-pack"] or req.param("service") == "git-receive-pack":
            raise StoreError("Pushing with git is not supported: upload with huggingface_hub (hf upload)", 403)
        try:
            repo = self.open_repo(req, repo_type, repo_id)
        except StoreError as err:
            if err.status == 404 and req.identity.anonymous:  # let git ask for credentials; say nothing more
                raise StoreError("Authentication required", 401, headers={"WWW-Authenticate": _BASIC}) from None
            raise
        if tail == ["info", "refs"] and req.method in ("GET", "HEAD"):
            if req.param("service") != _SERVICE:
                raise StoreError("Only the smart HTTP protocol is served: git-upload-pack", 403)
            return self._run(repo, b"", advertise=True)
        if tail == [_SERVICE] and req.method == "POST":
            if req.headers.get("Content-Type") != f"application/x-{_SERVICE}-request":
                raise StoreError("Invalid Content-Type for git-upload-pack", 415)
            return self._run(repo, self._body(req), advertise=False)
        raise StoreError(f"Not found: {req.path}", 404)

    def _body(self, req: Request) -> bytes:
        data = req.read_body()
        if (req.headers.get("Content-Encoding") or "").lower() == "gzip":
            try:
                inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                data = inflate.decompress(data, self.max_request)
                if inflate.unconsumed_tail:
                    raise StoreError("git request too large", 413)
            except (zlib.error, gzip.BadGzipFile):
                raise StoreError("Malformed gzip body") from None
        return data

    def _run(self, repo: GitRepo, request: bytes, *, advertise: bool) -> Response:
        """Run dulwich's upload-pack on ``repo``: its output spooled to a temporary file, then streamed."""
        protocol, repository, server = _dulwich()
        spool = tempfile.SpooledTemporaryFile(max_size=8 * 1024**2)  # noqa: SIM115 - closed by the stream
        position = [0]

        def read(size: int = -1) -> bytes:
            start = position[0]
            end = len(request) if size is None or size < 0 else min(len(request), start + size)
            position[0] = end
            return request[start:end]

        def write(data: bytes) -> int:
            spool.write(data)
            return len(data)

        class _One(server.Backend):  # type: ignore[name-defined]
            def open_repository(self, path: str) -> Any:
                return repository.Repo(str(repo.path))

        proto = protocol.ReceivableProtocol(read, write)
        if advertise:
            proto.write_pkt_line(f"# service={_SERVICE}\n".encode())
            proto.write_pkt_line(None)
        try:
            handler = server.UploadPackHandler(_One(), ["/"], proto, stateless_rpc=True, advertise_refs=advertise)
            handler.handle()
        except Exception as exc:  # noqa: BLE001 - a malformed request must be a 400, not a 500
            spool.close()
            raise StoreError(f"Malformed git request: {type(exc).__name__}", 400) from None
        size = spool.tell()
        spool.seek(0)

        def stream(offset: int, length: int) -> Iterator[bytes]:
            try:
                spool.seek(offset)
                left = length
                while left > 0:
                    piece = spool.read(min(_PIECE, left))
                    if not piece:
                        break
                    left -= len(piece)
                    yield piece
            finally:
                spool.close()

        kind = "advertisement" if advertise else "result"
        headers = {"Content-Type": f"application/x-{_SERVICE}-{kind}", "Cache-Control": "no-cache"}
        return Response(200, headers, stream=stream, length=size)
