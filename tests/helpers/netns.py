"""The NAT topology of ``benchmarks/netns.py`` for tests: ``require_netns`` skips a test where this machine cannot
build it, or fails it under ``FTIS_REQUIRE_NETNS=1`` (``.ci/run`` sets it, so CI cannot pass by skipping);
``require_miniupnpd`` the same for a router that offers UPnP and NAT-PMP (``Miniupnpd``)."""

import os

import pytest

from benchmarks.netns import HOME_IP, PUBLIC_IP, ROUTER_PUBLIC_IP, Miniupnpd, Nat, cannot_build, cannot_run_miniupnpd

__all__ = ["HOME_IP", "PUBLIC_IP", "REQUIRE", "ROUTER_PUBLIC_IP", "Miniupnpd", "Nat", "require_miniupnpd",
           "require_netns"]

REQUIRE = "FTIS_REQUIRE_NETNS"


def require_netns() -> None:
    """Skips the calling test where namespaces cannot be built, or fails it under ``FTIS_REQUIRE_NETNS=1``."""
    _require(cannot_build())


def require_miniupnpd() -> None:
    """Skips the calling test where ``miniupnpd`` cannot run, or fails it under ``FTIS_REQUIRE_NETNS=1``."""
    _require(cannot_run_miniupnpd())


def _require(reason: str | None) -> None:
    if reason is None:
        return
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{reason} ({REQUIRE}=1)")
    pytest.skip(reason)
