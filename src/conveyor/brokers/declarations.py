"""Task declarations (``conveyor.declared``) as the brokers store them: one JSON object each, encoded
once here for every broker that keeps text.

It sits below the brokers, apart from ``conveyor.declared`` (the producer's cached view, which uses
the broker protocol), so a backend never imports a module above it.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from conveyor.model import TaskDeclaration

__all__ = ["decode_declaration", "encode_declaration"]


def encode_declaration(declaration: TaskDeclaration) -> str:
    """Its fields as one JSON object, in field order (``decode_declaration`` reads it back)."""
    return json.dumps(asdict(declaration), separators=(",", ":"))


def decode_declaration(text: str) -> TaskDeclaration:
    data = json.loads(text)
    return TaskDeclaration(
        name=str(data["name"]),
        queue=str(data["queue"]),
        priority=int(data["priority"]),
        expires=None if data.get("expires") is None else float(data["expires"]),
        max_retries=int(data["max_retries"]),
        timeout=None if data.get("timeout") is None else float(data["timeout"]),
        retention=float(data["retention"]),
        declared_at=float(data.get("declared_at", 0.0)),
        unique_for=None if data.get("unique_for") is None else float(data["unique_for"]),  # older workers publish none
    )
