"""Two Qwen2 nodes (the stand-in, full and LoRA) train on each other's GSM8K groups over real hivemind on
127.0.0.1, in ``rounds`` mode, while a Phi-3 node (another real tokenizer, 32,064 tokens) joins the same run:
each side refuses the other's batches unfetched as ``tokenizer`` and counts them, and no Phi-3 id reaches a
Qwen2 node's step (nor is the Phi-3 node a peer a Qwen2 node waits for).

Run: bash .ci/tokenizers && python -m pytest tests/test_real_tokenizers_swarm.py -q   (marker ``hivemind``)
"""

from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers.hivemind_swarm import DEADLINE_S, rejections_of, start_bootstrap
from helpers.real_tokenizers import RUN, answering_stand_in, node_config, real_tokenizer, write_gsm8k

from ftis.node.models.stand_in import build_stand_in
from ftis.node.runner.join import build_node

pytestmark = pytest.mark.hivemind

ROUNDS = 2


def test_two_qwen2_nodes_train_together_and_a_phi3_node_is_refused_as_tokenizer(tmp_path_factory, tmp_path):
    model = answering_stand_in(tmp_path_factory)
    phi = build_stand_in(real_tokenizer("phi-3"), tmp_path / "phi-3-stand-in")
    gsm8k = write_gsm8k(tmp_path / "gsm8k.jsonl")
    bootstrap = start_bootstrap(tmp_path, {"host_maddrs": ["/ip4/127.0.0.1/tcp/0"]})
    swarm = {"run_id": RUN, "initial_peers": [str(m) for m in bootstrap.get_visible_maddrs()],
             "host_maddrs": ["/ip4/127.0.0.1/tcp/0"], "announce_interval_s": 0.5, "poll_interval_s": 0.25}
    rounds = {"mode": "rounds", "min_peers": 1, "round_deadline_s": DEADLINE_S}
    configs = {
        "full": node_config(model, gsm8k, swarm=swarm, loop=rounds),
        "lora": node_config(model, gsm8k, "lora", swarm=swarm, loop=rounds),
        "phi": node_config(phi, gsm8k, swarm=swarm, generation={"max_new_tokens": 4}),
    }
    nodes = {}
    try:
        for name, config in configs.items():  # one at a time: transformers' from_pretrained is not thread-safe
            nodes[name] = build_node(config)
        with ThreadPoolExecutor(len(configs)) as pool:
            ids = {name: node.transport.peer_id for name, node in nodes.items()}
            runs = {name: pool.submit(lambda node=node, n=n: [node.run_round() for _ in range(n)])
                    for (name, node), n in zip(nodes.items(), (ROUNDS, ROUNDS, 1), strict=True)}
            reports = {name: run.result(timeout=4 * DEADLINE_S) for name, run in runs.items()}

        def refused(name: str, other: str) -> int:
            return rejections_of(nodes[name].transport, ids[other]).get("tokenizer", 0)

        pairs = [("full", "phi"), ("lora", "phi"), ("phi", "full"), ("phi", "lora")]
        _wait(lambda: all(refused(a, b) for a, b in pairs), "each side refuses the other's batches as 'tokenizer'")
    finally:
        for node in nodes.values():
            node.transport.close()
        bootstrap.shutdown()

    for name, other in (("full", "lora"), ("lora", "full")):
        assert sum(r.peer_groups_received for r in reports[name]) >= 2, reports[name]
        assert {peer for r in reports[name] for peer in r.peer_groups_by_peer} == {ids[other]}, reports[name]
        assert any(r.step.trained for r in reports[name]), reports[name]
        # Only what a Qwen2 node refuses for lack of a tokenizer match: nothing of its Qwen2 peer is refused.
        assert rejections_of(nodes[name].transport, ids[other]) == {}
        assert set(rejections_of(nodes[name].transport, ids["phi"])) == {"tokenizer"}
    assert reports["phi"][0].peer_groups_received == 0


def _wait(condition, what: str) -> None:
    import time

    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE_S:.0f} s: {what}")
        time.sleep(0.1)
