"""Broker URLs as messages and logs may show them."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["redact"]

#: ``scheme:`` and slashes, a user, ``:``, then the password up to the last ``@``: a password a
#: malformed URL (``redis:/:pw@host``, where the authority is not found) would otherwise show.
_LOOSE_PASSWORD = re.compile(r"^([^:/?#@]*:/*[^:/?#@]*:)(.*)(@[^@]*)$")


def redact(url: str) -> str:
    """A URL with its passwords replaced by ``***`` (safe to print): the one before the host, and
    query options named ``password`` or ``*_password`` (``sentinel_password``)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # an authority urllib cannot read (a bracket left open): mask loosely
        return _LOOSE_PASSWORD.sub(r"\1***\3", url)
    if password is None and "@" in url:
        url = _LOOSE_PASSWORD.sub(r"\1***\3", url)
    if password is None and "password=" not in parts.query:
        return url  # unchanged, as given (urlunsplit would drop an empty authority: sqlite:///x.db)
    if password is not None:
        user = parts.username or ""
        parts = parts._replace(netloc=f"{user}:***@{parts.netloc.rsplit('@', 1)[-1]}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(name == "password" or name.endswith("_password") for name, _ in query):
        hidden = [(name, "***" if name == "password" or name.endswith("_password") else value) for name, value in query]
        parts = parts._replace(query=urlencode(hidden, safe="*"))
    return urlunsplit(parts)
