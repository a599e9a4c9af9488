"""A wheel of this checkout, installed into a virtualenv that has never seen the repo.

Why: an editable install hides packaging mistakes (a module, a data file or an entry point left
out of the wheel, an import of something only the dev venv has). The tests that matter to a
new user run the installed copy from a folder outside the repo, so only what the wheel carries
can answer. Built once per session (``fresh_venv`` in ``conftest.py``) because it is the slow
part: ~10 s for the wheel, ~30 s for the install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: what ``pyproject.toml`` packages (``[tool.setuptools.packages.find]``) plus what it reads
_SOURCES = ("harness", "fake_providers")
_FILES = ("pyproject.toml", "README.md")


@dataclass(frozen=True)
class FreshVenv:
    """A virtualenv holding the project's wheel (and pytest), nothing from the checkout."""

    root: Path
    wheel: Path
    build_s: float
    install_s: float
    size_bytes: int
    #: built by another xdist worker of the same run (its timings are that worker's)
    shared: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "root": str(self.root),
            "wheel": str(self.wheel),
            "build_s": self.build_s,
            "install_s": self.install_s,
            "size_bytes": self.size_bytes,
        }

    @classmethod
    def from_json(cls, data: dict[str, object], *, shared: bool) -> FreshVenv:
        return cls(
            Path(str(data["root"])),
            Path(str(data["wheel"])),
            float(data["build_s"]),  # type: ignore[arg-type]
            float(data["install_s"]),  # type: ignore[arg-type]
            int(data["size_bytes"]),  # type: ignore[call-overload]
            shared=shared,
        )

    def bin(self, name: str) -> Path:
        """A console script (or the interpreter) of this venv."""
        return self.root / "bin" / name

    def env(self, **extra: str) -> dict[str, str]:
        """The caller's environment minus what would leak the repo or the outer test run in
        (``PYTHONPATH``, ``PYTEST_ADDOPTS``, the harness's own settings), with this venv's
        ``bin`` first on ``PATH`` so a printed ``crash-harness ...`` line runs this copy."""
        keep = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYTEST_", "PYTHON", "CRASH_HARNESS_", "VIRTUAL_ENV"))
        }
        keep["PATH"] = f"{self.root / 'bin'}{os.pathsep}{keep.get('PATH', '')}"
        return {**keep, **extra}


def tree_size(path: Path) -> int:
    """Bytes in regular files under ``path`` (symlinks not followed, not counted twice)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            p = Path(dirpath, name)
            if not p.is_symlink():
                total += p.stat().st_size
    return total


def build_fresh_venv(where: Path) -> FreshVenv:
    """Copy the packaged sources out of the checkout (so the build leaves no ``build/`` in it),
    build a wheel with pip, and install it into a new venv with pytest (the plugin's host)."""
    source = where / "crash-harness-src"
    source.mkdir(parents=True)
    for name in _SOURCES:
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in _FILES:
        shutil.copy(ROOT / name, source / name)
    wheels = where / "wheels"
    started = time.monotonic()
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    build_s = time.monotonic() - started
    (wheel,) = wheels.glob("crash_harness-*.whl")

    venv = where / "venv"
    started = time.monotonic()
    # no pip of its own: the dev venv's pip installs into it (``--python``), a few seconds
    # saved on ensurepip; nothing of the dev venv's site-packages goes with it
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    install = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")),
            *("install", "-q", str(wheel), "pytest"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    install_s = time.monotonic() - started
    return FreshVenv(venv, wheel, build_s, install_s, tree_size(venv))
