"""``hub-export hub user|org|token ...``: the embedded hub's users, organisations and tokens.

They are stored in ``ROOT/accounts.json`` (tokens as their sha256 only) and may be changed while the hub runs. Once a
user exists, requests without a token read public repos only and every write needs a user's write token.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from ._args import add_command, add_output_options

__all__ = ["register"]

_DAY = 86400.0


def _root(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", required=True, type=Path, help="the hub's storage folder (as for hub serve)")
    add_output_options(parser)


def register(actions: Any) -> None:
    """Add ``user``, ``org`` and ``token`` to the ``hub`` command group."""
    user = add_command(
        actions,
        "user",
        help="add, list or remove the hub's users",
        description="Users own the repos of their namespace. Once one exists, requests without a token read public "
        "repos only.",
        example="hub-export hub user add alice --root ./hub-data\nhub-export hub user list --root ./hub-data",
    )
    user_actions = user.add_subparsers(dest="user_command", metavar="ACTION", required=True)
    add = add_command(
        user_actions,
        "add",
        help="create a user",
        description="Create a user (an --admin reads and writes every repo).",
        example="hub-export hub user add alice --root ./hub-data",
    )
    add.add_argument("name")
    add.add_argument("--admin", action="store_true", help="may read and write every repo")
    _root(add)
    add.set_defaults(func=_user_add)
    listing = add_command(
        user_actions,
        "list",
        help="list the users",
        description="The users, their organisations and tokens.",
        example="hub-export hub user list --root ./hub-data --json",
    )
    _root(listing)
    listing.set_defaults(func=_user_list)
    remove = add_command(
        user_actions,
        "remove",
        help="delete a user and their tokens",
        description="Delete a user, their tokens and memberships; their repos stay.",
        example="hub-export hub user remove alice --root ./hub-data",
    )
    remove.add_argument("name")
    _root(remove)
    remove.set_defaults(func=_user_remove)

    org = add_command(
        actions,
        "org",
        help="add organisations and set their members",
        description="An organisation's members write to its repos with the write or admin role; read members read "
        "its private repos.",
        example="hub-export hub org add team --root ./hub-data\nhub-export hub org member team alice --role write "
        "--root ./hub-data",
    )
    org_actions = org.add_subparsers(dest="org_command", metavar="ACTION", required=True)
    org_add = add_command(
        org_actions,
        "add",
        help="create an organisation",
        description="Create an organisation (a namespace its members share).",
        example="hub-export hub org add team --root ./hub-data",
    )
    org_add.add_argument("name")
    _root(org_add)
    org_add.set_defaults(func=_org_add)
    member = add_command(
        org_actions,
        "member",
        help="give a user a role in an organisation, or remove them",
        description="Set USER's role in ORG: read, write or admin; --remove takes them out.",
        example="hub-export hub org member team alice --role write --root ./hub-data",
    )
    member.add_argument("org")
    member.add_argument("user")
    member.add_argument("--role", choices=["read", "write", "admin"], default="write", help="default: write")
    member.add_argument("--remove", action="store_true", help="remove the user from the organisation")
    _root(member)
    member.set_defaults(func=_org_member)

    token = add_command(
        actions,
        "token",
        help="create, list or revoke tokens",
        description="A token acts as its user with its scope: read, or write (the user's namespace and the "
        "organisations where they have the write or admin role).",
        example="hub-export hub token create alice --scope write --name ci --root ./hub-data",
    )
    token_actions = token.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    create = add_command(
        token_actions,
        "create",
        help="create a token and print it (shown once)",
        description="Create a token for USER and print it; the hub keeps only its sha256.",
        example="hub-export hub token create alice --scope write --expires-in-days 90 --root ./hub-data",
    )
    create.add_argument("user")
    create.add_argument("--scope", choices=["read", "write"], default="read", help="default: read")
    create.add_argument("--name", default="token", help="a label shown by token list")
    create.add_argument("--expires-in-days", type=float, default=None, help="default: never expires")
    _root(create)
    create.set_defaults(func=_token_create)
    tokens = add_command(
        token_actions,
        "list",
        help="list the tokens (never their values)",
        description="Each token's id, user, name, scope, creation and expiry.",
        example="hub-export hub token list --root ./hub-data",
    )
    tokens.add_argument("--user", default=None, help="only this user's")
    _root(tokens)
    tokens.set_defaults(func=_token_list)
    revoke = add_command(
        token_actions,
        "revoke",
        help="revoke a token by its id",
        description="Delete a token (by the id token list shows); requests with it get 401 at once.",
        example="hub-export hub token revoke 3f9a1c2b7d4e --root ./hub-data",
    )
    revoke.add_argument("id")
    _root(revoke)
    revoke.set_defaults(func=_token_revoke)


def _accounts(args: argparse.Namespace) -> Any:
    from ..embedded_hub._accounts import Accounts

    return Accounts(args.root)


def _when(stamp: float | None) -> str | None:
    return None if stamp is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


def _user_add(args: argparse.Namespace, console: Any) -> int:
    _accounts(args).add_user(args.name, admin=args.admin)
    console.line(
        f"user {args.name} added{' (admin)' if args.admin else ''}; create a token: hub-export hub token "
        f"create {args.name} --scope write --root {args.root}"
    )
    console.result({"user": args.name, "admin": args.admin}, essential=[args.name])
    return 0


def _user_list(args: argparse.Namespace, console: Any) -> int:
    accounts = _accounts(args)
    orgs = accounts.orgs()
    users = []
    for name, info in sorted(accounts.users().items()):
        member_of = {org: members[name] for org, members in orgs.items() if name in members}
        users.append(
            {"name": name, "admin": bool(info.get("admin")), "orgs": member_of, "tokens": len(accounts.tokens(name))}
        )
        roles = ", ".join(f"{o} ({r})" for o, r in sorted(member_of.items())) or "no organisation"
        console.line(f"{name}{' (admin)' if info.get('admin') else ''}: {roles}; {users[-1]['tokens']} token(s)")
    console.result({"users": users, "orgs": sorted(orgs)}, essential=[u["name"] for u in users])
    return 0


def _user_remove(args: argparse.Namespace, console: Any) -> int:
    _accounts(args).remove_user(args.name)
    console.line(f"user {args.name} removed, with their tokens")
    console.result({"removed": args.name}, essential=[args.name])
    return 0


def _org_add(args: argparse.Namespace, console: Any) -> int:
    _accounts(args).add_org(args.name)
    console.line(f"organisation {args.name} added")
    console.result({"org": args.name}, essential=[args.name])
    return 0


def _org_member(args: argparse.Namespace, console: Any) -> int:
    role = None if args.remove else args.role
    _accounts(args).set_member(args.org, args.user, role)
    console.line(f"{args.user} {'removed from' if role is None else f'is {role} in'} {args.org}")
    console.result({"org": args.org, "user": args.user, "role": role}, essential=[args.user])
    return 0


def _token_create(args: argparse.Namespace, console: Any) -> int:
    lifetime = None if args.expires_in_days is None else args.expires_in_days * _DAY
    info, secret = _accounts(args).create_token(args.user, scope=args.scope, name=args.name, expires_in=lifetime)
    console.line(f"{info.scope} token {info.id} for {info.user} (shown once; the hub keeps its sha256 only):")
    console.line(secret)
    console.result(
        {
            "id": info.id,
            "user": info.user,
            "scope": info.scope,
            "name": info.name,
            "expires": _when(info.expires),
            "token": secret,
        },
        essential=[secret],
    )
    return 0


def _token_list(args: argparse.Namespace, console: Any) -> int:
    listed = []
    for info in _accounts(args).tokens(args.user):
        state = "expired" if info.expired else f"expires {_when(info.expires)}" if info.expires else "no expiry"
        console.line(f"{info.id}  {info.user}  {info.scope}  {info.name}  created {_when(info.created)}, {state}")
        listed.append(
            {
                "id": info.id,
                "user": info.user,
                "scope": info.scope,
                "name": info.name,
                "created": _when(info.created),
                "expires": _when(info.expires),
                "expired": info.expired,
            }
        )
    console.result({"tokens": listed}, essential=[t["id"] for t in listed])
    return 0


def _token_revoke(args: argparse.Namespace, console: Any) -> int:
    _accounts(args).revoke_token(args.id)
    console.line(f"token {args.id} revoked")
    console.result({"revoked": args.id}, essential=[args.id])
    return 0
