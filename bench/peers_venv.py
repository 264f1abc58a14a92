"""The peers' virtualenv: ``bench/.venv-peers``, created with ``python -m venv`` + pip from the pins."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

__all__ = ["ensure_peers_venv", "installed_versions"]

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "peers" / "requirements.txt"
VENV = HERE / ".venv-peers"


def ensure_peers_venv(venv: Path = VENV) -> Path:
    """Create (or update) the venv so it holds exactly the pinned versions; returns its python."""
    python = venv / "bin" / "python"
    stamp = venv / ".requirements"
    wanted = REQUIREMENTS.read_text()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=True)
    stamp.write_text(wanted)
    return python


def installed_versions(python: Path) -> dict[str, str]:
    """Versions of the pinned distributions as installed in that venv."""
    names = [line.split("==")[0].split("[")[0] for line in REQUIREMENTS.read_text().splitlines() if "==" in line]
    code = "import json, sys, importlib.metadata as m\nprint(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    out = subprocess.run([str(python), "-c", code, *names], capture_output=True, text=True, check=True)
    versions: dict[str, str] = json.loads(out.stdout)
    return versions
