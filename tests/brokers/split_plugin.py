"""A pytest plugin for a run of its own (``test_redis_split_conformance.py``): every ``RedisBroker`` of
the run opened without explicit keys uses ``SplitKeys``, each queue in a slot of its own."""

from __future__ import annotations

import conveyor.brokers.redis.addressing as addressing

from .split import SplitKeys

addressing.Keys = SplitKeys  # type: ignore[attr-defined]
