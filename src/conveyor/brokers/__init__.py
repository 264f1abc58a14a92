"""Broker backends, chosen by URL scheme.

``memory://`` (in-process, deterministic), ``sqlite:///path.db`` (embedded default),
``redis://`` / ``rediss://`` (distributed; ``redis+cluster://`` / ``rediss+cluster://`` on a Redis
Cluster, ``redis+sentinel://`` / ``rediss+sentinel://`` for a primary under Sentinel). Backends are
imported lazily so that using one never requires another's client library.
"""

from __future__ import annotations

import importlib
import os
from urllib.parse import urlsplit

from conveyor.brokers.base import Broker
from conveyor.errors import ConfigurationError
from conveyor.model import BrokerPolicy
from conveyor.urls import redact

__all__ = ["DEFAULT_URL", "default_url", "open_broker"]

#: Used when no URL is given and ``CONVEYOR_URL`` is unset.
DEFAULT_URL = "sqlite:///conveyor.db"

_BACKENDS = {
    "memory": "conveyor.brokers.memory:MemoryBroker",
    "sqlite": "conveyor.brokers.sqlite:SQLiteBroker",
    "redis": "conveyor.brokers.redis:RedisBroker",
    "rediss": "conveyor.brokers.redis:RedisBroker",
    "redis+cluster": "conveyor.brokers.redis:RedisBroker",
    "rediss+cluster": "conveyor.brokers.redis:RedisBroker",
    "redis+sentinel": "conveyor.brokers.redis:RedisBroker",
    "rediss+sentinel": "conveyor.brokers.redis:RedisBroker",
}


def default_url() -> str:
    """``CONVEYOR_URL`` if set, else :data:`DEFAULT_URL`."""
    return os.environ.get("CONVEYOR_URL") or DEFAULT_URL


def open_broker(url: str | None = None, policy: BrokerPolicy | None = None) -> Broker:
    """Open the broker a URL names. Each call returns a new, independent broker object."""
    if url is None:
        url = default_url()
    if not isinstance(url, str):
        raise TypeError(f"broker URL must be a str, not {type(url).__name__}")
    scheme = urlsplit(url).scheme.lower()
    target = _BACKENDS.get(scheme)
    if target is None:
        known = ", ".join(f"{name}://" for name in sorted(_BACKENDS))
        raise ConfigurationError(f"unsupported broker URL {redact(url)!r}: scheme must be one of {known}")
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # pragma: no cover - depends on installed extras
        raise ConfigurationError(f"the {scheme}:// broker is not available: {exc}") from exc
    factory = getattr(module, class_name)
    broker: Broker = factory.from_url(url, policy or BrokerPolicy())
    return broker
