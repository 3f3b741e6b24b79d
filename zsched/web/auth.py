"""Who may act: credentials from the environment, sessions, and CSRF tokens.

Credentials are read from the environment only (never from code or logs):
`ZSCHED_WEB_TOKEN` (a bearer token, also accepted by the login form) and/or
`ZSCHED_WEB_USER` + `ZSCHED_WEB_PASSWORD` (HTTP basic auth, or the login form).
With none set the console is read-only. When credentials are set, every page needs them.

A login sets an HMAC-signed session cookie; `ZSCHED_WEB_SECRET` keeps sessions valid across
restarts and across processes (else a random secret per process). Every action is a POST whose
form carries the CSRF token, which must equal the `zsched_csrf` cookie (double submit), and
whose Origin, when the browser sends one, must be this host.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from starlette.requests import Request

SESSION_COOKIE = "zsched_session"
CSRF_COOKIE = "zsched_csrf"
CSRF_FIELD = "csrf"
SESSION_MAX_AGE_S = 12 * 3600


@dataclass(frozen=True)
class Credentials:
    """What the environment configured; `enabled` False means read-only."""

    token: str | None
    user: str | None
    password: str | None
    secret: bytes

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Credentials:
        token = env.get("ZSCHED_WEB_TOKEN") or None
        user = env.get("ZSCHED_WEB_USER") or None
        password = env.get("ZSCHED_WEB_PASSWORD") or None
        if (user is None) != (password is None):
            raise ValueError("set both ZSCHED_WEB_USER and ZSCHED_WEB_PASSWORD, or neither")
        if user is not None and ":" in user:
            raise ValueError("ZSCHED_WEB_USER cannot contain ':' (HTTP basic auth splits at it)")
        raw = env.get("ZSCHED_WEB_SECRET")
        secret = raw.encode() if raw else secrets.token_bytes(32)
        return cls(token, user, password, secret)

    @property
    def enabled(self) -> bool:
        return self.token is not None or self.user is not None

    @property
    def basic(self) -> bool:
        return self.user is not None

    def check_token(self, token: str) -> bool:
        return self.token is not None and hmac.compare_digest(token.encode(), self.token.encode())

    def check_user(self, user: str, password: str) -> bool:
        if self.user is None or self.password is None:
            return False
        ok_user = hmac.compare_digest(user.encode(), self.user.encode())
        return hmac.compare_digest(password.encode(), self.password.encode()) and ok_user

    def _mac(self, text: str) -> str:
        # Bound to the configured credentials: changing them ends every session.
        key = self.secret + (self.token or "").encode() + (self.password or "").encode()
        return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()

    def session_value(self, issued_s: int, who: str) -> str:
        """The session cookie of a login at `issued_s` by `who` (the user, or "token")."""
        name = base64.urlsafe_b64encode(who.encode()).decode().rstrip("=")
        return f"{issued_s}.{name}.{self._mac(f'session:{issued_s}:{name}')}"

    def check_session(self, value: str, now_s: int) -> str | None:
        """Who logged in, if `value` is a valid session cookie that has not expired."""
        issued, _, rest = value.partition(".")
        name, _, mac = rest.partition(".")
        if not issued.isdigit() or not 0 <= now_s - int(issued) <= SESSION_MAX_AGE_S:
            return None
        if not hmac.compare_digest(mac, self._mac(f"session:{issued}:{name}")):
            return None
        try:
            return base64.urlsafe_b64decode(name + "=" * (-len(name) % 4)).decode()
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None


#: Who acted, for a token login or a bearer token (a token names no person).
TOKEN_PRINCIPAL = "token"


def authenticated(request: Request, creds: Credentials, now_s: int) -> bool:
    """Whether the request carries valid credentials: a session cookie, a bearer token or
    basic auth."""
    return principal(request, creds, now_s) is not None


def principal(request: Request, creds: Credentials, now_s: int) -> str | None:
    """Who the request's credentials name: the basic-auth user, "token" for a token, or the
    login of its session cookie; None without valid credentials."""
    if not creds.enabled:
        return None
    session = request.cookies.get(SESSION_COOKIE)
    who = creds.check_session(session, now_s) if session else None
    if who is not None:
        return who
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return TOKEN_PRINCIPAL if creds.check_token(value.strip()) else None
    if scheme.lower() == "basic" and creds.basic:
        try:
            user, _, password = base64.b64decode(value.strip()).decode().partition(":")
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None
        return user if creds.check_user(user, password) else None
    return None


def csrf_token(request: Request) -> tuple[str, bool]:
    """The request's CSRF token, and whether it is new (then the response sets the cookie)."""
    have = request.cookies.get(CSRF_COOKIE, "")
    if len(have) == 43 and have.replace("-", "").replace("_", "").isalnum():
        return have, False
    return secrets.token_urlsafe(32), True


def csrf_ok(request: Request, form_token: str) -> bool:
    """Double submit: the form's token equals the cookie's, and the Origin (if any) is ours."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    if not cookie or not form_token or not hmac.compare_digest(cookie, form_token):
        return False
    origin = request.headers.get("origin")
    if origin is None:  # not every client sends one; the cookie check above still holds
        return True
    host = request.headers.get("host", "")
    return origin.split("://", 1)[-1] == host
