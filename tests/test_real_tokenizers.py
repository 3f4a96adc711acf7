"""Qwen2's real tokenizer through every stage of a node, offline: what a ``--model Qwen/Qwen2.5-1.5B-Instruct``
node on GSM8K sends and receives, on the stand-in model (``node/models/stand_in.py``; taught to answer,
``helpers/real_tokenizers.py``). Real components throughout: the chat template, the transformers backend stopping at
``<|im_end|>`` or ``<|endoftext|>``, the wire (3-byte ids, the real fingerprint), decoding and scoring at a peer,
F-TIS steps of a full and a LoRA node, checkpoint, resume, export and ``ftis-node eval``.

Run: bash .ci/tokenizers && python -m pytest tests/test_real_tokenizers.py -q   (skipped without the tokenizers)
"""

import json

import msgpack
import numpy as np
import pytest
from helpers.real_tokenizers import (
    END_OF_TEXT,
    IM_END,
    MAX_NEW_TOKENS,
    RUN,
    answering_stand_in,
    node_config,
    real_tokenizer,
    write_gsm8k,
)
from transformers import AutoTokenizer
from typer.testing import CliRunner

from ftis.node.cli import app
from ftis.node.generation.types import stop_token_ids
from ftis.node.intake.scoring import decode_groups
from ftis.node.models import export_policy, load_policy, tokenizer_fingerprint
from ftis.node.runner.checkpoint_files import list_checkpoints, read_manifest
from ftis.node.runner.join import build_node, run_node
from ftis.node.swarm.exchange.limits import InboxLimits
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.node.tasks.gsm8k import ANSWER_HINT
from ftis.node.tasks.prompts import prompt_ids, renderings
from ftis.node.tasks.tags import tag_prompt
from ftis.protocol import TokenizerInfo, decode

QWEN_VOCAB = 151_936
LIMITS = InboxLimits(max_age_s=600, per_peer_quota=8, max_batches=64, max_bytes=10**8)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return answering_stand_in(tmp_path_factory)


@pytest.fixture(scope="module")
def gsm8k(tmp_path_factory):
    return write_gsm8k(tmp_path_factory.mktemp("data") / "gsm8k.jsonl")


@pytest.fixture(scope="module")
def policy(model):
    return load_policy(str(model))


def on_hub(hub: MemoryHub, peer_id: str):
    return lambda fingerprint: MemoryTransport(hub, RUN, peer_id, fingerprint, LIMITS)


def test_the_stand_in_is_qwen2_on_the_whole_real_vocabulary_and_stops_at_both_end_tokens(model, policy):
    config = json.loads((model / "config.json").read_text())
    assert (config["model_type"], config["vocab_size"], config["hidden_size"]) == ("qwen2", QWEN_VOCAB, 64)
    assert sum(parameter.numel() for parameter in policy.model.parameters()) == 9_822_784
    assert type(policy.tokenizer).__name__ == "Qwen2Tokenizer" and len(policy.tokenizer) == QWEN_VOCAB
    source = AutoTokenizer.from_pretrained(str(real_tokenizer("qwen2")))
    assert policy.fingerprint == tokenizer_fingerprint(source)  # the folder kept the tokenizer's ids
    # The tokenizer's eos is <|endoftext|>; <|im_end|> comes from the generation config, as in Qwen2.5-Instruct.
    assert policy.tokenizer.eos_token_id == END_OF_TEXT
    assert stop_token_ids(policy.model, policy.tokenizer.eos_token_id) == {IM_END, END_OF_TEXT}


def test_a_gsm8k_prompt_in_qwen2s_chat_template(policy, gsm8k):
    from ftis.node.tasks import make_task

    tokenizer = policy.tokenizer
    task = make_task("gsm8k", data_files={"train": str(gsm8k)})
    problem = task.problem("train", 2)
    ids = prompt_ids(tokenizer, task.prompt(problem), chat=True)
    assert tokenizer.decode(ids) == ("<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\n"
                                     + tag_prompt(problem.question, ANSWER_HINT)
                                     + "<|im_end|>\n<|im_start|>assistant\n")
    assert ids[0] == 151_644 and ids.max() >= 2**16  # <|im_start|>: ids above 65,535 travel in 3 bytes
    assert [tokenizer.decode([i]) for i in tokenizer("12 pages", add_special_tokens=False)["input_ids"]] == [
        "1", "2", " pages"]  # digits one per token
    raw, chat = renderings(tokenizer, task.prompt(problem))
    assert np.array_equal(chat, ids) and not np.array_equal(raw, ids)


