"""Who is calling: tokens, the console's session cookie, CSRF.

A caller presents a token in ``Authorization: Bearer <token>`` or signs in on
the console's login form, which sets an HttpOnly, SameSite=Strict cookie
holding the role and an HMAC of it keyed by that role's token (changing the
token signs everyone out). Every comparison is constant-time. Without any
token configured the server listens on loopback only and every caller has
full access.

The console's forms carry a CSRF token that must equal the ``nsjq_csrf``
cookie (double submit); every POST whose ``Origin`` names another site is
refused whatever it carries.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request

from nsj_queue_lib.web.settings import WebSettings

SESSION_COOKIE = "nsjq_session"
CSRF_COOKIE = "nsjq_csrf"
CSRF_FIELD = "csrf"


class Role(enum.Enum):
    ADMIN = "admin"
    READER = "reader"


class Auth:
    def __init__(self, settings: WebSettings) -> None:
        self._tokens = {
            role: token
            for role, token in (
                (Role.ADMIN, settings.token),
                (Role.READER, settings.readonly_token),
            )
            if token is not None
        }

    @property
    def required(self) -> bool:
        return bool(self._tokens)

    def role_of_token(self, presented: str) -> Role | None:
        """The role whose token this is; every configured token is compared."""
        found = None
        for role, token in self._tokens.items():
            if hmac.compare_digest(presented.encode(), token.encode()):
                found = role
        return found

    def role(self, request: Request) -> Role | None:
        """The caller's role, or None when it presented no valid credential."""
        if not self.required:
            return Role.ADMIN
        header = request.headers.get("authorization", "")
        scheme, _, presented = header.partition(" ")
        if scheme.lower() == "bearer" and presented.strip():
            return self.role_of_token(presented.strip())
        cookie = request.cookies.get(SESSION_COOKIE, "")
        name, _, signature = cookie.partition(".")
        for role in self._tokens:
            if name == role.value and hmac.compare_digest(signature, self._sign(role)):
                return role
        return None

    def session_cookie(self, role: Role) -> str:
        return f"{role.value}.{self._sign(role)}"

    def _sign(self, role: Role) -> str:
        key = hashlib.sha256(b"nsjq-web-session:" + self._tokens[role].encode()).digest()
        return hmac.new(key, role.value.encode(), hashlib.sha256).hexdigest()


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def csrf_matches(request: Request, submitted: str | None) -> bool:
    cookie = request.cookies.get(CSRF_COOKIE)
    if not cookie or not submitted:
        return False
    return hmac.compare_digest(cookie.encode(), submitted.encode())


def cross_site(request: Request) -> bool:
    """Whether the request comes from a page of another origin: by the browser's
    ``Sec-Fetch-Site`` when it sends one, else by ``Origin`` (absent: not a browser's
    cross-origin request, e.g. curl)."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site not in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return False
    return origin == "null" or urlsplit(origin).netloc != request.headers.get("host", "")
