"""The socket side of the embedded Hub: read a request, stream its body to the router, stream the response back.

Standard library only: ``ThreadingHTTPServer`` with HTTP/1.1 keep-alive, one thread per connection. Bodies
pass in pieces of :data:`~hub_export.embedded_hub._protocol.CHUNK` bytes both ways (``Content-Length`` or
chunked requests; file responses go out with ``sendfile``), so the server's memory does not grow with the
size of what passes through it. Every request is recorded (:class:`~hub_export.embedded_hub.server.RequestRecord`)
and injected faults (:class:`~hub_export.embedded_hub.server.FaultRule`) are applied here.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs

from hub_export.embedded_hub._cors import CORS_HEADERS, preflight
from hub_export.embedded_hub._protocol import CHUNK, BodyTooLarge, Request, Response, error_response
from hub_export.embedded_hub._routes import Router
from hub_export.errors import StoreError

_DRAIN_LIMIT = 16 * 1024**2
_HOST_RE = re.compile(r"[A-Za-z0-9.\-]+(:\d{1,5})?|\[[0-9A-Fa-f:.]+\](:\d{1,5})?")
_log = logging.getLogger("hub_export.embedded_hub.server")


@dataclass(frozen=True)
class RequestRecord:
    """One served request: what came in, what went out (body bytes, both ways).

    ``duration_s`` runs until the response headers are sent (the record is written then, so that it is in
    :attr:`HubServer.log` before the client sees the end of the response). ``range`` is the request's
    ``Range`` header, if any (a resumed download shows up as ``bytes=N-``).
    """

    method: str
    path: str
    status: int
    bytes_sent: int
    bytes_received: int
    duration_s: float
    range: str | None = None


@dataclass
class FaultRule:
    """A fault to inject into the next ``count`` requests matching ``method`` and ``path`` (a regex).

    Actions:
        ``status:NNN``: answer NNN (with a Hub-style JSON error) instead of running the request.
        ``cut``: send the headers and ``after_bytes`` of the body (default half), then drop the connection.
        ``truncate``: answer a complete, valid response whose body is cut to ``after_bytes`` (default half).
    """

    method: str
    path: str
    action: str
    count: int = 1
    after_bytes: int | None = None

    def matches(self, method: str, path: str) -> bool:
        """Whether this rule applies to a request."""
        return self.method in ("*", method) and re.search(self.path, path) is not None


class Hub(Protocol):
    """What the HTTP layer needs of :class:`~hub_export.embedded_hub.server.HubServer` (which implements it;
    spelled out here so that this module does not import the server module that imports it)."""

    max_body: int
    max_buffered_body: int
    _router: Router
    access_log: Callable[[str], None] | None

    @property
    def url(self) -> str: ...

    def _take_fault(self, method: str, path: str) -> FaultRule | None: ...
    def _record(self, record: RequestRecord) -> None: ...
    def _replace_record(self, old: RequestRecord, new: RequestRecord) -> None: ...


class Handler(BaseHTTPRequestHandler):
    """Reads one request, hands it to the router, writes the response and logs it."""

    protocol_version = "HTTP/1.1"
    server_version = "hub-export-hub/1"
    timeout = 120
    server: HTTPServer
    # per request: see _handle
    _body_state: str  # "unread", "partial" or "done"
    _chunked: bool
    _remaining: int
    _received: int
    _sent: int
    _started: float

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # headers and body are 2 writes
        self.server.connections.add(self.connection)

    def finish(self) -> None:
        self.server.connections.discard(self.connection)
        super().finish()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - signature of the base class
        _log.debug("%s - %s", self.address_string(), format % args)

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self._handle()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    # -- request body ------------------------------------------------------------------------------------
    def _chunks(self) -> Iterator[bytes]:
        """The request body in pieces (see :attr:`Request.chunks`); callable once."""
        if self._body_state != "unread":
            raise StoreError("Request body already consumed", 500)
        self._body_state = "partial"
        return self._iter_body(self.server.hub.max_body)

    def _iter_body(self, limit: int) -> Iterator[bytes]:
        if self._chunked:
            total = 0
            while True:
                try:
                    size = int(self.rfile.readline(1024).split(b";")[0].strip(), 16)
                except ValueError:
                    raise StoreError("Malformed chunked body") from None
                if size == 0:
                    while self.rfile.readline(1024).strip():
                        pass
                    break
                total += size
                if total > limit:
                    raise BodyTooLarge(limit)
                yield from self._read_exact(size)
                self.rfile.readline(16)
        else:
            if self._remaining > limit:
                raise BodyTooLarge(limit)
            yield from self._read_exact(self._remaining)
        self._body_state = "done"

    def _read_exact(self, size: int) -> Iterator[bytes]:
        while size > 0:
            chunk = self.rfile.read(min(size, CHUNK))
            if not chunk:
                raise StoreError("Incomplete request body")
            size -= len(chunk)
            self._remaining -= len(chunk)
            self._received += len(chunk)
            yield chunk

    def _finish_body(self) -> None:
        """Drain what the route did not read, or close the connection when that is not reasonable."""
        if self._body_state == "done":
            return
        if not self._chunked and self._remaining <= _DRAIN_LIMIT:
            try:
                for _ in self._read_exact(self._remaining):
                    pass
                self._body_state = "done"
                return
            except (StoreError, OSError):
                pass
        self.close_connection = True

    # -- request -----------------------------------------------------------------------------------------
    def _handle(self) -> None:
        hub, self._started = self.server.hub, time.monotonic()
        path, _, query = self.path.partition("?")
        self._record: RequestRecord | None = None
        self._request: Request | None = None
        self._received, self._sent, self._body_state, self._remaining = 0, 0, "unread", 0
        self._chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
        status = 500
        try:
            length = self.headers.get("Content-Length")
            if not self._chunked and length is not None:
                if not length.strip().isdigit():
                    raise StoreError("Invalid Content-Length")
                self._remaining = int(length)
                if self._remaining > hub.max_body:
                    raise BodyTooLarge(hub.max_body)
            fault = hub._take_fault(self.command, path)
            if self.command == "OPTIONS":  # a browser's CORS preflight: no route, no access check
                resp = preflight()
            elif fault is not None and fault.action.startswith("status:"):
                resp = error_response(StoreError(f"Injected fault ({fault.action})", int(fault.action[7:])))
            else:
                host = self.headers.get("Host") or ""
                base = f"http://{host}" if _HOST_RE.fullmatch(host) else hub.url
                request = self._request = Request(
                    self.command,
                    path,
                    parse_qs(query),
                    self.headers,
                    base,
                    self._chunks,
                    min(hub.max_body, hub.max_buffered_body),
                )
                resp = hub._router.handle(request)
            self._finish_body()
            status = resp.status
            self._send(resp, fault)
        except StoreError as err:
            self._finish_body()
            status = err.status
            self._send(error_response(err), None)
        except (TimeoutError, ConnectionError):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 - a server must answer, and log, whatever went wrong
            _log.exception("Internal error on %s %s", self.command, path)
            self.close_connection = True
            status = 500
            self._send(error_response(StoreError(f"Internal server error: {type(exc).__name__}", 500)), None)
        finally:
            self._log_final(path, status)

    def _log_final(self, path: str, status: int) -> None:
        hub = self.server.hub
        if hub.access_log is not None:  # method, path (not the query: it may carry a signature), status, bytes, user
            identity = getattr(self._request, "identity", None)
            user = (identity.user if identity is not None else None) or "-"
            elapsed_ms = (time.monotonic() - self._started) * 1000
            hub.access_log(f"{self.command} {path} {status} {self._sent} {elapsed_ms:.0f}ms {user}")
        if self._record is None:
            elapsed = time.monotonic() - self._started
            hub._record(RequestRecord(self.command, path, status, self._sent, self._received, elapsed, self._range))
        elif (self._sent, self._received) != (self._record.bytes_sent, self._record.bytes_received):
            new = dataclasses.replace(self._record, bytes_sent=self._sent, bytes_received=self._received)
            hub._replace_record(self._record, new)

    @property
    def _range(self) -> str | None:
        return self.headers.get("Range")

    # -- response ----------------------------------------------------------------------------------------
    def _send(self, resp: Response, fault: FaultRule | None) -> None:
        size = resp.size
        declared = to_send = size
        if fault is not None and fault.action in ("cut", "truncate"):
            to_send = min(size, size // 2 if fault.after_bytes is None else fault.after_bytes)
            declared = to_send if fault.action == "truncate" else size
        try:
            self.send_response(resp.status)
            for key, value in {**CORS_HEADERS, **resp.headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(declared))
            if self.close_connection:
                self.send_header("Connection", "close")
            # Record before the client can see a complete response, so the log is current when a call returns.
            planned = 0 if self.command == "HEAD" else to_send
            hub = self.server.hub
            elapsed = time.monotonic() - self._started
            path = self.path.partition("?")[0]
            self._record = RequestRecord(
                self.command, path, resp.status, self._sent + planned, self._received, elapsed, self._range
            )
            hub._record(self._record)
            self.end_headers()
            if self.command != "HEAD":
                self._write_body(resp, to_send)
            if fault is not None and fault.action == "cut":
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
        except (ConnectionError, OSError):
            self.close_connection = True
        except StoreError:  # a body that fails after its headers went out: the client sees a short body
            _log.exception("Response body of %s %s failed", self.command, self.path)
            self.close_connection = True

    def _write_body(self, resp: Response, count: int) -> None:
        if resp.file is not None:
            with open(resp.file, "rb") as fh:
                self._sent += self.connection.sendfile(fh, resp.offset, count) if count else 0
        elif resp.stream is not None:
            for chunk in resp.stream(resp.offset, count):
                self.wfile.write(chunk)
                self._sent += len(chunk)
        else:
            self.wfile.write(resp.body[:count])
            self._sent += count


class HTTPServer(ThreadingHTTPServer):
    """A threading HTTP server bound to one :class:`~hub_export.embedded_hub.server.HubServer`."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], hub: Hub):
        self.hub = hub
        self.connections: set[socket.socket] = set()
        super().__init__(address, Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that drops its connection (a browser closing a keep-alive socket) is no error of the server's;
        anything else is logged as ``socketserver`` does."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
            _log.debug("%s dropped the connection", client_address)
            return
        super().handle_error(request, client_address)
