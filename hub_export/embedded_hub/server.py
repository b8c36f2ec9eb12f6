"""The embedded Hub: a Hugging Face Hub-protocol HTTP server for tests, the demo and air-gapped set-ups.

The unmodified ``huggingface_hub`` client talks to it through ``HF_ENDPOINT=http://127.0.0.1:PORT`` (set
``HF_HUB_DISABLE_XET=1`` before importing huggingface_hub, or pass ``endpoint=`` explicitly): repo creation,
commits (regular and LFS files, deletions, ``create_pr``, ``parent_commit``), branches, tags, ``refs/pr/N``,
tree listings, ``paths-info``, downloads with ranges, and the Hub's error codes.

Design:
    * Storage lives in :mod:`hub_export.embedded_hub._gitstore`: one bare git repository per Hub repo, so commit ids
      are genuine git shas and everything survives restarts. Routes live in :mod:`hub_export.embedded_hub._routes`;
      this module only speaks HTTP: it reads bounded bodies (``Content-Length`` or chunked), checks bearer
      tokens, applies injected faults, streams responses and records every request.
    * Standard library only: ``ThreadingHTTPServer`` with HTTP/1.1 keep-alive; writers of one repo are
      serialised by the store's per-repo lock, readers never block.
    * Hardened for loopback use: paths, repo ids and ref names are validated before touching the disk,
      bodies over ``max_body`` get 413, malformed input gets 400 and never a half-applied commit.

Example:
    >>> with HubServer(tmp_path) as hub:                      # doctest: +SKIP
    ...     HfApi(endpoint=hub.url).create_repo("me/tiny")
"""

from __future__ import annotations

import argparse
import dataclasses
import hmac
import logging
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import BinaryIO
from urllib.parse import parse_qs

from hub_export.embedded_hub._gitstore import HubStore
from hub_export.embedded_hub._routes import Request, Response, Router, error_response
from hub_export.errors import StoreError

__all__ = ["HubServer", "RequestRecord", "FaultRule", "serve", "main"]

DEFAULT_MAX_BODY = 8 * 1024**3
_CHUNK = 1 << 20
_DRAIN_LIMIT = 16 * 1024**2
_HOST_RE = re.compile(r"[A-Za-z0-9.\-]+(:\d{1,5})?|\[[0-9A-Fa-f:.]+\](:\d{1,5})?")
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RequestRecord:
    """One served request: what came in, what went out (body bytes, both ways).

    ``duration_s`` runs until the response headers are sent (the record is written then, so that it is in
    :attr:`HubServer.log` before the client sees the end of the response).
    """

    method: str
    path: str
    status: int
    bytes_sent: int
    bytes_received: int
    duration_s: float


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


class _BodyTooLarge(StoreError):
    def __init__(self, limit: int):
        super().__init__(f"Request body too large (limit {limit} bytes)", 413)


