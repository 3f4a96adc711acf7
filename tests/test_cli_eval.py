"""``ftis-node eval``: a tiny model by name, an export folder written here, a local GSM8K file, a node's
config, ``--json`` and ``--records``, and the error paths (clear message, exit 2 or 1, no traceback)."""

import json

import pytest
import torch
from typer.testing import CliRunner

from ftis.node.cli import app
from ftis.node.evaluation.evaluation import evaluate
from ftis.node.models import export_policy, load_policy
from ftis.node.tasks import ArithmeticTask

runner = CliRunner()


def _eval(*args: str):
    return runner.invoke(app, ["eval", *args])


def test_a_tiny_model_by_name_with_json():
    result = _eval("--model", "tiny-small", "--task", "arithmetic", "--limit", "3", "--max-new-tokens", "3", "--json")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.stdout)  # standard output holds the JSON alone; progress went to stderr
    expected = evaluate(load_policy("tiny-small"), ArithmeticTask(), "test", limit=3, max_new_tokens=3)
    assert (facts["dataset"], facts["split"], facts["total"]) == (ArithmeticTask().name, "test", 3)
    assert (facts["correct"], facts["format_valid"], facts["mean_completion_tokens"]) == (
        expected.correct, expected.format_valid, expected.mean_completion_tokens)
    assert facts["accuracy"] == expected.accuracy and facts["policy_version"] is None
    assert "3/3 (100%)" in result.stderr  # off a terminal: plain progress lines


@pytest.mark.parametrize("adapter", ["full", "lora"])
def test_an_export_folder_evaluates_the_exported_weights(tmp_path, adapter):
    policy = load_policy("tiny-small", adapter=adapter, seed=5, lora_rank=4, lora_alpha=8)
    with torch.no_grad():  # random tiny models repeat one character; these weights write varied text
        for parameter in policy.trainable_parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)))
    folder = export_policy(policy, tmp_path / "node" / "export", policy_version=7)
    records = tmp_path / "records.jsonl"
    result = _eval("--model", str(folder), "--task", "arithmetic", "--split", "ood", "--limit", "4",
                   "--max-new-tokens", "5", "--records", str(records), "--json")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.stdout)
    assert (facts["policy_version"], facts["adapter"], facts["name"]) == (7, adapter, "tiny-small")
    expected = evaluate(policy, ArithmeticTask(), "ood", limit=4, max_new_tokens=5, keep_records=True)
    assert len({r.completion for r in expected.records}) > 1  # so equal completions mean equal weights
    written = [json.loads(line) for line in records.read_text().splitlines()]
    assert [r["completion"] for r in written] == [r.completion for r in expected.records]
    assert [r["index"] for r in written] == [r.index for r in expected.records]
    text = _eval("--model", str(folder), "--task", "arithmetic", "--limit", "2", "--max-new-tokens", "2")
    assert text.exit_code == 0, text.output
    assert "policy version 7" in text.stdout and "accuracy" in text.stdout


def test_a_local_gsm8k_file(tmp_path):
    data = tmp_path / "gsm8k_test.jsonl"
    rows = [{"question": f"Tom has {n} apples and buys 2 more. How many?", "answer": f"{n} + 2 = {n + 2}\n#### {n + 2}"}
            for n in range(3)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = _eval("--model", "tiny-small", "--task", "gsm8k", "--data", str(data), "--max-new-tokens", "4", "--json")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.stdout)
    assert (facts["dataset"], facts["split"], facts["total"], facts["correct"]) == ("gsm8k", "test", 3, 0)
    assert facts["truncated"] == 1.0  # 4 tokens cannot close the answer tags


def test_a_nodes_config_supplies_the_task_and_eval_settings(tmp_path):
    config = tmp_path / "node.toml"
    config.write_text('[task]\nname = "arithmetic"\narithmetic = { max_digits = 1 }\n\n'
                      "[eval]\nlimit = 2\nmax_new_tokens = 3\n")
    result = _eval("--model", "tiny-small", "--config", str(config), "--json")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.stdout)
    assert facts["dataset"].startswith("arith/d1-1/") and facts["total"] == 2 and facts["max_new_tokens"] == 3


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--model", "tiny-small", "--task", "sudoku"], 2, "unknown task 'sudoku'"),
        (["--model", "tiny-small"], 2, "name the task with --task"),
        (["--model", "tiny-small", "--task", "arithmetic", "--split", "validation"], 2, "no split 'validation'"),
        (["--model", "tiny-small", "--task", "gsm8k", "--data", "{tmp}/missing.jsonl"], 2, "no such data file"),
        (["--model", "tiny-small", "--task", "gsm8k", "--data", "{tmp}/bad.jsonl"], 1, "not JSON"),
        (["--model", "tiny-small", "--task", "arithmetic", "--data", "{tmp}/bad.jsonl"], 2, "does not apply"),
        (["--model", "{tmp}/no-such-model", "--task", "arithmetic"], 2, "no such model folder"),
        (["--model", "{tmp}", "--task", "arithmetic"], 2, "is not a model folder"),
        (["--model", "tiny-huge", "--task", "arithmetic"], 2, "unknown tiny model"),
        (["--model", "tiny-small", "--task", "arithmetic", "--dtype", "float8"], 2, "model.dtype"),
        (["--model", "tiny-small", "--task", "arithmetic", "--chat-template", "on"], 2, "no chat template"),
        (["--model", "tiny-small", "--task", "arithmetic", "--config", "{tmp}/missing.toml"], 2, "cannot read"),
    ],
)
def test_errors_are_clear_with_an_exit_code_and_no_traceback(tmp_path, args, code, message):
    (tmp_path / "bad.jsonl").write_text("this is not json\n")
    result = _eval(*(arg.replace("{tmp}", str(tmp_path)) for arg in args), "--limit", "1", "--max-new-tokens", "1")
    assert result.exit_code == code, result.output
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)  # an orderly exit, not an exception that escaped


def test_a_known_real_model_brings_its_prompt_settings_and_options_still_choose():
    from ftis.node.evaluation.eval_command import EvalRequest, _plan

    known = _plan(EvalRequest(model="gemma-3-270m", task="arithmetic"))  # plans, loads no model
    assert (known.few_shot, known.model.chat_template, known.generation.stop, known.max_new_tokens) == (
        8, "off", ["\n"], 8)
    tags = _plan(EvalRequest(model="smollm2-135m-instruct", task="arithmetic", max_new_tokens=30))
    assert tags.generation.stop == ["\n"] and tags.max_new_tokens == 30  # an option given wins
    plain = _plan(EvalRequest(model="tiny-small", task="arithmetic"))  # not a known real model: as before
    assert (plain.few_shot, plain.model.chat_template, plain.generation.stop, plain.prompting) == (0, "auto", [], None)
    assert _plan(EvalRequest(model="smollm2-135m-instruct", task="gsm8k")).prompting is None  # none measured


def test_a_real_model_by_name_answers_in_its_tasks_format_without_settings():
    from tests.helpers.real_models import real_model

    real_model("smollm2-135m-instruct")  # skips without `ftis-node models fetch --all`
    result = _eval("--model", "smollm2-135m-instruct", "--task", "arithmetic", "--limit", "10", "--json")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.stdout)
    assert facts["few_shot"] == 8 and facts["stop"] == ["\n"] and facts["chat_template"] is False
    assert facts["in_format"] == 10 and facts["truncated"] == 0.0  # bare answers, each ended by its line
    assert "its prompt settings, 8 solved examples" in result.stderr
