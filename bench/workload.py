"""What the harness tells a producer or worker script through the environment (stdlib only).

Imported by every peer script (``bench/peers``, peers virtualenv) and by ``bench/conveyor_peer.py``:
``BENCH_VARIANT`` (``default`` or ``tuned``), ``BENCH_WORKLOAD`` (see ``peers/_driver.py``) and
``BENCH_URL`` (the server; a placeholder on port 1 when unset, so a script imports for ``info``).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["IO", "TUNED", "URL", "VARIANT", "WORKLOAD", "noop_kwargs"]

VARIANT = os.environ.get("BENCH_VARIANT", "default")
WORKLOAD = os.environ.get("BENCH_WORKLOAD", "drain")
TUNED = VARIANT == "tuned"
IO = WORKLOAD == "io"
URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:1/0")


def noop_kwargs(ts: float | None, fail: bool) -> dict[str, Any]:
    """The keyword arguments of a ``noop(ts=None, fail=False)`` task, leaving defaults out."""
    kwargs: dict[str, Any] = {}
    if ts is not None:
        kwargs["ts"] = ts
    if fail:
        kwargs["fail"] = True
    return kwargs
