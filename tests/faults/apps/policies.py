"""A custom backoff policy shared by the fault tests' producer and their worker processes: registering
it in a module both import is what lets it travel with a task."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from conveyor import register_backoff


@register_backoff("faults-linear")
@dataclass(frozen=True)
class Linear:
    """``step * n`` seconds after the n-th failure."""

    step: float

    def delay(self, failures: int, rng: random.Random) -> float:
        return self.step * failures

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "faults-linear", "step": self.step}
