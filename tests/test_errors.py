"""Every error class chooses: a ``UserError`` (the CLI prints its message and exits with its code) or one of the few
internal errors listed here; and the CLI's one handler maps a ``UserError`` to its message and exit code while a
bug keeps its traceback.

Run: python -m pytest tests/test_errors.py -q
"""

import importlib
import os
import pkgutil
import signal

import pytest
from typer.testing import CliRunner

import ftis.node
import ftis.protocol
from ftis.node.cli import app
from ftis.node.config import ConfigError
from ftis.node.dashboard.server import DashboardError
from ftis.node.demo.launch import DemoError
from ftis.node.errors import FAILURE, USAGE, UsageError, UserError
from ftis.node.experiment.grid import GridError
from ftis.node.runner.folders import FolderError, check_node_folders
from ftis.protocol import DecodeError

OPTIONAL = {"vllm"}  # a module that needs an extra the test environment may lack is skipped, nothing else

# Errors that no user or peer input can cause, or that never reach a command: a bug, or the program's own flow.
INTERNAL = {
    # the base of a peer's DecodeError (a UserError) and of this node's own EncodeError
    "ftis.protocol.errors.ProtocolError",
    # this node's own batch cannot be encoded (a positive log-prob, a non-string text): a bug upstream
    "ftis.protocol.errors.EncodeError",
    # the demo's own settings hold a value TOML cannot: a bug
    "ftis.node.demo.toml_file.TomlWriteError",
    # a node of the in-process experiment stopped because another failed; that other error is the one raised
    "ftis.node.experiment.lockstep.LockstepError",
    # flow: a checkpoint asked for inside an optimizer step; the checkpointer catches it and saves no round
    "ftis.node.runner.node.RoundInterrupted",
    # hivemind's process dropped a DHT call: counted and retried by the announcer and the poller
    "ftis.node.swarm.dht.calls.DHTCallLost",
    # a peer's payload refused for a reason: caught and counted by the transport, never raised to a command
    "ftis.node.swarm.exchange.payload.Rejected",
    # a dashboard request's head too slow or too large: answered 408 or 431 by the server, never raised further
    "ftis.node.dashboard.heads.HeadRefused",
    # flow: the step's scoring time ran out mid-group; the scorer catches it and leaves the rest unscored
    "ftis.node.intake.scoring._OutOfTime",
}

# Exit codes: a command given something it cannot use exits with USAGE; every other UserError with FAILURE.
USAGE_ERRORS = {ConfigError, DashboardError, GridError, UsageError}


def error_classes() -> dict[str, type[Exception]]:
    """Every exception class (warnings aside) defined at the top level of a module of ftis.node or ftis.protocol."""
    found = {}
    for package in (ftis.protocol, ftis.node):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            try:
                module = importlib.import_module(info.name)
            except ModuleNotFoundError as error:
                if (error.name or "").split(".")[0] not in OPTIONAL:
                    raise
                continue
            for value in vars(module).values():
                if (isinstance(value, type) and issubclass(value, Exception) and not issubclass(value, Warning)
                        and value.__module__ == module.__name__):
                    found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_error_class_is_a_user_error_or_listed_as_internal():
    classes = error_classes()
    assert len(classes) > 30  # the walk found the package's errors
    unclassified = sorted(name for name, cls in classes.items() if not issubclass(cls, UserError)
                          and name not in INTERNAL)
    assert not unclassified, f"give these UserError as a base, or list them in INTERNAL with why: {unclassified}"
    assert not [name for name in INTERNAL if name not in classes], "INTERNAL names a class that no longer exists"
    assert not [name for name in INTERNAL if issubclass(classes[name], UserError)]


def test_each_user_error_has_the_exit_code_of_its_kind():
    for name, cls in error_classes().items():
        if issubclass(cls, UserError):
            expected = USAGE if any(issubclass(cls, usage) for usage in USAGE_ERRORS) else FAILURE
            assert cls.exit_code == expected, name


def test_a_user_error_keeps_its_other_bases():
    error = ConfigError("bad.toml: model.nmae: Extra inputs are not permitted")
    assert isinstance(error, ValueError) and isinstance(error, UserError)
    decode = DecodeError("payload", "truncated")
    assert isinstance(decode, ValueError) and isinstance(decode, UserError) and str(decode) == "payload: truncated"
    assert (decode.field, decode.exit_code) == ("payload", FAILURE)


# --- the CLI's one handler ------------------------------------------------------------------------------------


@pytest.fixture
def runner():
    """A CliRunner; the signal handlers the long-running commands install in this process are put back."""
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    yield CliRunner()
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def test_a_config_file_with_a_bad_key_prints_one_error_line_and_exits_2(runner, tmp_path):
    config = tmp_path / "node.toml"
    config.write_text('[model]\nnmae = "tiny-small"\n')
    result = runner.invoke(app, ["join", "--config", str(config), "--out", str(tmp_path / "out")])
    assert result.exit_code == USAGE, result.output
    assert result.stderr == f"error: {config}: model.nmae: Extra inputs are not permitted\n"
    assert result.stdout == ""


