"""Real vocabularies in one run over real hivemind on 127.0.0.1: two Qwen2 nodes (the stand-in, full and LoRA),
a Phi-3 node (32,064 tokens, its own chat template) and a GPT-2 node (50,257 tokens, no template) that skips
other tokenizers.

- The Qwen2 nodes train on each other's groups per token, and on the Phi-3 and GPT-2 groups per sequence.
- The Phi-3 node trains on the Qwen2 groups per sequence: the texts cross the wire as the Qwen2 nodes decoded
  them; the prompt is the Phi-3 node's own rendering of its copy of the problem; the completion is the text in
  Phi-3 tokens, which decode back to the same text, and a completion that stopped ends Phi-3's turn (``<|end|>``);
  the weights are finite and at most C.
- The GPT-2 node (``other_tokenizers = "skip"``) fetches nothing of theirs: each batch is refused as
  ``tokenizer``.

Run: bash .ci/tokenizers && python -m pytest tests/test_real_tokenizers_swarm.py -q   (marker ``hivemind``)
"""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from helpers.hivemind_swarm import DEADLINE_S, rejections_of, start_bootstrap
from helpers.real_tokenizers import MAX_NEW_TOKENS, RUN, answering_stand_in, node_config, real_tokenizer, write_gsm8k

from ftis.node.intake.text_groups import usable_text_bytes
from ftis.node.models.stand_in import build_stand_in
from ftis.node.runner.join import build_node
from ftis.node.runner.node import Node
from ftis.node.tasks.prompts import prompt_ids

pytestmark = pytest.mark.hivemind

ROUNDS = 2
QWEN = ("full", "lora")


def recorded(node: Node) -> tuple[list, list]:
    """Record what ``node`` receives from its transport and the groups each of its steps takes."""
    received, steps = [], []
    receive, step = node.transport.receive, node.trainer.step

    def receiving():
        items = receive()
        received.extend(items)
        return items

    def stepping(groups, own_peer_id=None):
        steps.append(list(groups))
        return step(groups, own_peer_id)

    node.transport.receive, node.trainer.step = receiving, stepping
    return received, steps


