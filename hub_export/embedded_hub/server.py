"""The embedded Hub: a Hugging Face Hub-protocol HTTP server for tests, the demo and air-gapped set-ups.

The unmodified ``huggingface_hub`` client talks to it through ``HF_ENDPOINT=http://127.0.0.1:PORT`` (set
``HF_HUB_DISABLE_XET=1`` before importing huggingface_hub, or pass ``endpoint=`` explicitly): repo creation,
commits (regular and LFS files, deletions, ``create_pr``, ``parent_commit``), branches, tags, ``refs/pr/N``,
tree listings, ``paths-info``, LFS uploads (single ``PUT`` or multipart), downloads with ``Range`` (so an
interrupted download resumes), and the Hub's error codes.

Design:
    * Storage lives in :mod:`hub_export.embedded_hub._gitstore`: one bare git repository per Hub repo, so
      commit ids are genuine git shas and everything survives restarts. Routes live in
      :mod:`hub_export.embedded_hub._routes` and :mod:`hub_export.embedded_hub._lfs`; the socket side in
      :mod:`hub_export.embedded_hub._http`. This module holds the server object: configuration, lifecycle,
      request log and fault injection.
    * Bounded memory: request and response bodies stream to and from disk in 1 MiB pieces and are hashed
      while they pass (sha256 for LFS, sha1 for git objects), file responses go out with ``sendfile``; only
      small JSON bodies and one NDJSON line of a commit (``max_buffered_body``) are ever buffered. A
      multi-GB file passes through with the server's RSS in the tens of MB.
    * Standard library only (plus PyYAML for ``validate-yaml``): ``ThreadingHTTPServer`` with HTTP/1.1
      keep-alive; writers of one repo are serialised by the store's per-repo lock, readers never block.
    * Hardened for loopback use: paths, repo ids and ref names are validated before touching the disk,
      bodies over ``max_body`` get 413, malformed input gets 400 and never a half-applied commit.

Example:
    >>> with HubServer(tmp_path) as hub:                      # doctest: +SKIP
    ...     HfApi(endpoint=hub.url).create_repo("me/tiny")
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence

from hub_export.embedded_hub._access import AccessPolicy
from hub_export.embedded_hub._accounts import Accounts
from hub_export.embedded_hub._fsck import clean
from hub_export.embedded_hub._gitstore import HubStore
from hub_export.embedded_hub._http import FaultRule, HTTPServer, RequestRecord
from hub_export.embedded_hub._routes import Router
from hub_export.embedded_hub._uploads import DEFAULT_CHUNK_SIZE, DEFAULT_MULTIPART_THRESHOLD
from hub_export.errors import HubError

__all__ = [
    "HubServer",
    "RequestRecord",
    "FaultRule",
    "serve",
    "main",
    "DEFAULT_MAX_BODY",
    "DEFAULT_MULTIPART_THRESHOLD",
    "DEFAULT_CHUNK_SIZE",
]

DEFAULT_MAX_BODY = 8 * 1024**3


class HubServer:
    """A Hub-protocol server over a storage directory.

    Args:
        root: Storage directory; repositories persist there across restarts.
        host: Interface to bind (loopback by default).
        port: Port to bind; 0 picks a free one (see :attr:`port` after :meth:`start`).
        token: An admin token (reads and writes every repo). With it, ``read_tokens`` or users (``hub-export hub user
            add``, stored in ``ROOT/accounts.json``), requests without a token read public repos only; see
            :mod:`hub_export.embedded_hub._access` for every rule.
        read_tokens: Read-only admin tokens.
        max_body: Largest request body accepted (413 beyond); bodies stream to disk, so this bounds disk use,
            not memory. JSON bodies and each NDJSON line of a commit are buffered and further capped by
            :attr:`max_buffered_body`.
        username: The user an open hub (no users, no token) and the server's own tokens act as: ``whoami``'s
            name, the namespace of a repo created without one, the commit author.
        allow_open_network: Serve an open hub (no users, no token: anyone may write and delete) on an interface other
            than loopback. Refused unless set.
        multipart_threshold: LFS objects of at least this many bytes are offered the Hub's multipart
            transfer (when the client lists ``multipart``): one signed ``PUT`` URL per part plus a
            completion URL. Lower it (with ``chunk_size``) to exercise multipart with small files.
        chunk_size: Part size of multipart uploads (the last part is shorter). It grows when an object
            would need more than 10,000 parts (S3's limit, which the Hub's storage has).

    Raises:
        ValueError: For a negative ``multipart_threshold`` or a ``chunk_size`` below 1.
        HubError: On :meth:`start`, for an open hub on a non-loopback ``host`` without ``allow_open_network``.

    Attributes:
        log: One :class:`RequestRecord` per served request, in order.
        cleaned: What :meth:`start` removed of a crashed server's interrupted writes (paths under ``root``).
        faults: :class:`FaultRule` objects consumed by matching requests (see :meth:`add_fault`).
    """

    #: Largest buffered body: a JSON request, or one NDJSON line of a commit (the base64 of one regular
    #: file; the Hub sends files of 10 MiB and more through LFS, so 32 MiB leaves room).
    max_buffered_body = 32 * 1024**2

    def __init__(
        self,
        root: str | os.PathLike,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        read_tokens: Sequence[str] = (),
        max_body: int = DEFAULT_MAX_BODY,
        username: str = "user",
        multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        allow_open_network: bool = False,
    ):
        self.root, self.host, self.max_body = root, host, max_body
        self.token, self.read_tokens = token, tuple(read_tokens)
        self.allow_open_network = allow_open_network
        self.store = HubStore(root, username)
        self.accounts = Accounts(self.store.root)
        self.access = AccessPolicy(self.accounts, token, self.read_tokens, username)
        self._router = Router(self.store, self.access, secrets.token_bytes(32))
        self.multipart_threshold, self.chunk_size = multipart_threshold, chunk_size
        self.log: list[RequestRecord] = []
        self.faults: list[FaultRule] = []
        self._lock = threading.Lock()
        self._requested_port = port
        self._httpd: HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.cleaned: list[str] = []
        #: Called with one line per request (method, path, status, bytes sent, milliseconds, user), or None.
        self.access_log: Callable[[str], None] | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> HubServer:
        """Bind and serve in a background thread; return ``self``.

        Raises:
            HubError: An open hub (no users, no token) on a non-loopback host without ``allow_open_network``.
        """
        if self._httpd is None:
            if self.access.open and not is_loopback(self.host) and not self.allow_open_network:
                raise HubError(
                    f"refusing to serve a hub without users or a token on {self.host}: anyone who reaches it could "
                    "write and delete every repo. Add a user and a token (hub-export hub user add NAME --root ROOT; "
                    "hub-export hub token create NAME --scope write --root ROOT) or pass --token, or bind "
                    "--host 127.0.0.1 (or pass --allow-open-network to accept the risk)."
                )
            self.cleaned = clean(self.store)  # what a crash left behind, before any request can see the store
            self._httpd = HTTPServer((self.host, self._requested_port), self)
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
    def bound(self) -> str:
        """The address the server listens on, as ``host:port`` (``0.0.0.0:8000`` is every IPv4 interface)."""
        host = self.host or "0.0.0.0"
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

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

    @property
    def multipart_threshold(self) -> int:
        """LFS objects of at least this many bytes get multipart uploads (applies to the next batch request)."""
        return self._router.lfs.multipart_threshold

    @multipart_threshold.setter
    def multipart_threshold(self, value: int) -> None:
        if int(value) < 0:
            raise ValueError("multipart_threshold must be >= 0")
        self._router.lfs.multipart_threshold = int(value)

    @property
    def chunk_size(self) -> int:
        """Part size of multipart uploads (applies to the next batch request)."""
        return self._router.lfs.chunk_size

    @chunk_size.setter
    def chunk_size(self, value: int) -> None:
        if int(value) < 1:
            raise ValueError("chunk_size must be >= 1")
        self._router.lfs.chunk_size = int(value)

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


def _stderr_line(line: str) -> None:
    """An access-log line on stderr, with the time (UTC)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(f"{stamp} {line}", file=sys.stderr, flush=True)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback interface (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve(
    root: str | os.PathLike,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    *,
    multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    allow_open_network: bool = False,
    access_log: bool = True,
) -> None:
    """Run a Hub server in the foreground until interrupted (Ctrl-C, or SIGTERM).

    Prints the URL to use, the address it is bound to and who may write, once it listens; then, with ``access_log``, one line
    per request on stderr (method, path, status, bytes sent, milliseconds, user; never a token).

    Args:
        root: Storage directory.
        host: Interface to bind.
        port: Port to bind (0 picks a free one).
        token: Optional admin token.
        multipart_threshold: See :class:`HubServer`.
        chunk_size: See :class:`HubServer`.
        allow_open_network: See :class:`HubServer`.
        access_log: Log each request on stderr.
    """
    hub = HubServer(
        root,
        host=host,
        port=port,
        token=token,
        multipart_threshold=multipart_threshold,
        chunk_size=chunk_size,
        allow_open_network=allow_open_network,
    )
    if access_log:
        hub.access_log = _stderr_line
    with hub:
        users = len(hub.accounts.users())
        if hub.access.open:
            who = "open: every request may write (no users, no token)"
        else:
            who = f"{users} user(s)" if users else "no users"
            who += ", the server token" if token else ""
            who += "; requests without a token read public repos only"
        print(
            f"Hub serving {os.path.abspath(root)} at {hub.url} (bound to {hub.bound}; {who})\n"
            f"  export HF_ENDPOINT={hub.url} HF_HUB_DISABLE_XET=1",
            flush=True,
        )
        _wait_for_a_stop_signal()


def _wait_for_a_stop_signal() -> None:
    """Block until SIGINT (Ctrl-C) or SIGTERM (``kill``, a service manager). Both are handled here rather than left to
    Python's defaults, and unblocked: a process started with SIGINT ignored or blocked (both are inherited from the
    parent, as from a test runner's worker) would otherwise run on."""
    stop = threading.Event()
    previous = {}
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    for number in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[number] = signal.signal(number, lambda *_: stop.set())
        except ValueError:  # not the main thread: Ctrl-C arrives as KeyboardInterrupt, if at all
            break
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m hub_export.embedded_hub --root DIR [--host H] [--port P] [--token T]
    [--multipart-threshold BYTES] [--chunk-size BYTES]`` (``hub-export hub serve`` takes the first four)."""
    parser = argparse.ArgumentParser(
        prog="python -m hub_export.embedded_hub", description="Serve an embedded Hugging Face Hub."
    )
    parser.add_argument("--root", required=True, help="storage directory (created if missing)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback)")
    parser.add_argument("--port", type=int, default=8000, help="port (0 picks a free one)")
    parser.add_argument("--token", default=None, help="an admin token (reads and writes every repo)")
    parser.add_argument(
        "--allow-open-network", action="store_true", help="serve a hub without users or token on a non-loopback host"
    )
    parser.add_argument("--multipart-threshold", type=int, default=DEFAULT_MULTIPART_THRESHOLD, help="bytes")
    parser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE, help="multipart part size, bytes")
    args = parser.parse_args(argv)
    serve(
        args.root,
        args.host,
        args.port,
        args.token,
        multipart_threshold=args.multipart_threshold,
        chunk_size=args.chunk_size,
        allow_open_network=args.allow_open_network,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
