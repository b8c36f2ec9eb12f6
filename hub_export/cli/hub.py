"""``hub-export hub serve --root DIR``: run the embedded Hub-protocol server."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ._args import add_command

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``hub`` command group."""
    parser = add_command(
        subparsers,
        "hub",
        help="the embedded Hub server",
        description="A Hub-protocol server for tests, demos and air-gapped set-ups: the unmodified huggingface_hub "
        "client talks to it through HF_ENDPOINT.",
        example="hub-export hub serve --root ./hub-data --port 8000",
    )
    actions = parser.add_subparsers(dest="hub_command", metavar="ACTION", required=True)
    serve = add_command(
        actions,
        "serve",
        help="serve a Hub-protocol endpoint on loopback (use with HF_ENDPOINT)",
        description="Serve the repos stored under --root (kept across restarts) until interrupted. Point clients at "
        "it with HF_ENDPOINT=http://HOST:PORT and HF_HUB_DISABLE_XET=1.",
        example="hub-export hub serve --root ./hub-data --port 8000 --token hf_local_secret",
    )
    serve.add_argument("--root", required=True, type=Path, help="storage folder (kept across restarts)")
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to bind (default: 8000; 0: a free one)")
    serve.add_argument("--token", default=None, help="require this bearer token (read-write)")
    serve.set_defaults(func=run)


def run(args: argparse.Namespace, console: Any) -> int:
    """Serve until interrupted (the server prints its URL and the environment to set)."""
    import errno

    from ..embedded_hub.server import serve
    from ..errors import HubExportError

    try:
        serve(args.root, args.host, args.port, token=args.token)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise HubExportError(
            f"port {args.port} on {args.host} is already in use (another server, or a hub-export hub serve still "
            "running): pass another --port, or --port 0 to take a free one (the banner prints it)."
        ) from exc
    return 0
