"""Users, organisations and tokens of the embedded Hub, stored under its root (``accounts.json``).

A token acts as its user, with a scope: ``read`` tokens read what the user may read, ``write`` tokens also write to
the user's own namespace and to the organisations where the user's role is ``write`` or ``admin``. Tokens are shown
once, when created; the file keeps their sha256 only (a token is 160 random bits, so a fast hash is enough: nothing
can be guessed from it), with a name, the scope, the creation time and an optional expiry. An organisation lists its
members with a role (``read``, ``write``, ``admin``). An ``admin`` user may read and write every repo.

The file is written atomically (a temporary file, then a rename) under a lock file, so that ``hub-export hub user
...`` commands may change it while a server runs: the server reads it again whenever it changes on disk.

Standard library only (the embedded hub imports nothing from hub_export but its errors).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from hub_export.errors import StoreError

__all__ = ["ACCOUNTS_FILE", "ROLES", "SCOPES", "Accounts", "Identity", "TokenInfo"]

ACCOUNTS_FILE = "accounts.json"
SCOPES = ("read", "write")
ROLES = ("read", "write", "admin")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_TOKEN_PREFIX = "hf_"
_MAX_FILE = 16 * 1024**2


@dataclass(frozen=True)
class Identity:
    """Who a request acts as.

    Attributes:
        user: The user name, or None for an anonymous request.
        scope: ``read`` or ``write`` (None when anonymous).
        admin: Reads and writes every repo (an admin user, or the server's own ``--token``).
        orgs: The user's organisations and role in each.
        token_name: The name of the token used (for ``whoami``).
    """

    user: str | None = None
    scope: str | None = None
    admin: bool = False
    orgs: dict[str, str] = field(default_factory=dict)
    token_name: str | None = None

    @property
    def anonymous(self) -> bool:
        return self.user is None


ANONYMOUS = Identity()


@dataclass(frozen=True)
class TokenInfo:
    """A token as listed (never its value)."""

    id: str
    user: str
    name: str
    scope: str
    created: float
    expires: float | None

    @property
    def expired(self) -> bool:
        return self.expires is not None and self.expires <= time.time()


def check_name(name: str, what: str = "name") -> str:
    """A user or organisation name: letters, digits, ``.``, ``_``, ``-``; at most 96 characters.

    Raises:
        StoreError: 400 for anything else.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name or "--" in name:
        raise StoreError(f"Invalid {what}: {name!r} (letters, digits, '.', '_' and '-'; at most 96 characters)")
    return name


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


class Accounts:
    """The users, organisations and tokens stored in ``<root>/accounts.json``.

    Args:
        root: The hub's storage folder.
    """

    def __init__(self, root: str | os.PathLike):
        self.path = Path(root) / ACCOUNTS_FILE
        self._guard = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._data: dict[str, Any] = {"users": {}, "orgs": {}, "tokens": {}}

    # -- reading -------------------------------------------------------------------------------------------
    def _current(self) -> dict[str, Any]:
        """The stored data, read again when the file changed on disk."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return {"users": {}, "orgs": {}, "tokens": {}}
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._guard:
            if stamp != self._stamp:
                if stat.st_size > _MAX_FILE:
                    raise StoreError(f"{self.path} is larger than {_MAX_FILE} bytes", 500)
                data = json.loads(self.path.read_text(encoding="utf-8"))
                for key in ("users", "orgs", "tokens"):
                    data.setdefault(key, {})
                self._data, self._stamp = data, stamp
            return self._data

    @property
    def configured(self) -> bool:
        """Whether any user exists (then every request is checked against these accounts)."""
        return bool(self._current()["users"])

    def users(self) -> dict[str, dict[str, Any]]:
        """User name -> ``{"admin": bool, "created": time}``."""
        return dict(self._current()["users"])

    def orgs(self) -> dict[str, dict[str, str]]:
        """Organisation -> {member: role}."""
        return {name: dict(org["members"]) for name, org in self._current()["orgs"].items()}

    def tokens(self, user: str | None = None) -> list[TokenInfo]:
        """The tokens (of ``user``), oldest first."""
        out = [
            TokenInfo(tid, t["user"], t["name"], t["scope"], t["created"], t.get("expires"))
            for tid, t in self._current()["tokens"].items()
            if user is None or t["user"] == user
        ]
        return sorted(out, key=lambda t: t.created)

    def role_in(self, user: str, namespace: str) -> str | None:
        """``user``'s role in organisation ``namespace`` (None when not a member or not an organisation)."""
        org = self._current()["orgs"].get(namespace)
        return None if org is None else org["members"].get(user)

    def identify(self, secret: str) -> Identity | None:
        """The identity a token value acts as; None for an unknown, revoked or expired token."""
        data = self._current()
        digest = _digest(secret)
        for token in data["tokens"].values():
            if hmac.compare_digest(token["hash"], digest):
                if token.get("expires") is not None and token["expires"] <= time.time():
                    return None
                user = data["users"].get(token["user"])
                if user is None:
                    return None
                orgs = {
                    n: o["members"][token["user"]] for n, o in data["orgs"].items() if token["user"] in o["members"]
                }
                return Identity(token["user"], token["scope"], bool(user.get("admin")), orgs, token["name"])
        return None

    # -- changing ------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _changing(self) -> Iterator[dict[str, Any]]:
        """The data to change, written back atomically under the file lock."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(f".{ACCOUNTS_FILE}.lock"), "a+b") as lock:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            self._stamp = None
            data = json.loads(json.dumps(self._current()))
            yield data
            temporary = self.path.with_name(f".{ACCOUNTS_FILE}.{os.getpid()}.tmp")
            temporary.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
            os.chmod(temporary, 0o600)
            os.replace(temporary, self.path)
            self._stamp = None

    def add_user(self, name: str, *, admin: bool = False) -> None:
        """Create a user.

        Raises:
            StoreError: 409 when the name is taken by a user or an organisation.
        """
        check_name(name, "user name")
        with self._changing() as data:
            if name in data["users"] or name in data["orgs"]:
                raise StoreError(f"{name!r} already exists", 409)
            data["users"][name] = {"admin": bool(admin), "created": time.time()}

    def remove_user(self, name: str) -> None:
        """Delete a user, their tokens and memberships (their repos stay)."""
        with self._changing() as data:
            if data["users"].pop(name, None) is None:
                raise StoreError(f"No user {name!r}", 404)
            data["tokens"] = {k: t for k, t in data["tokens"].items() if t["user"] != name}
            for org in data["orgs"].values():
                org["members"].pop(name, None)

    def add_org(self, name: str) -> None:
        """Create an organisation.

        Raises:
            StoreError: 409 when the name is taken.
        """
        check_name(name, "organisation name")
        with self._changing() as data:
            if name in data["users"] or name in data["orgs"]:
                raise StoreError(f"{name!r} already exists", 409)
            data["orgs"][name] = {"members": {}, "created": time.time()}

    def set_member(self, org: str, user: str, role: str | None) -> None:
        """Give ``user`` a ``role`` in ``org`` (None removes them).

        Raises:
            StoreError: 404 for an unknown organisation or user, 400 for an unknown role.
        """
        if role is not None and role not in ROLES:
            raise StoreError(f"Unknown role {role!r}; roles: {', '.join(ROLES)}")
        with self._changing() as data:
            if org not in data["orgs"]:
                raise StoreError(f"No organisation {org!r}", 404)
            if user not in data["users"]:
                raise StoreError(f"No user {user!r}", 404)
            if role is None:
                data["orgs"][org]["members"].pop(user, None)
            else:
                data["orgs"][org]["members"][user] = role

    def create_token(
        self, user: str, *, scope: str = "read", name: str = "token", expires_in: float | None = None
    ) -> tuple[TokenInfo, str]:
        """A new token for ``user``: its listing and its value (shown this once, stored hashed).

        Raises:
            StoreError: 404 for an unknown user, 400 for an unknown scope or a non-positive lifetime.
        """
        if scope not in SCOPES:
            raise StoreError(f"Unknown scope {scope!r}; scopes: {', '.join(SCOPES)}")
        if expires_in is not None and expires_in <= 0:
            raise StoreError("A token's lifetime must be positive")
        secret = _TOKEN_PREFIX + secrets.token_urlsafe(30).replace("-", "x").replace("_", "y")[:34]
        now = time.time()
        token_id = secrets.token_hex(6)
        with self._changing() as data:
            if user not in data["users"]:
                raise StoreError(f"No user {user!r}", 404)
            data["tokens"][token_id] = {
                "user": user,
                "name": str(name)[:96],
                "scope": scope,
                "created": now,
                "expires": None if expires_in is None else now + expires_in,
                "hash": _digest(secret),
            }
        return TokenInfo(
            token_id, user, str(name)[:96], scope, now, None if expires_in is None else now + expires_in
        ), secret

    def revoke_token(self, token_id: str) -> None:
        """Delete a token by its id (as listed).

        Raises:
            StoreError: 404 when there is no such token.
        """
        with self._changing() as data:
            if data["tokens"].pop(token_id, None) is None:
                raise StoreError(f"No token {token_id!r}", 404)