class _Handler(BaseHTTPRequestHandler):
    """Reads one request, hands it to the router, writes the response and logs it."""

    protocol_version = "HTTP/1.1"
    server_version = "hub-export-hub/1"
    timeout = 120
    server: _HTTPServer

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

    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_GET

    # -- body --------------------------------------------------------------------------------------------
    def _iter_body(self, limit: int) -> Iterator[bytes]:
        if self._body_state != "unread":
            raise StoreError("Request body already consumed", 500)
        self._body_state = "partial"
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
                    raise _BodyTooLarge(limit)
                yield from self._read_exact(size)
                self.rfile.readline(16)
        else:
            if self._remaining > limit:
                raise _BodyTooLarge(limit)
            yield from self._read_exact(self._remaining)
        self._body_state = "done"

    def _read_exact(self, size: int) -> Iterator[bytes]:
        while size > 0:
            chunk = self.rfile.read(min(size, _CHUNK))
            if not chunk:
                raise StoreError("Incomplete request body")
            size -= len(chunk)
            self._remaining -= len(chunk)
            self._received += len(chunk)
            yield chunk

    def _read_body(self) -> bytes:
        return b"".join(self._iter_body(min(self.server.hub.max_body, self.server.hub.max_buffered_body)))

    def _copy_body(self, out: BinaryIO) -> int:
        total = 0
        for chunk in self._iter_body(self.server.hub.max_body):
            out.write(chunk)
            total += len(chunk)
        return total

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
    def _access(self) -> str | None:
        hub = self.server.hub
        auth = self.headers.get("Authorization") or ""
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        if not token:
            return None
        if hub.token is not None and hmac.compare_digest(token.encode(), hub.token.encode()):
            return "write"
        if any(hmac.compare_digest(token.encode(), t.encode()) for t in hub.read_tokens):
            return "read"
        return None if hub.token or hub.read_tokens else "write"

    def _handle(self) -> None:
        hub, self._started = self.server.hub, time.monotonic()
        path, _, query = self.path.partition("?")
        self._record: RequestRecord | None = None
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
                    raise _BodyTooLarge(hub.max_body)
            fault = hub._take_fault(self.command, path)
            if fault is not None and fault.action.startswith("status:"):
                resp = error_response(StoreError(f"Injected fault ({fault.action})", int(fault.action[7:])))
            else:
                host = self.headers.get("Host") or ""
                base = f"http://{host}" if _HOST_RE.fullmatch(host) else hub.url
                request = Request(
                    self.command,
                    path,
                    parse_qs(query),
                    self.headers,
                    base,
                    self._access(),
                    self._read_body,
                    self._copy_body,
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
            final = RequestRecord(
                self.command, path, status, self._sent, self._received, time.monotonic() - self._started
            )
            if self._record is None:
                hub._record(final)
            elif (final.bytes_sent, final.bytes_received) != (self._record.bytes_sent, self._record.bytes_received):
                hub._replace_record(
                    self._record,
                    dataclasses.replace(self._record, bytes_sent=self._sent, bytes_received=self._received),
                )

    def _send(self, resp: Response, fault: FaultRule | None) -> None:
        size = resp.length if resp.file is not None else len(resp.body)
        declared = to_send = size
        if fault is not None and fault.action in ("cut", "truncate"):
            to_send = min(size, size // 2 if fault.after_bytes is None else fault.after_bytes)
            declared = to_send if fault.action == "truncate" else size
        try:
            self.send_response(resp.status)
            for key, value in resp.headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(declared))
            if self.close_connection:
                self.send_header("Connection", "close")
            # Record before the client can see a complete response, so the log is current when a call returns.
            planned = 0 if self.command == "HEAD" else to_send
            self._record = RequestRecord(
                self.command,
                self.path.partition("?")[0],
                resp.status,
                self._sent + planned,
                self._received,
                time.monotonic() - self._started,
            )
            self.server.hub._record(self._record)
            self.end_headers()
            if self.command != "HEAD":
                self._write_body(resp, to_send)
            if fault is not None and fault.action == "cut":
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
        except (ConnectionError, OSError):
            self.close_connection = True

    def _write_body(self, resp: Response, count: int) -> None:
        if resp.file is None:
            self.wfile.write(resp.body[:count])
            self._sent += count
            return
        with open(resp.file, "rb") as fh:
            fh.seek(resp.offset)
            while count > 0:
                chunk = fh.read(min(count, _CHUNK))
                if not chunk:
                    break
                self.wfile.write(chunk)
                self._sent += len(chunk)
                count -= len(chunk)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], hub: HubServer):
        self.hub = hub
        self.connections: set[socket.socket] = set()
        super().__init__(address, _Handler)


