"""``hub-export hub serve --root DIR``: run the embedded Hub-protocol server."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``hub`` command group."""
    parser = subparsers.add_parser("hub", help="the embedded Hub server")
    actions = parser.add_subparsers(dest="hub_command", metavar="ACTION", required=True)
    serve = actions.add_parser("serve", help="serve a Hub-protocol endpoint on loopback (use with HF_ENDPOINT)")
    serve.add_argument("--root", required=True, type=Path, help="storage folder (kept across restarts)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--token", default=None, help="require this bearer token")
    serve.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted."""
    from ..embedded_hub.server import serve

    print(
        f"embedded hub on http://{args.host}:{args.port} (root {args.root}); set HF_ENDPOINT and HF_HUB_DISABLE_XET=1"
    )
    serve(args.root, args.host, args.port, token=args.token)
    return 0