def test_a_bad_model_path_exits_1_with_its_reason(runner, tmp_path):
    missing = tmp_path / "no-such-model"
    result = runner.invoke(app, ["join", "--model", str(missing), "--out", str(tmp_path / "out"), "--rounds", "1"])
    assert result.exit_code == FAILURE, result.output
    assert result.stderr.startswith("error: ") and str(missing) in result.stderr
    assert isinstance(result.exception, SystemExit)  # a clean exit, nothing escaping


def test_options_that_do_not_validate_print_one_error_line_each(runner, tmp_path):
    result = runner.invoke(app, ["join", "--display", "fancy", "--run-id", "no spaces", "--out", str(tmp_path)])
    assert result.exit_code == USAGE, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("error: ") for line in lines), lines
    assert any("swarm.run_id" in line for line in lines) and any("metrics.display" in line for line in lines)


class Refused(UserError):
    exit_code = 7


@pytest.mark.parametrize(("error", "code"), [(Refused("refused: the folder holds another run"), 7),
                                            (UserError("refused: the folder holds another run"), FAILURE)])
def test_a_user_error_a_command_raises_becomes_its_message_and_exit_code(runner, tmp_path, monkeypatch, error, code):
    def refuse(*_args, **_kwargs):
        raise error

    monkeypatch.setattr("ftis.node.runner.join.build_node", refuse)
    result = runner.invoke(app, ["join", "--out", str(tmp_path / "out")])
    assert result.exit_code == code, result.output
    assert result.stderr == "error: refused: the folder holds another run\n"


@pytest.mark.parametrize("bug", [RuntimeError("a bug"), ValueError("a bug"), KeyError("a bug")])
def test_an_error_that_is_not_a_user_error_is_not_swallowed(runner, tmp_path, monkeypatch, bug):
    def broken(*_args, **_kwargs):
        raise bug

    monkeypatch.setattr("ftis.node.runner.join.build_node", broken)
    result = runner.invoke(app, ["join", "--out", str(tmp_path / "out")])
    assert result.exception is bug  # escapes the command: a traceback, not an error line
    assert "error: " not in result.stderr


def test_ctrl_c_prints_what_stopped_and_the_command_s_exit_code(runner, tmp_path, monkeypatch):
    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("ftis.node.runner.join.build_node", interrupted)
    joined = runner.invoke(app, ["join", "--out", str(tmp_path / "node")])
    assert (joined.exit_code, joined.stdout) == (0, "stopped: the DHT and p2pd are shut down\n")
    monkeypatch.setattr("ftis.node.experiment.runner.run_experiment", interrupted)
    out = tmp_path / "grid"
    experiment = runner.invoke(app, ["experiment", "--quick", "--out", str(out)])
    assert experiment.exit_code == 130, experiment.output
    assert experiment.stdout.endswith(f"stopped: finished cells are kept in {out}; run the same command again to "
                                      "continue\n")


@pytest.mark.parametrize(("error", "code", "stderr"), [
    (DemoError("node small exited with status 1"), FAILURE,
     "error: node small exited with status 1\nstopped: every process the demo started has ended\n"),
    (ConfigError("demo.toml: nodes: between 1 and 8 nodes"), USAGE,  # refused before anything started
     "error: demo.toml: nodes: between 1 and 8 nodes\n"),
])
def test_the_demo_says_its_processes_ended_after_a_failure_not_after_a_usage_error(runner, monkeypatch, error, code,
                                                                                     stderr):
    def failing(*_args, **_kwargs):
        raise error

    monkeypatch.setattr("ftis.node.demo.run.run_demo", failing)
    result = runner.invoke(app, ["demo"])
    assert (result.exit_code, result.stderr) == (code, stderr), result.output


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes any folder")
def test_a_node_folder_it_cannot_write_is_refused_before_anything_starts(tmp_path):
    locked = tmp_path / "mount"
    locked.mkdir()
    locked.chmod(0o555)
    with pytest.raises(FolderError, match=r"cannot write the node folder .*mount/run: Permission denied.*chown -R"):
        check_node_folders(locked / "run", None)


def test_a_node_folder_under_a_file_is_refused_and_an_identity_folder_is_checked_only_for_a_new_key(tmp_path):
    blocker = tmp_path / "runs"
    blocker.write_text("not a folder")
    with pytest.raises(FolderError, match="cannot write the node folder"):
        check_node_folders(blocker / "small", None)
    key = tmp_path / "identity" / "node.key"
    check_node_folders(tmp_path / "out", key)
    assert (tmp_path / "out").is_dir() and key.parent.is_dir() and not key.exists()
    assert not list((tmp_path / "out").iterdir()) and not list(key.parent.iterdir())  # the probes are gone
    with pytest.raises(FolderError, match="the identity file's folder"):
        check_node_folders(tmp_path / "out", blocker / "node.key")
    existing = tmp_path / "given.key"
    existing.write_bytes(b"k")
    check_node_folders(tmp_path / "out", existing)  # an existing key is only read