class HubServer:
    """A Hub-protocol server over a storage directory.

    Args:
        root: Storage directory; repositories persist there across restarts.
        host: Interface to bind (loopback by default).
        port: Port to bind; 0 picks a free one (see :attr:`port` after :meth:`start`).
        token: Read-write bearer token. When it or ``read_tokens`` is set, every request needs a valid token
            (401 otherwise) and writes need the read-write one (403 otherwise).
        read_tokens: Read-only bearer tokens.
        max_body: Largest request body accepted (413 beyond). JSON/NDJSON bodies, which are buffered, are
            further capped by :attr:`max_buffered_body`; LFS uploads stream to disk.
        username: Name returned by ``whoami``, default namespace and commit author.

    Attributes:
        log: One :class:`RequestRecord` per served request, in order.
        faults: :class:`FaultRule` objects consumed by matching requests (see :meth:`add_fault`).
    """

    max_buffered_body = 512 * 1024**2

    def __init__(
        self,
        root: str | os.PathLike,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        read_tokens: Sequence[str] = (),
        max_body: int = DEFAULT_MAX_BODY,
        username: str = "user",
    ):
        self.root, self.host, self.max_body = root, host, max_body
        self.token, self.read_tokens = token, tuple(read_tokens)
        self.store = HubStore(root, username)
        self._router = Router(self.store, username, bool(token or self.read_tokens), secrets.token_bytes(32))
        self.log: list[RequestRecord] = []
        self.faults: list[FaultRule] = []
        self._lock = threading.Lock()
        self._requested_port = port
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> HubServer:
        """Bind and serve in a background thread; return ``self``."""
        if self._httpd is None:
            self._httpd = _HTTPServer((self.host, self._requested_port), self)
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="hub-server", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close open connections and release the port."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        for conn in list(httpd.connections):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port.

        Raises:
            RuntimeError: Before :meth:`start`.
        """
        if self._httpd is None:
            raise RuntimeError("HubServer is not started: call start() first")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """Base URL to use as ``HF_ENDPOINT`` / ``endpoint=``."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    @property
    def tree_page_size(self) -> int:
        """Entries per page of ``/tree`` listings (the Hub uses 1000); lower it to exercise pagination."""
        return self._router.page_size

    @tree_page_size.setter
    def tree_page_size(self, value: int) -> None:
        self._router.page_size = max(1, int(value))

    # -- observability and faults ----------------------------------------------------------------------------
    def _record(self, record: RequestRecord) -> None:
        with self._lock:
            self.log.append(record)

    def _replace_record(self, old: RequestRecord, new: RequestRecord) -> None:
        with self._lock:
            for i in range(len(self.log) - 1, -1, -1):
                if self.log[i] is old:
                    self.log[i] = new
                    return

    def clear_log(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self.log.clear()

    def summary(self) -> dict[str, dict[str, int]]:
        """Requests and body bytes per path: ``{path: {"requests", "bytes_sent", "bytes_received"}}``."""
        out: dict[str, dict[str, int]] = {}
        with self._lock:
            records = list(self.log)
        for rec in records:
            entry = out.setdefault(rec.path, {"requests": 0, "bytes_sent": 0, "bytes_received": 0})
            entry["requests"] += 1
            entry["bytes_sent"] += rec.bytes_sent
            entry["bytes_received"] += rec.bytes_received
        return out

    def add_fault(
        self, method: str, path: str, action: str, count: int = 1, after_bytes: int | None = None
    ) -> FaultRule:
        """Inject a fault into the next ``count`` matching requests (see :class:`FaultRule`).

        Raises:
            ValueError: For an unknown action.
        """
        if not re.fullmatch(r"status:[1-5]\d\d|cut|truncate", action):
            raise ValueError(f"Unknown fault action {action!r}: use 'status:NNN', 'cut' or 'truncate'")
        rule = FaultRule(method.upper() if method != "*" else "*", path, action, count, after_bytes)
        with self._lock:
            self.faults.append(rule)
        return rule

    def _take_fault(self, method: str, path: str) -> FaultRule | None:
        with self._lock:
            for rule in self.faults:
                if rule.count > 0 and rule.matches(method, path):
                    rule.count -= 1
                    if rule.count <= 0:
                        self.faults.remove(rule)
                    return rule
        return None


def serve(root: str | os.PathLike, host: str = "127.0.0.1", port: int = 8000, token: str | None = None) -> None:
    """Run a Hub server in the foreground until interrupted (Ctrl-C).

    Args:
        root: Storage directory.
        host: Interface to bind.
        port: Port to bind (0 picks a free one).
        token: Optional read-write bearer token.
    """
    with HubServer(root, host=host, port=port, token=token) as hub:
        print(
            f"Hub serving {os.path.abspath(root)} at {hub.url}  (export HF_ENDPOINT={hub.url} HF_HUB_DISABLE_XET=1)",
            flush=True,
        )
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: ``hub-export hub serve --root DIR [--host H] [--port P] [--token T]``."""
    parser = argparse.ArgumentParser(prog="hub-export hub serve", description="Serve an embedded Hugging Face Hub.")
    parser.add_argument("--root", required=True, help="storage directory (created if missing)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback)")
    parser.add_argument("--port", type=int, default=8000, help="port (0 picks a free one)")
    parser.add_argument("--token", default=None, help="require this read-write bearer token")
    args = parser.parse_args(argv)
    serve(args.root, args.host, args.port, args.token)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
