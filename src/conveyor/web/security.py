"""The dashboard's defences: authentication (bearer token or basic auth), CSRF tokens for every POST,
and security headers (a strict Content-Security-Policy: scripts and styles from this origin only, no
inline code) on every response.

CSRF: a random ``conveyor_csrf`` cookie (HttpOnly, SameSite=Strict) identifies the browser; forms
carry ``HMAC(secret, cookie)``, which a page on another origin can neither read nor compute. A POST
must also come from this origin when the browser says where it comes from (``Origin``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.datastructures import URL, Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

__all__ = ["CSP", "CSRF_COOKIE", "TOKEN_COOKIE", "Csrf", "SecurityMiddleware", "route_path"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CSRF_COOKIE = "conveyor_csrf"
TOKEN_COOKIE = "conveyor_token"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),  # "no-referrer" would make browsers send "Origin: null" on POSTs
    (b"cache-control", b"no-store"),
]
#: Paths (below the mount point) served without authentication.
PUBLIC = frozenset({"/healthz"})


class SecurityMiddleware:
    """ASGI middleware: authenticate every request (except ``/healthz``) and add security headers."""

    def __init__(self, app: ASGIApp, *, token: str | None = None, basic_auth: tuple[str, str] | None = None) -> None:
        self.app = app
        self.token = token
        self.basic_auth = basic_auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        denied = self._check(scope)
        if denied is not None:
            await denied(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _check(self, scope: Scope) -> Response | None:
        """None if the request may go on, else the response refusing it."""
        if self.token is None and self.basic_auth is None:
            return None
        if route_path(scope) in PUBLIC:
            return None
        request = Request(scope)
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if self.token is not None:
            if scheme.lower() == "bearer" and _same(value.strip(), self.token):
                return None
            if _same(request.cookies.get(TOKEN_COOKIE, ""), self.token):
                return None
            if _same(request.query_params.get("token", ""), self.token) and request.method == "GET":
                return self._remember_token(request)
        if self.basic_auth is not None and scheme.lower() == "basic" and self._basic_ok(value.strip()):
            return None
        challenge = {"www-authenticate": 'Basic realm="conveyor"'} if self.basic_auth is not None else {}
        return PlainTextResponse("authentication required", status_code=401, headers=challenge)

    def _basic_ok(self, value: str) -> bool:
        assert self.basic_auth is not None
        try:
            user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        # Evaluate both comparisons: no early exit that would tell which part was wrong.
        user_ok = _same(user, self.basic_auth[0])
        password_ok = _same(password, self.basic_auth[1])
        return user_ok and password_ok

    def _remember_token(self, request: Request) -> Response:
        """``?token=`` once: store it in an HttpOnly cookie and reload without it (off the URL bar)."""
        query = urlencode([(k, v) for k, v in parse_qsl(request.url.query) if k != "token"])
        url = URL(path=request.url.path, query=query)
        response = RedirectResponse(str(url), status_code=303)
        response.set_cookie(
            TOKEN_COOKIE,
            request.query_params["token"],
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path=request.scope.get("root_path") or "/",
        )
        return response


def route_path(scope: Scope) -> str:
    """The request path below the mount point."""
    root: str = scope.get("root_path", "")
    path: str = scope["path"]
    return path[len(root) :] if root and path.startswith(root) else path


def _same(given: str, expected: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode(), expected.encode())


class Csrf:
    """Issues and checks CSRF tokens bound to a per-browser cookie by a per-app secret."""

    def __init__(self, secret: bytes | None = None) -> None:
        self.secret = secret or secrets.token_bytes(32)

    def _sign(self, browser: str) -> str:
        return hmac.new(self.secret, browser.encode(), hashlib.sha256).hexdigest()

    def token(self, request: Request) -> str:
        """The form token for this browser (creating its cookie value if needed; see ``set_cookie``)."""
        browser = request.cookies.get(CSRF_COOKIE) or getattr(request.state, "new_csrf", None)
        if not browser:
            browser = secrets.token_urlsafe(32)
            request.state.new_csrf = browser
        return self._sign(browser)

    def set_cookie(self, request: Request, response: Response) -> None:
        """Attach the browser cookie if ``token`` just created it."""
        browser = getattr(request.state, "new_csrf", None)
        if browser:
            response.set_cookie(
                CSRF_COOKIE,
                browser,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
                path=request.scope.get("root_path") or "/",
            )

    def valid(self, request: Request, submitted: str) -> bool:
        """The submitted token matches this browser's cookie, and the request came from this origin."""
        origin = Headers(scope=request.scope).get("origin")
        if origin is not None and urlsplit(origin).netloc != request.url.netloc:
            return False
        browser = request.cookies.get(CSRF_COOKIE)
        if not browser or not submitted:
            return False
        return hmac.compare_digest(self._sign(browser), submitted)
