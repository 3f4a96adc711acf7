"""The command line: instant help without heavy imports, version, and inspect of good and bad files."""

import subprocess
import sys
import tracemalloc

import pytest
from helpers.hostile_peer import text_bomb
from helpers.msgpack_bombs import wide
from helpers.swarm import make_batch
from typer.testing import CliRunner

from ftis.node.cli import app
from ftis.node.errors import FAILURE
from ftis.protocol import PROTOCOL_VERSION, encode

runner = CliRunner()


def _batch():
    """A valid batch of peer ``peer-a``: 2 groups of 4 completions of a tiny-small policy at version 3."""
    return make_batch("peer-a", 5, model="tiny-small", policy_version=3, groups=2, group_size=4)


def test_help_imports_neither_torch_nor_hivemind():
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from ftis.node.cli import app\n"
        "result = CliRunner().invoke(app, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "assert 'inspect' in result.output\n"
        "heavy = [m for m in ('torch', 'hivemind', 'transformers', 'vllm') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_version_names_package_and_protocol():
    result = runner.invoke(app, ["version"])
    assert result.exit_code == 0
    assert result.output.startswith("ftis-node ")
    assert f"protocol v{PROTOCOL_VERSION}" in result.output


def test_inspect_summarizes_a_batch(tmp_path):
    path = tmp_path / "batch.msgpack"
    batch = _batch()
    data = encode(batch)
    tokens = sum(c.num_tokens for group in batch.groups for c in group.completions)
    path.write_bytes(data)
    result = runner.invoke(app, ["inspect", str(path)])
    assert result.exit_code == 0, result.output
    assert "peer-a" in result.output
    assert "tiny-small (full), version 3" in result.output
    assert "2 (sizes: 4 (×2))" in result.output
    assert f"{tokens} completion + {batch.num_prompt_tokens} prompt" in result.output
    assert f"{len(data)} ({len(data) / tokens:.2f} per completion token)" in result.output


def test_inspect_reports_the_typed_error_for_a_bad_batch(tmp_path):
    path = tmp_path / "truncated.msgpack"
    path.write_bytes(encode(_batch())[:-10])
    result = runner.invoke(app, ["inspect", str(path)])
    assert result.exit_code == 1
    assert "is not a valid batch: payload:" in result.output


def test_inspect_weighs_a_decompression_bomb_before_inflating_it(tmp_path):
    """26 KB declaring ~2.7 GB to inflate: refused at the default bound, with the figure, and nothing inflated."""
    path = tmp_path / "bomb.msgpack"
    path.write_bytes(text_bomb("peer-a", "run", 0, 1.7e9, "sha256:fp"))
    tracemalloc.start()
    try:
        result = runner.invoke(app, ["inspect", str(path)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.exit_code == 1
    assert "is a valid batch whose columns take up to 2,721 MB to inflate, over --max-memory-mb 1024" in result.output
    assert peak < 16 * 2**20
    small = tmp_path / "batch.msgpack"
    small.write_bytes(encode(_batch()))
    assert runner.invoke(app, ["inspect", str(small), "--max-memory-mb", "1"]).exit_code == 0


@pytest.mark.parametrize("mib", [16, 64])
def test_inspect_refuses_nested_empty_arrays_from_their_headers(tmp_path, mib):
    """A file of nested empty arrays (1 byte each, a ~60-byte object each once unpacked: ~1.2 GB for 16 MiB) is
    refused before any is built: inspect holds the file's bytes and little more, far under its memory guard."""
    path = tmp_path / "nested.msgpack"
    path.write_bytes(wide(mib * 2**20 - 4096))
    tracemalloc.start()
    try:
        result = runner.invoke(app, ["inspect", str(path)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < path.stat().st_size + 2**20, f"{peak:,} bytes at the peak"
    assert result.exit_code == FAILURE, result.output
    assert "is not a valid batch: payload: holds more than" in result.output


def test_inspect_of_a_missing_file_says_so(tmp_path):
    result = runner.invoke(app, ["inspect", str(tmp_path / "nope.msgpack")])
    assert result.exit_code == 2
    assert "cannot read" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "/no/such/model/folder"], "/no/such/model/folder"),
        (["--model", "tiny-small", "--task", "no-such-task"], "task"),
    ],
)
def test_join_with_a_bad_model_or_task_exits_with_an_error_line(args, message, tmp_path):
    result = runner.invoke(app, ["join", *args, "--out", str(tmp_path / "out"), "--rounds", "1"])
    assert result.exit_code in (1, 2), result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert any(line.startswith("error: ") and message in line for line in result.stderr.splitlines()), result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--peer", "garbage"], "'garbage' is not a multiaddr"),
        (["--peer", "/ip4/127.0.0.1/tcp/31337"], "names no peer"),  # no /p2p/<id>: nobody to ask
        (["--host-maddrs", "/ip4/999.0.0.1/tcp/0"], "is not a multiaddr"),
    ],
)
def test_join_refuses_a_bad_address_before_loading_a_model_or_starting_a_daemon(args, message, tmp_path,
                                                                                 monkeypatch):
    def never(*_args, **_kwargs):
        raise AssertionError("the node was built")

    monkeypatch.setattr("ftis.node.runner.join.build_node", never)
    result = runner.invoke(app, ["join", *args, "--out", str(tmp_path / "out"), "--rounds", "1"])
    assert result.exit_code == 2, result.output
    assert any(line.startswith("error: ") and message in line for line in result.stderr.splitlines()), result.stderr


