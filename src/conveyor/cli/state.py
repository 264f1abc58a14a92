"""What every command shares: the broker URL, the output mode, and the app opened lazily from them."""

from __future__ import annotations

from dataclasses import dataclass, field

import click

from conveyor.app import Conveyor
from conveyor.brokers import default_url

__all__ = ["CliState", "pass_state"]


@dataclass
class CliState:
    """``url`` None means ``CONVEYOR_URL``, else the default URL. ``app`` may be injected (tests, embedding);
    an app the state opened itself is closed when the command ends."""

    url: str | None = None
    json: bool = False
    app: Conveyor | None = None
    _owned: bool = field(default=False, repr=False)

    @property
    def resolved_url(self) -> str:
        return self.url or default_url()

    def conveyor(self) -> Conveyor:
        """The app for admin commands: no handlers needed, only the broker."""
        if self.app is None:
            self.app = Conveyor(self.resolved_url)
            self._owned = True
        return self.app

    def close(self) -> None:
        if self.app is not None and self._owned:
            self.app.close()
            self.app = None
            self._owned = False


pass_state = click.make_pass_decorator(CliState, ensure=True)