def test_a_full_and_a_lora_node_exchange_score_and_train_on_qwen2s_ids(model, gsm8k, policy, tmp_path):
    hub = MemoryHub()
    full = build_node(node_config(model, gsm8k), on_hub(hub, "full"))
    lora = build_node(node_config(model, gsm8k, "lora"), on_hub(hub, "lora"))
    reports = {"full": [full.run_round()], "lora": [lora.run_round()]}
    reports["full"].append(full.run_round())
    reports["lora"].append(lora.run_round())

    fingerprint = policy.fingerprint
    completions = []
    for sender, receiver in (("full", lora), ("lora", full)):
        data = hub.fetch(sender, 0)
        message = msgpack.unpackb(data)
        assert message["body"]["tokens"]["id_width"] == 3
        batch = decode(data)
        assert batch.tokenizer == TokenizerInfo(fingerprint, QWEN_VOCAB)
        # At the receiver: the same texts, the same prompts rebuilt from the problem, the same rewards.
        texts = decode_groups(batch, receiver.policy.tokenizer, QWEN_VOCAB)
        for group, group_texts in zip(batch.groups, texts, strict=True):
            problem = receiver.task.problem(group.task.split, group.task.index)
            assert np.array_equal(group.prompt_ids, prompt_ids(receiver.policy.tokenizer, receiver.task.prompt(problem),
                                                               chat=True))
            assert [receiver.task.reward(text, problem.answer) for text in group_texts] == [
                c.reward for c in group.completions]
            completions += group.completions
        assert receiver.transport.stats().rejections == {}
    stops = [c.token_ids[-1] for c in completions if c.finish_reason == "stop"]
    assert set(stops) == {IM_END, END_OF_TEXT}  # generation ended at either end token
    assert all(not np.isin(c.token_ids[:-1], [IM_END, END_OF_TEXT]).any() for c in completions)
    assert 0 < np.mean([c.reward for c in completions]) < 1

    # In turn: full 0, lora 0 (full's batch 0 waiting), full 1 (lora's 0), lora 1 (full's 1).
    for name, node, received in (("full", full, 2), ("lora", lora, 4)):
        assert [r.own_groups for r in reports[name]] == [2, 2] and not any(r.unusable_groups for r in reports[name])
        assert sum(r.peer_groups_received for r in reports[name]) == received, name
        assert sum(r.peer_groups_used for r in reports[name]) > 0, name
        assert any(r.step.trained for r in reports[name]) and node.trainer.policy_version >= 1, name

    exported = export_policy(lora.policy, tmp_path / "lora-export", policy_version=lora.trainer.policy_version)
    again = load_policy(str(exported), adapter="lora")
    assert (again.fingerprint, again.adapter, again.lora_rank) == (fingerprint, "lora", lora.policy.lora_rank)
    for node in (full, lora):
        node.transport.close()


def test_checkpoint_resume_export_and_eval_of_the_export(model, gsm8k, policy, tmp_path):
    out, lines = tmp_path / "node", []
    config = node_config(model, gsm8k, checkpoint={"every_rounds": 1, "keep_last": 2})
    run_node(build_node(config, on_hub(MemoryHub(), "first")), 1, out, lines.append)
    first = read_manifest(list_checkpoints(out / "checkpoints")[-1])
    assert first["round"] == 1

    resumed = build_node(config, on_hub(MemoryHub(), "second"))
    run_node(resumed, 1, out, lines.append, resume=True)
    assert f"resumed from {list_checkpoints(out / 'checkpoints')[0]}: round 1" in "\n".join(lines)
    last = read_manifest(list_checkpoints(out / "checkpoints")[-1])
    assert last["round"] == 2 and last["policy_version"] == resumed.trainer.policy_version

    result = CliRunner().invoke(app, ["eval", "--model", str(out / "export"), "--task", "gsm8k", "--data", str(gsm8k),
                                      "--max-new-tokens", str(MAX_NEW_TOKENS), "--json"])
    assert result.exit_code == 0, result.output
    facts = json.loads(result.stdout)
    assert (facts["dataset"], facts["total"], facts["policy_version"]) == ("gsm8k", 4, last["policy_version"])
    assert facts["format_valid"] > 0  # greedy answers in the tag format, decoded from Qwen2's ids
    assert load_policy(str(out / "export")).fingerprint == policy.fingerprint
