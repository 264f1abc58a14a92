"""What every command shares: the broker URL, the output mode, and the app opened lazily from them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import click

from conveyor.app import Conveyor
from conveyor.brokers import default_url
from conveyor.brokers.sqlite.config import SQLiteConfig
from conveyor.errors import ConfigurationError

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

    def conveyor(self, create: bool = False) -> Conveyor:
        """The app for admin commands: no handlers needed, only the broker. Only commands that write
        new tasks pass ``create``: the others fail on a SQLite file that does not exist instead of
        leaving an empty database behind (a mistyped URL or a wrong directory)."""
        if self.app is None:
            url = self.resolved_url
            if not create:
                _check_exists(url)
            self.app = Conveyor(url)
            self._owned = True
        return self.app

    def close(self) -> None:
        if self.app is not None and self._owned:
            self.app.close()
            self.app = None
            self._owned = False


pass_state = click.make_pass_decorator(CliState, ensure=True)


def _check_exists(url: str) -> None:
    if urlsplit(url).scheme.lower() != "sqlite":
        return
    path = SQLiteConfig.from_url(url).path
    if not os.path.exists(path):
        raise ConfigurationError(
            f"no Conveyor database at {os.path.abspath(path)}; check --url or CONVEYOR_URL"
            " (`conveyor enqueue` or a worker creates it)"
        )