def test_qwen2_phi3_and_gpt2_nodes_share_one_run_per_token_and_per_sequence(tmp_path_factory, tmp_path):
    model = answering_stand_in(tmp_path_factory)
    phi = build_stand_in(real_tokenizer("phi-3"), tmp_path / "phi-3-stand-in")
    gpt2 = build_stand_in(real_tokenizer("gpt-2"), tmp_path / "gpt-2-stand-in")
    gsm8k = write_gsm8k(tmp_path / "gsm8k.jsonl")
    bootstrap = start_bootstrap(tmp_path, {"host_maddrs": ["/ip4/127.0.0.1/tcp/0"]})
    swarm = {"run_id": RUN, "initial_peers": [str(m) for m in bootstrap.get_visible_maddrs()],
             "host_maddrs": ["/ip4/127.0.0.1/tcp/0"], "announce_interval_s": 0.5, "poll_interval_s": 0.25}
    # each node of the rounds waits for its three peers' batches (the GPT-2 node, ahead of them, never waits)
    rounds = {"mode": "rounds", "min_peers": 3, "round_deadline_s": DEADLINE_S}
    configs = {
        "full": node_config(model, gsm8k, swarm=swarm, loop=rounds),
        "lora": node_config(model, gsm8k, "lora", swarm=swarm, loop=rounds),
        "phi": node_config(phi, gsm8k, swarm=swarm, loop=rounds, generation={"max_new_tokens": MAX_NEW_TOKENS}),
        "gpt2": node_config(gpt2, gsm8k, swarm={**swarm, "other_tokenizers": "skip"},
                            generation={"max_new_tokens": 4}),
    }
    nodes: dict[str, Node] = {}
    try:
        for name, config in configs.items():  # one at a time: transformers' from_pretrained is not thread-safe
            nodes[name] = build_node(config)
        phi_received, phi_steps = recorded(nodes["phi"])
        # a peer's text longer than a node could train on is refused unread; every honest one here is shorter
        assert nodes["phi"].transport._inbox._limits.max_text_bytes == usable_text_bytes(MAX_NEW_TOKENS)
        ids = {name: node.transport.peer_id for name, node in nodes.items()}
        with ThreadPoolExecutor(len(configs)) as pool:
            runs = {name: pool.submit(lambda node=node: [node.run_round() for _ in range(ROUNDS)])
                    for name, node in nodes.items()}
            reports = {name: run.result(timeout=6 * DEADLINE_S) for name, run in runs.items()}

        def refused(name: str, other: str) -> int:
            return rejections_of(nodes[name].transport, ids[other]).get("tokenizer", 0)

        _wait(lambda: all(refused("gpt2", other) for other in ("full", "lora", "phi")),
              "the GPT-2 node refuses every other tokenizer's batches as 'tokenizer'")
    finally:
        for node in nodes.values():
            node.transport.close()
        bootstrap.shutdown()

    for name, other in (("full", "lora"), ("lora", "full")):
        use = reports[name][-1].peer_use
        assert use[ids[other]] == "token" and use[ids["phi"]] == "sequence", use
        assert any(r.step.trained for r in reports[name]), reports[name]
        assert rejections_of(nodes[name].transport, ids[other]) == {}
    use = reports["phi"][-1].peer_use  # the GPT-2 node's batches too, where one arrived in time (it does not wait)
    assert use[ids["full"]] == use[ids["lora"]] == use.get(ids["gpt2"], "sequence") == "sequence", use
    assert reports["gpt2"][-1].peer_groups_received == 0 and reports["gpt2"][-1].peer_use == {}

    # The Phi-3 node's steps on the Qwen2 groups: trained per sequence, finite, every weight at most C.
    taken = [r.step for r in reports["phi"] if r.step.sequence_groups]
    assert taken and all(s.trained and np.isfinite(s.loss) and np.isfinite(s.grad_norm) for s in taken), taken
    assert all(s.is_weight_max <= configs["phi"].loss.clip_c + 1e-6 for s in taken), taken
    for node in nodes.values():
        assert all(torch.isfinite(p).all() for p in node.policy.model.parameters())

    # What crossed the wire and what the Phi-3 node made of it.
    qwen_tokenizer, phi_node = nodes["full"].policy.tokenizer, nodes["phi"]
    phi_tokenizer = phi_node.policy.tokenizer
    phi_end = phi_tokenizer.convert_tokens_to_ids("<|end|>")
    sent = {group.group_id: group for item in phi_received if item.peer_id in (ids["full"], ids["lora"])
            for group in item.batch.groups}
    assert sent
    for group in sent.values():  # the texts are the Qwen2 generator's decoding of its own ids
        ends = np.cumsum(group.columns.lengths)[:-1]
        decoded = qwen_tokenizer.batch_decode([row.tolist() for row in np.split(group.columns.token_ids, ends)],
                                              skip_special_tokens=True)
        assert list(group.columns.texts) == decoded
    rebuilt = [group for groups in phi_steps for group in groups if group.peer_id in (ids["full"], ids["lora"])]
    assert rebuilt and all(group.per_sequence for group in rebuilt)
    for group in rebuilt:
        problem = phi_node.task.problem(group.task.split, group.task.index)
        assert np.array_equal(group.prompt_ids, prompt_ids(phi_tokenizer, phi_node.task.prompt(problem),
                                                           chat=phi_node.chat))
        ends = np.cumsum(group.completions.lengths)[:-1]
        back = phi_tokenizer.batch_decode([row.tolist() for row in np.split(group.completions.token_ids, ends)],
                                          skip_special_tokens=True)
        assert back == list(sent[group.group_id].columns.texts)  # text -> Phi-3 tokens -> the same text
        stopped = [row[-1] for row, finish in zip(np.split(group.completions.token_ids, ends),
                                                  group.completions.finish_reasons, strict=True) if finish == "stop"]
        assert all(end == phi_end for end in stopped)  # a stop ends the Phi-3 turn: <|end|>, not <|endoftext|>
        assert np.allclose(group.sequence_logprobs, [float(c.sampler_logprobs.sum())
                                                     for c in sent[group.group_id].completions], atol=1e-3)


def _wait(condition, what: str) -> None:
    import time

    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE_S:.0f} s: {what}")
        time.sleep(0.1)
