"""Broker URLs as messages and logs may show them."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["redact"]


def redact(url: str) -> str:
    """A URL with its passwords replaced by ``***`` (safe to print): the one before the host, and
    query options named ``password`` or ``*_password`` (``sentinel_password``)."""
    parts = urlsplit(url)
    if parts.password is None and "password=" not in parts.query:
        return url  # unchanged, as given (urlunsplit would drop an empty authority: sqlite:///x.db)
    if parts.password is not None:
        user = parts.username or ""
        parts = parts._replace(netloc=f"{user}:***@{parts.netloc.rsplit('@', 1)[-1]}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(name == "password" or name.endswith("_password") for name, _ in query):
        hidden = [(name, "***" if name == "password" or name.endswith("_password") else value) for name, value in query]
        parts = parts._replace(query=urlencode(hidden, safe="*"))
    return urlunsplit(parts)
