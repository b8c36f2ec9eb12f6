"""Signing in to the hub's web pages with a token, and the CSRF token of every form.

A browser signs in by posting a token (a user's token from ``hub-export hub token create``, or the server's
``--token``). The token stays on the server: the browser holds a random session id in an ``HttpOnly``,
``SameSite=Strict`` cookie, and each request re-checks the token through the access policy, so a revoked or expired
token signs the browser out at its next page. Every form that changes something carries a CSRF token derived from the
browser's own random ``hub_csrf`` cookie (``SameSite=Strict``: another site's form never comes with it) and is
refused without it, on a hub run open (no sign-in) as much as on one with accounts.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.cookies import CookieError, SimpleCookie

__all__ = ["CSRF_COOKIE", "SESSION_COOKIE", "Session", "Sessions", "cookie_header", "read_cookies"]

SESSION_COOKIE = "hub_session"
CSRF_COOKIE = "hub_csrf"
_LIFETIME = 8 * 3600
_MAX_SESSIONS = 10_000


@dataclass
class Session:
    """One signed-in browser."""

    token: str
    expires: float = field(default_factory=lambda: time.time() + _LIFETIME)


def read_cookies(header: str | None) -> dict[str, str]:
    """The cookies of a ``Cookie`` header (``{}`` for a malformed one)."""
    if not header or len(header) > 8192:
        return {}
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return {}
    return {name: morsel.value for name, morsel in jar.items()}


def cookie_header(name: str, value: str, *, max_age: int = _LIFETIME) -> str:
    """A ``Set-Cookie`` value that scripts cannot read and other sites do not send (``max_age`` 0 deletes it)."""
    return f"{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}"


class Sessions:
    """The signed-in browsers of one server (in memory: a restart signs everyone out).

    Args:
        secret: Key deriving a form's CSRF token from the browser's ``hub_csrf`` cookie.
    """

    def __init__(self, secret: bytes):
        self._secret = secret
        self._lock = threading.Lock()
        self._items: dict[str, Session] = {}

    def start(self, token: str) -> tuple[str, Session]:
        """A new session for ``token`` (already checked by the caller): ``(session id, session)``."""
        sid = secrets.token_urlsafe(32)
        with self._lock:
            now = time.time()
            if len(self._items) >= _MAX_SESSIONS:
                self._items = {k: s for k, s in self._items.items() if s.expires > now}
                while len(self._items) >= _MAX_SESSIONS:  # the oldest go first
                    self._items.pop(next(iter(self._items)))
            session = self._items[sid] = Session(token)
        return sid, session

    def get(self, sid: str | None) -> Session | None:
        """The live session of ``sid``, or None."""
        if not sid:
            return None
        with self._lock:
            session = self._items.get(sid)
            if session is not None and session.expires <= time.time():
                del self._items[sid]
                session = None
        return session

    def end(self, sid: str | None) -> None:
        """Sign a browser out."""
        with self._lock:
            self._items.pop(sid or "", None)

    def csrf_token(self, nonce: str) -> str:
        """The CSRF token of the forms shown to the browser whose ``hub_csrf`` cookie is ``nonce``."""
        return hmac.new(self._secret, b"csrf:" + nonce.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, nonce: str | None, given: str | None) -> bool:
        """Whether a form's CSRF token matches the browser's cookie (compared in constant time)."""
        if not nonce or not given or len(given) > 128:
            return False
        return hmac.compare_digest(given.encode(), self.csrf_token(nonce).encode())
