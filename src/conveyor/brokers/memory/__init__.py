"""``memory://``: the reference semantics of the Broker contract, in-process and deterministic.

``store.py`` holds the state and the transitions (one lock, dicts plus lazily invalidated heaps);
``broker.py`` is the public ``MemoryBroker`` built from them.
"""

from conveyor.brokers.memory.broker import MemoryBroker

__all__ = ["MemoryBroker"]
