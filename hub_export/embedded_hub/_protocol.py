"""What the routes see of HTTP: a :class:`Request` with a streamed body, a :class:`Response` that is bytes, a
slice of a file or a generated stream, and the helpers around them (errors in the Hub's shape, byte ranges,
NDJSON lines). No socket code here: :mod:`hub_export.embedded_hub._http` fills these in and sends them.

Bodies are never held whole unless a route asks for it: :meth:`Request.chunks` yields the request body in
bounded pieces, :meth:`Request.read_body` buffers at most ``max_buffered`` bytes (413 beyond), and
:func:`iter_lines` splits a streamed body into lines of at most ``max_line`` bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hub_export.errors import StoreError

#: A body read or written in pieces of at most this many bytes.
CHUNK = 1 << 20


class BodyTooLarge(StoreError):
    """413: a request body (or one buffered part of it) is over the server's limit."""

    def __init__(self, limit: int, what: str = "Request body"):
        super().__init__(f"{what} too large (limit {limit} bytes)", 413)


@dataclass
class Request:
    """One HTTP request as the router sees it (the server fills it in).

    Attributes:
        chunks: Returns an iterator over the body, in pieces of at most :data:`CHUNK` bytes; it can be
            called once. Raises :class:`BodyTooLarge` past the server's ``max_body`` and 400 when the
            client sends less than it announced.
        max_buffered: Largest body :meth:`read_body` accepts, and largest NDJSON line of a commit.
    """

    method: str
    path: str
    query: dict[str, list[str]]
    headers: Any
    base_url: str
    chunks: Callable[[], Iterator[bytes]]
    max_buffered: int
    #: Who the request acts as (an :class:`~hub_export.embedded_hub._accounts.Identity`), set by the router.
    identity: Any = None

    def param(self, name: str, default: str | None = None) -> str | None:
        """First value of a query parameter."""
        return self.query.get(name, [default])[0]

    def flag(self, name: str) -> bool:
        """Whether a boolean query parameter is set (``1``/``true``)."""
        return (self.param(name) or "").lower() in ("1", "true")

    def read_body(self) -> bytes:
        """The whole body, for small JSON payloads.

        Raises:
            BodyTooLarge: Beyond :attr:`max_buffered` bytes.
        """
        out = bytearray()
        for chunk in self.chunks():
            out += chunk
            if len(out) > self.max_buffered:
                raise BodyTooLarge(self.max_buffered)
        return bytes(out)

    def discard_body(self) -> int:
        """Read and drop the body (however large); return its length."""
        return sum(len(chunk) for chunk in self.chunks())


@dataclass
class Response:
    """What to send back: a status, headers and one of ``body``, a slice of ``file`` or ``stream``.

    ``file`` and ``stream`` describe ``length`` bytes from ``offset``: the server sends a file slice with
    ``sendfile`` and calls ``stream(offset, length)`` for the pieces of anything else (git blobs are
    inflated on the fly), so no response body is ever held whole.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    file: Path | None = None
    stream: Callable[[int, int], Iterator[bytes]] | None = None
    offset: int = 0
    length: int = 0

    @property
    def size(self) -> int:
        """Bytes of body this response carries."""
        return self.length if self.file is not None or self.stream is not None else len(self.body)


def json_response(data: Any, status: int = 200, headers: dict | None = None) -> Response:
    """A JSON response."""
    return Response(status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(data).encode())


def error_response(err: StoreError) -> Response:
    """The Hub's error shape: ``X-Error-Code``/``X-Error-Message`` headers and ``{"error": ...}``."""
    message = str(err)
    headers = {"X-Error-Message": message.encode("ascii", "replace").decode()[:300].replace("\n", " ")}
    if err.code:
        headers["X-Error-Code"] = err.code
    return json_response({"error": message}, err.status, {**headers, **err.headers})


def json_body(req: Request) -> dict:
    """The request body as a JSON object (``{}`` when empty).

    Raises:
        StoreError: 400 when the body is not a JSON object, 413 when it is over ``max_buffered``.
    """
    raw = req.read_body()
    try:
        body = json.loads(raw) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise StoreError(f"Malformed JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise StoreError("Malformed JSON body: expected an object")
    return body


def byte_range(header: str | None, size: int) -> tuple[int, int] | Literal[False] | None:
    """Parse a single ``bytes=`` range: ``(start, end)`` inclusive, None to serve everything, False when
    unsatisfiable. Multiple ranges are not supported and get the whole body, as RFC 9110 allows."""
    match = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", header or "")
    if not match or match[1] == match[2] == "":
        return None
    if match[1] == "":
        start, end = max(size - int(match[2]), 0), size - 1
    else:
        start, end = int(match[1]), min(int(match[2]) if match[2] else size - 1, size - 1)
    return (start, end) if start <= end and start < size else False


def ranged(range_header: str | None, resp: Response, size: int) -> Response:
    """Apply a ``Range`` header to a complete 200 response of ``size`` bytes.

    A satisfiable range gives 206 with ``Content-Range: bytes a-b/size`` and the same headers otherwise
    (``ETag``, ``X-Repo-Commit``, ``X-Linked-Etag`` and ``X-Linked-Size`` describe the whole file, as on
    the Hub, so a client resuming a download checks it against what it started); an unsatisfiable one
    gives 416 with ``Content-Range: bytes */size``.
    """
    span = byte_range(range_header, size)
    if span is False:
        return Response(416, {**resp.headers, "Content-Range": f"bytes */{size}"})
    if span is None:
        return resp
    start, end = span
    resp.status = 206
    resp.headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    if resp.file is not None or resp.stream is not None:
        resp.offset, resp.length = resp.offset + start, end - start + 1
    else:
        resp.body = resp.body[start : end + 1]
    return resp


def iter_lines(chunks: Iterable[bytes], max_line: int) -> Iterator[bytes]:
    """Split a streamed body into lines (without their ``\\n``), holding at most one line in memory.

    Raises:
        BodyTooLarge: For a line longer than ``max_line`` bytes.
    """
    pending: list[bytes] = []
    size = 0
    for chunk in chunks:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            size += len(piece)
            if size > max_line:
                raise BodyTooLarge(max_line, "NDJSON line")
            if piece:
                pending.append(piece)
            if end < 0:
                break
            pending[:] = [b"".join(pending)]
            size, start = 0, end + 1
            yield pending.pop()  # the consumer holds the only reference to the line
    if pending:
        yield b"".join(pending)
