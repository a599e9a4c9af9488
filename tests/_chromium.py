"""Headless Chromium screenshots for the tests of pages people look at (the HTML report, the
providers' browse page): one way to run it and one way to read the PNG it writes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"

needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"{CHROMIUM} is not installed (apt-get install chromium); .ci/run installs it",
)
"""Skip (saying why) where Debian's chromium package is absent; CI installs it."""

Colours = list[tuple[int, tuple[int, int, int]]]


def screenshot(target: str, png: Path, *, size: tuple[int, int], profile: Path) -> str:
    """Render ``target`` (a URL) to ``png`` at ``size``; returns Chromium's stderr tail so a
    failed assertion says why. ``profile`` is a throwaway user-data dir (no shared state)."""
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            f"--screenshot={png}",
            f"--window-size={size[0]},{size[1]}",
            target,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    keep = os.environ.get("CRASH_HARNESS_SCREENSHOT_DIR")
    if keep and png.exists():
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(png, Path(keep) / png.name)
    return proc.stderr[-2000:]


def png_colours(path: Path) -> tuple[tuple[int, int], Colours]:
    """(width, height) and every distinct RGB colour with its pixel count."""
    from PIL import Image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    with Image.open(path) as img:
        rgb = img.convert("RGB")
        size = rgb.size
        counts = rgb.getcolors(maxcolors=size[0] * size[1]) or []
    return size, counts


def inked_share(size: tuple[int, int], counts: Colours) -> float:
    """Share of pixels that are not the page background (white or near-white #fafafa)."""
    background = sum(n for n, c in counts if c in ((255, 255, 255), (250, 250, 250)))
    return 1 - background / (size[0] * size[1])
