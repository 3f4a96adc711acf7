"""Process hygiene for the tests that start real hivemind peers (marker ``hivemind``).

A hivemind ``DHT`` is a forked child process that starts its own ``p2pd``; a host killed with
SIGKILL (or a test that fails half-way) leaves both running as orphans, which are no longer our
children (docs/swarm.md). To find them anyway, this session puts a fresh token in its environment
before anything starts: every process it starts, and everything those start (``p2pd`` included),
inherits it. After each module that holds ``hivemind`` tests, the ``p2pd`` and Python processes
carrying the token (or descending from this process) are killed, and a warning names them: a
clean module leaves nothing, so anything found is a leak worth seeing.
"""

import os
import time
import uuid
import warnings

import psutil
import pytest

REAP_TOKEN = "FTIS_TEST_REAP_TOKEN"


def pytest_configure(config: pytest.Config) -> None:
    # Always a new token: a pytest started by a test must not reap the outer session's processes.
    os.environ[REAP_TOKEN] = uuid.uuid4().hex


def stray_processes() -> list[psutil.Process]:
    """``p2pd`` and Python processes this session started, at any depth, orphans included.

    Python ones are the forked DHT processes and helper scripts (same interpreter as ours); other
    children, such as torch's ``torch_shm_manager``, belong to this process's own lifetime.
    """
    me = psutil.Process()
    token, python = os.environ[REAP_TOKEN], me.exe()
    found = {p.pid: p for p in me.children(recursive=True)}
    for process in psutil.process_iter():
        if process.pid == me.pid or process.pid in found:
            continue
        try:
            if process.environ().get(REAP_TOKEN) == token:
                found[process.pid] = process
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue  # another user's process, or gone already
    strays = []
    for process in found.values():
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue  # exited already; its parent collects it
            if process.name() == "p2pd" or (process.exe() == python and not _is_resource_tracker(process)):
                strays.append(process)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return strays


def _is_resource_tracker(process: psutil.Process) -> bool:
    """multiprocessing's helper: serves this process until it exits, and is relaunched if killed."""
    return any("resource_tracker" in part or "forkserver" in part for part in process.cmdline())


def reap(processes: list[psutil.Process], timeout: float = 5.0) -> list[str]:
    """SIGKILL ``processes`` and wait until they are dead; returns a description of each one killed."""
    me = os.getpid()
    killed, ours = [], []
    for process in processes:
        try:
            description = f"{process.name()} (pid {process.pid})"
            if process.ppid() == me:
                ours.append(process)
            process.kill()
            killed.append(description)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    psutil.wait_procs(ours, timeout=timeout)  # our own children: collected here, no zombies left
    # Orphans are reaped by their new parent (PID 1) in its own time; a zombie is dead enough.
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.02)
    return killed


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module", autouse=True)
def _reap_hivemind_processes(request: pytest.FixtureRequest):
    """After a module with ``hivemind`` tests (and all its fixtures) ends, nothing it started runs on.

    Autouse for every module but a no-op unless the module holds a ``hivemind`` item; as an autouse
    module fixture it is set up first, so it is torn down after the module's own swarm fixtures.
    """
    items = [item for item in request.session.items if getattr(item, "module", None) is request.module]
    if not any(item.get_closest_marker("hivemind") for item in items):
        yield
        return
    yield
    killed = reap(stray_processes())
    if killed:
        warnings.warn(f"{request.module.__name__} left processes running; killed: {', '.join(killed)}",
                      stacklevel=1)


def pytest_sessionfinish(session: pytest.Session) -> None:
    reap(stray_processes())  # a last sweep, in case a module ended abnormally


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """Tiny models on a 2-core machine run several times faster on one thread than on torch's default
    (threads contend with each other and with the other tests' processes); every test gets one."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
