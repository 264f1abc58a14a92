"""A pytest plugin for a run of its own (``test_redis_layout4_conformance.py``): every ``RedisBroker``
of the run opened without explicit keys uses layout 4's (``Keys``: the whole namespace in one slot),
what the version before this one stored and what the upgrade tests write with."""

from __future__ import annotations

import conveyor.brokers.redis.addressing as addressing
from conveyor.brokers.redis.keys import Keys

addressing.LAYOUT_KEYS = Keys
