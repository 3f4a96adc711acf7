"""The demo's settings: the packaged file describes the swarm docs/demo.md promises, node tables merge over
[common], bad files are refused before anything starts, and each node's file round-trips through TOML."""

import signal
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ftis.node.cli import app
from ftis.node.config import ConfigError, load_config, merged
from ftis.node.demo.launch import LOOPBACK, DemoError, join_args, write_node_config
from ftis.node.demo.run import DemoRequest, _with_overrides, run_demo
from ftis.node.demo.settings import load_demo_config
from ftis.node.demo.toml_file import TomlWriteError, dumps


def test_the_packaged_demo_is_three_heterogeneous_tiny_nodes_on_arithmetic():
    config = load_demo_config()
    nodes = config.node_configs()
    assert len(nodes) == 3
    assert len({node.model.name for node in nodes.values()}) >= 2  # different sizes
    assert [node.model.adapter for node in nodes.values()].count("lora") == 1
    assert all(node.model.name.startswith("tiny-") for node in nodes.values())  # one shared tokenizer
    assert all(node.task == nodes["small"].task for node in nodes.values())  # they score each other's groups
    assert all(node.task.name == "arithmetic" and node.model.warmup.steps > 0 for node in nodes.values())
    assert all(node.loop.mode == "rounds" and node.loop.min_peers == 2 for node in nodes.values())
    assert all(node.eval.every > 0 for node in nodes.values())
    assert all(node.trainer.learning_rate <= 3e-4 for node in nodes.values())  # 1e-3 collapsed the tiny models
    assert config.demo.rounds >= 20 and config.demo.threads_per_node == 1


DEMO_EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("demo-*.toml"))


@pytest.mark.parametrize("path", DEMO_EXAMPLES, ids=lambda path: path.name)
def test_every_example_demo_loads(path):
    assert load_demo_config(path).node_configs()


def test_the_tokenizers_demo_is_a_character_node_and_a_bpe_node_on_one_task():
    from ftis.node.models import build_tiny_tokenizer, tokenizer_fingerprint

    path = Path(__file__).resolve().parent.parent / "examples" / "demo-tokenizers.toml"
    nodes = load_demo_config(path).node_configs()
    assert [node.model.name for node in nodes.values()] == ["tiny-small", "tiny-small-bpe"]
    assert len({tokenizer_fingerprint(build_tiny_tokenizer(node.model.name)) for node in nodes.values()}) == 2
    assert nodes["small"].task == nodes["small-bpe"].task  # each scores the other's completions
    assert all(node.loop.mode == "rounds" and node.loop.min_peers == 1 for node in nodes.values())
    assert nodes["small"].model.warmup == nodes["small-bpe"].model.warmup


def test_node_tables_merge_over_common_key_by_key():
    assert merged({"model": {"name": "a", "warmup": {"steps": 5}}, "x": 1},
                  {"model": {"warmup": {"batch_size": 2}}, "x": 2}) == {
        "model": {"name": "a", "warmup": {"steps": 5, "batch_size": 2}}, "x": 2}


def write(tmp_path, text: str):
    path = tmp_path / "demo.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "says"), [
    ("[nodes.a]\nmodel = { name = 'tiny-small' }\n[nodes.a.swarm]\nrun_id = 'x'\n", "set by the demo"),
    ("[nodes.Big_Node]\nmodel = { name = 'tiny-small' }\n", "node name"),
    ("[nodes.a]\ngeneration = { group_size = 0 }\n", "nodes.a: generation.group_size"),
    ("[nodes.a]\nunknown = 1\n", "nodes.a: unknown"),
    ("[demo]\nrounds = 0\n[nodes.a]\n", "demo.rounds"),
    ("[nodes]\n", "between 1 and 8 nodes"),
    ("[nodes.a\n", "not valid TOML"),
])
def test_bad_demo_files_are_refused_with_the_place(tmp_path, text, says):
    with pytest.raises(ConfigError, match=says):
        load_demo_config(write(tmp_path, text))


def test_command_line_overrides_rounds_and_solo():
    assert load_demo_config().demo.solo  # the packaged demo compares with solo runs
    config = _with_overrides(load_demo_config(), DemoRequest(rounds=3, solo=False))
    assert (config.demo.rounds, config.demo.solo) == (3, False)
    assert _with_overrides(config, DemoRequest()) == config


def test_each_nodes_file_is_a_valid_node_config_joined_to_the_bootstrap(tmp_path):
    config = load_demo_config()
    maddr = "/ip4/127.0.0.1/tcp/4242/p2p/QmTkE4a7nvYSc1yUXpT54EuJ9HioRfWSseK7pedhojN5RW"
    for name, settings in config.node_settings().items():
        path = write_node_config(tmp_path / name, settings, "demo-run", maddr)
        node = load_config(path)
        assert node == config.node_configs()[name].model_copy(update={"swarm": node.swarm})
        assert (node.swarm.run_id, node.swarm.initial_peers, node.swarm.host_maddrs) == ("demo-run", [maddr],
                                                                                        [LOOPBACK])
    solo = load_config(write_node_config(tmp_path / "solo", config.node_settings()["small"], "solo-run", maddr,
                                         over={"loop": {"mode": "async", "min_peers": 0}, "eval": {"at_start": False}}))
    assert (solo.loop.mode, solo.loop.min_peers, solo.swarm.run_id) == ("async", 0, "solo-run")
    assert not solo.eval.at_start and solo.eval.every == config.node_configs()["small"].eval.every
    args = join_args(path, maddr, tmp_path / "x", rounds=7)
    assert args[args.index("--rounds") + 1] == "7" and args[args.index("--peer") + 1] == maddr


def test_toml_writer_round_trips_and_refuses_what_toml_cannot_hold():
    data = {"a": 1, "b": {"c": "quote \" and \\ and é", "d": [1.5, 1e-06, float("inf")], "e": {"f": True}},
            "weird key": False}
    assert tomllib.loads(dumps(data)) == data
    with pytest.raises(TomlWriteError, match=r"b\.c"):
        dumps({"b": {"c": None}})


def test_the_command_refuses_a_bad_file_before_starting_anything(tmp_path):
    previous = signal.getsignal(signal.SIGTERM)  # the command installs its SIGTERM handler in this process
    try:
        result = CliRunner().invoke(app, ["demo", "--config", str(write(tmp_path, "[nodes]\n")), "--out",
                                          str(tmp_path / "out")])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert result.exit_code == 2, result.output
    assert "between 1 and 8 nodes" in result.output
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_not_empty_is_refused(tmp_path):
    (tmp_path / "earlier.txt").write_text("an earlier run")
    with pytest.raises(DemoError, match="not empty"):
        run_demo(DemoRequest(out=tmp_path), echo=lambda line: None)
