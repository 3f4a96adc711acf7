"""Headless Chromium (Debian's ``chromium`` package) for the dashboard's browser test (marker ``browser``).

``require_browser()`` skips the calling test where no Chromium is installed, or fails it under
``FTIS_REQUIRE_BROWSER=1`` (``.ci/run`` installs Chromium and sets it). ``dump_dom`` is the page's document
once its scripts have run, ``screenshot`` a PNG of it; each run gets a profile folder of its own, so runs
at once do not meet.
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REQUIRE = "FTIS_REQUIRE_BROWSER"
_NAMES = ("chromium", "chromium-browser")
_TIMEOUT_S = 60.0  # one headless run; a few seconds when the machine is not loaded


def chromium() -> str | None:
    for name in _NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def require_browser() -> str:
    """Chromium's path; skips the calling test without it, or fails it under ``FTIS_REQUIRE_BROWSER=1``."""
    found = chromium()
    if found is not None:
        return found
    reason = "no chromium on PATH (Debian: apt-get install chromium)"
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{reason} ({REQUIRE}=1)")
    pytest.skip(reason)


def _run(url: str, *flags: str, budget_ms: int) -> subprocess.CompletedProcess:
    """Chromium on ``url``, with ``budget_ms`` of virtual time for the page's scripts, timers and fetches."""
    with tempfile.TemporaryDirectory(prefix="ftis-chromium-") as profile:
        args = [require_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
                f"--virtual-time-budget={budget_ms}", *flags, url]
        done = subprocess.run(args, capture_output=True, text=True, timeout=_TIMEOUT_S)
    assert done.returncode == 0, f"chromium exited with {done.returncode}:\n{done.stderr[-3000:]}"
    return done


def dump_dom(url: str, budget_ms: int = 4000) -> str:
    """The page's DOM, serialised, after ``budget_ms`` of virtual time."""
    return _run(url, "--dump-dom", budget_ms=budget_ms).stdout


def screenshot(url: str, path: Path, width: int = 1300, height: int = 1700, budget_ms: int = 4000) -> Path:
    _run(url, f"--screenshot={path}", f"--window-size={width},{height}", "--hide-scrollbars", budget_ms=budget_ms)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is no PNG"
    return path
