"""The web dashboard: ``create_app(conveyor_app, token=..., basic_auth=..., read_only=...)`` returns a
Starlette app, served by ``conveyor dashboard`` or mounted inside an existing ASGI application."""

from conveyor.web.app import create_app

__all__ = ["create_app"]
