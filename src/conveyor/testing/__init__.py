"""Helpers for testing code that uses Conveyor (and for Conveyor's own suite).

* :func:`poll_until` — wait for what another thread or process does, with a deadline and a message.
* :class:`SpyBroker` — wrap any broker: record the calls made to it, make chosen ones fail, wait or
  run a hook first (:class:`Call` is one recorded call).
* :class:`RedisServer` — a private Redis-compatible server on a free loopback port, stopped by PID
  (the pytest plugin ``conveyor.testing.pytest_plugin`` gives it as fixtures).

docs/testing.md shows them at work.
"""

from conveyor.testing.brokers import Call, SpyBroker
from conveyor.testing.poll import poll_until
from conveyor.testing.redis_server import RedisServer

__all__ = ["Call", "RedisServer", "SpyBroker", "poll_until"]
