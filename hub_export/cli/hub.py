"""``hub-export hub serve --root DIR``: run the embedded Hub-protocol server."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ._args import add_command, add_output_options

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
        help="serve a Hub-protocol endpoint (use with HF_ENDPOINT)",
        description="Serve the repos stored under --root (kept across restarts) until interrupted. Point clients at "
        "it with HF_ENDPOINT=http://HOST:PORT and HF_HUB_DISABLE_XET=1. Without users (hub user add) or --token "
        "every request may write, so such a hub serves loopback only.",
        example="hub-export hub serve --root ./hub-data --port 8000 --token hf_local_secret",
    )
    serve.add_argument("--root", required=True, type=Path, help="storage folder (kept across restarts)")
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to bind (default: 8000; 0: a free one)")
    serve.add_argument(
        "--token", default=None, help="an admin token (reads and writes every repo; users' tokens: hub token create)"
    )
    serve.add_argument(
        "--allow-open-network",
        action="store_true",
        help="serve a hub without users or --token on a non-loopback --host (anyone reaching it may write)",
    )
    serve.add_argument("--no-access-log", action="store_true", help="no line per request on stderr")
    serve.set_defaults(func=run)
    from .hub_accounts import register as register_accounts

    register_accounts(actions)
    fsck = add_command(
        actions,
        "fsck",
        help="check the stored repos (and repair with --repair)",
        description="Read every ref's commits, trees and files and the LFS object behind every pointer. --repair "
        "also removes what interrupted writes left behind and corrupt objects a new upload replaces. Run it while no "
        "hub serves the folder. Exit code 1 when a problem remains.",
        example="hub-export hub fsck --root ./hub-data\nhub-export hub fsck --root ./hub-data --deep --repair",
    )
    fsck.add_argument("--root", required=True, type=Path, help="the hub's storage folder")
    fsck.add_argument("--deep", action="store_true", help="also hash every LFS object (reads all the data)")
    fsck.add_argument(
        "--repair", action="store_true", help="remove leftovers and corrupt objects that can be re-uploaded"
    )
    add_output_options(fsck)
    fsck.set_defaults(func=run_fsck)


def run(args: argparse.Namespace, console: Any) -> int:
    """Serve until interrupted (the server prints its URL and the environment to set)."""
    import errno

    from ..embedded_hub.server import serve
    from ..errors import HubExportError

    try:
        serve(
            args.root,
            args.host,
            args.port,
            token=args.token,
            allow_open_network=args.allow_open_network,
            access_log=not args.no_access_log,
        )
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise HubExportError(
            f"port {args.port} on {args.host} is already in use (another server, or a hub-export hub serve still "
            "running): pass another --port, or --port 0 to take a free one (the banner prints it)."
        ) from exc
    return 0


def run_fsck(args: argparse.Namespace, console: Any) -> int:
    """Check (and repair) the store; exit code 1 when problems remain."""
    from ..embedded_hub._fsck import check
    from ..embedded_hub._gitstore import HubStore
    from ..errors import HubExportError

    if not (args.root / "repos").is_dir():
        raise HubExportError(f"no hub in {args.root}: --root is the folder hub serve stores its repos in")
    report = check(HubStore(args.root), deep=args.deep, repair=args.repair)
    for line in report.repaired:
        console.line(f"repaired: {line}")
    for line in report.problems:
        console.line(f"problem: {line}")
    counts = report.checked
    console.line(
        f"{counts['repos']} repos, {counts['commits']} commits, {counts['objects']} objects, {counts['lfs']} LFS files "
        f"checked: {len(report.problems)} problem(s)"
    )
    console.result(
        {"checked": counts, "problems": report.problems, "repaired": report.repaired},
        essential=report.problems,
    )
    return 1 if report.problems else 0
