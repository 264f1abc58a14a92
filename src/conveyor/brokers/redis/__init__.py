"""``redis://`` / ``rediss://``: the distributed broker (Redis 7+ or Valkey).

See ``broker.py`` for round trips and faults, ``keys.py`` for the data layout, ``lua/`` for the
scripts (one per operation) and ``config.py`` for the URL options.
"""

from __future__ import annotations

from conveyor.brokers.redis.broker import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.serverclock import ServerClock

__all__ = ["RedisBroker", "RedisConfig", "ServerClock"]