def test_join_refuses_chat_template_on_for_a_model_without_one_before_joining(tmp_path):
    config = tmp_path / "node.toml"
    config.write_text('[model]\nname = "tiny-small"\nchat_template = "on"\n')
    result = runner.invoke(app, ["join", "--config", str(config), "--out", str(tmp_path / "out"), "--rounds", "1"])
    assert result.exit_code == 1, result.output
    assert any(line.startswith("error: ") and "chat template" in line for line in result.stderr.splitlines())


def test_join_lora_options_reach_the_config(tmp_path, monkeypatch):
    """--lora-rank and --lora-alpha override the config file's model section (checked where the node is built)."""
    from ftis.node.runner import join

    seen = {}

    def fake_build_node(config, echo=None):
        seen["model"] = config.model
        raise KeyboardInterrupt  # stop before anything is started

    monkeypatch.setattr(join, "build_node", fake_build_node)
    result = runner.invoke(app, ["join", "--adapter", "lora", "--lora-rank", "16", "--lora-alpha", "8",
                                 "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert (seen["model"].adapter, seen["model"].lora_rank, seen["model"].lora_alpha) == ("lora", 16, 8.0)


@pytest.mark.parametrize(("table", "error"), [
    ("[swarm]\nrelay_max_reservations = 0\n", "relay_max_reservations: Input should be greater than or equal to 1"),
    ("[swarm]\nrelay_slots = 3\n", "relay_slots: Extra inputs are not permitted"),
    ("[node]\nrounds = 3\n", "a bootstrap reads only a [swarm] table"),
    ("[swarm\n", "not valid TOML"),
])
def test_a_bootstraps_config_file_is_checked_before_it_starts(tmp_path, table, error):
    path = tmp_path / "bootstrap.toml"
    path.write_text(table)
    result = runner.invoke(app, ["bootstrap", "--config", str(path)])
    assert result.exit_code == 2 and error in result.output, result.output



def test_join_with_a_known_real_model_brings_its_prompt_settings_and_a_config_file_still_chooses(tmp_path,
                                                                                                  monkeypatch):
    """``join --model smollm2-135m-instruct`` answers in its task's format without settings (checked where the node
    is built, before any model is loaded); with a --config, the file's settings stand."""
    from ftis.node.runner import join

    seen = []

    def fake_build_node(config, echo=None):
        seen.append(config)
        raise KeyboardInterrupt  # stop before anything is started

    monkeypatch.setattr(join, "build_node", fake_build_node)
    result = runner.invoke(app, ["join", "--model", "smollm2-135m-instruct", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "smollm2-135m-instruct on arithmetic: 8 solved examples" in result.output
    known = seen[-1]
    assert (known.task.few_shot, known.model.chat_template, known.generation.stop,
            known.generation.max_new_tokens) == (8, "off", ["\n"], 8)
    config = tmp_path / "node.toml"
    config.write_text('[model]\nname = "smollm2-135m-instruct"\n')
    result = runner.invoke(app, ["join", "--config", str(config), "--out", str(tmp_path / "out2")])
    assert result.exit_code == 0, result.output
    mine = seen[-1]
    assert (mine.task.few_shot, mine.model.chat_template, mine.generation.stop) == (0, "auto", [])
    result = runner.invoke(app, ["join", "--model", "tiny-small", "--out", str(tmp_path / "out3")])
    assert seen[-1].generation.max_new_tokens == 256 and "solved examples" not in result.output
