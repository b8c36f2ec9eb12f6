"""Who may do what on the embedded Hub: one policy, asked by every route.

Three ways a hub is run, decided at each request (accounts may be added while it runs):

* **open**: no users, no ``--token``. Every request acts as the server's default user with write access. Only a
  hub bound to loopback may run open (the server refuses another host unless explicitly told otherwise).
* **accounts**: users exist (``hub-export hub user add``). A request acts as its token's user, with the token's scope;
  without a token it is anonymous. ``--token`` still works as an admin token.
* **token**: no users, but ``--token`` (and, from Python, read-only tokens) set: those tokens act as the server's
  default user, an admin; anything else is anonymous.

The rules, as on the Hub:

* anyone may read a public repo; a private one only its owner (the user, or a member of the organisation), an admin
  user or the server's token; to anyone else it does not exist (404 ``RepoNotFound``);
* writing (creating a repo, committing, tags and branches, deleting, merging a pull request) needs a write token
  whose user owns the namespace: the user's own, or an organisation where the user's role is ``write`` or ``admin``;
* a missing token where one is needed is 401 with ``WWW-Authenticate``; a token that is not enough is 403; an invalid
  or expired token is 401 whatever the request.
"""

from __future__ import annotations

import base64
import binascii
import hmac

from hub_export.embedded_hub._accounts import Accounts, Identity
from hub_export.embedded_hub._names import repo_not_found
from hub_export.errors import StoreError

__all__ = ["AccessPolicy", "unauthorized"]

_REALM = 'Bearer realm="hub-export", charset="UTF-8"'


def unauthorized(message: str = "Invalid credentials in Authorization header") -> StoreError:
    """401 with the ``WWW-Authenticate`` challenge."""
    return StoreError(message, 401, headers={"WWW-Authenticate": _REALM})


def _bearer(authorization: str | None) -> str:
    """The token of a ``Bearer`` header, or the password of a ``Basic`` one (what git and git-lfs send)."""
    auth = (authorization or "").strip()
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    if auth[:6].lower() == "basic ":
        try:
            decoded = base64.b64decode(auth[6:].strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise unauthorized("Malformed Basic credentials") from None
        return decoded.partition(":")[2]
    return ""


class AccessPolicy:
    """Identifies requests and checks their access.

    Args:
        accounts: The hub's users, organisations and tokens.
        admin_token: The server's ``--token`` (acts as ``default_user``, an admin, with write access).
        read_tokens: Read-only tokens of ``default_user``.
        default_user: The user of an open hub and of the server's tokens.
    """

    def __init__(
        self, accounts: Accounts, admin_token: str | None, read_tokens: tuple[str, ...], default_user: str
    ) -> None:
        self.accounts, self.admin_token, self.read_tokens = accounts, admin_token, tuple(read_tokens)
        self.default_user = default_user

    @property
    def open(self) -> bool:
        """Whether every request may write (no user and no token configured)."""
        return not (self.admin_token or self.read_tokens or self.accounts.configured)

    def identify(self, authorization: str | None) -> Identity:
        """The identity of a request with this ``Authorization`` header.

        Raises:
            StoreError: 401 for a token that is invalid, revoked or expired.
        """
        if self.open:
            return Identity(self.default_user, "write", admin=True, token_name="open hub")
        token = _bearer(authorization)
        if not token:
            return Identity()
        if self.admin_token and hmac.compare_digest(token.encode(), self.admin_token.encode()):
            return Identity(self.default_user, "write", admin=True, token_name="server token")
        if any(hmac.compare_digest(token.encode(), t.encode()) for t in self.read_tokens):
            return Identity(self.default_user, "read", admin=True, token_name="server read token")
        found = self.accounts.identify(token)
        if found is None:
            raise unauthorized()
        return found

    # -- checks --------------------------------------------------------------------------------------------
    def _owns(self, identity: Identity, namespace: str, roles: tuple[str, ...]) -> bool:
        if identity.admin or identity.user == namespace:
            return not identity.anonymous
        return identity.orgs.get(namespace) in roles

    def can_read(self, identity: Identity, namespace: str, private: bool) -> bool:
        """Whether ``identity`` may read a repo of ``namespace``."""
        return not private or self._owns(identity, namespace, ("read", "write", "admin"))

    def require_read(self, identity: Identity, repo_id: str, private: bool) -> None:
        """Raise unless ``identity`` may read the repo (a private repo it may not read does not exist).

        Raises:
            StoreError: 404 ``RepoNotFound``.
        """
        if not self.can_read(identity, repo_id.split("/")[0], private):
            raise repo_not_found(repo_id)

    def require_write(self, identity: Identity, namespace: str, what: str) -> None:
        """Raise unless ``identity`` may write to ``namespace`` (``what``: the action, for the message).

        Raises:
            StoreError: 401 when anonymous, 403 for a read token or a namespace the user does not own.
        """
        if identity.anonymous:
            raise unauthorized(f"Authentication required to {what}: pass a write token")
        if identity.scope != "write":
            raise StoreError(f"This token is read-only: {what} needs a write token", 403)
        if not self._owns(identity, namespace, ("write", "admin")):
            raise StoreError(
                f"{identity.user!r} may not {what} in {namespace!r}: only its owner, or members of the organisation "
                "with the write or admin role, may",
                403,
            )

    def require_contributor(self, identity: Identity, what: str) -> None:
        """Raise unless ``identity`` holds a write token (of any user): what opening a discussion or a pull request,
        commenting, and uploading the files of a pull request's commit need.

        Raises:
            StoreError: 401 when anonymous, 403 for a read token.
        """
        if identity.anonymous:
            raise unauthorized(f"Authentication required to {what}: pass a write token")
        if identity.scope != "write":
            raise StoreError(f"This token is read-only: to {what} needs a write token", 403)

    def require_user(self, identity: Identity) -> None:
        """Raise unless the request carries a valid token (``whoami``).

        Raises:
            StoreError: 401.
        """
        if identity.anonymous:
            raise unauthorized()
