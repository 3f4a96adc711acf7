"""Benchmarks: scripts that measure the project on realistic inputs and print what they found; each
module's docstring starts with how to run it. Nothing here is imported by the package; tests run some
scripts in their quick form (``tests/test_benchmarks.py``, ``tests/test_gpu_check.py``).

Files:
- ``wire.py``  bytes per token and encode/decode speed of the protocol-v1 token column on GSM8K
  solutions, against the paper's plain uint32 id + float32 log-prob (docs/protocol.md).
- ``exchange.py``  announcement → delivery latency and payload fetch throughput of the hivemind transport on
  loopback, against the raw hivemind stream (docs/swarm.md).
- ``swarm_scale.py``  8 → 64 hivemind peers on one machine: time until all have all, announcements sustained,
  memory per peer.
- ``swarm_policy.py``  the sampled directory and the fetch budget simulated at 100, 1,000 and 10,000 peers with the
  node's own sampling code: reads per node, budgets met, batch ages, fetches per batch; churn, hostile peers.
- ``swarm_directory.py``  a sampled poll on a few real DHT servers holding 256 → 4,096 signed records: bytes per
  poll counted from the DHT's answers.
- ``trainer.py``  an F-TIS optimizer step against a plain GRPO step on the demo's models and batch.
- ``generation.py``  tokens/s of the transformers backend on CPU against the same model's ``model.generate``.
- ``tokenization_gap.py``  on the warmed tiny models of the cross-tokenizer grid, a completion text's log-prob over
  every tokenization against the one tokenization each side scores, and what that does to the per-sequence
  weight (docs/loss.md).
- ``length_normaliser.py``  on the same models and samples, the per-sequence weight's x̄, truncation and filter
  under each candidate length normaliser L (the receiver's tokens, the generator's, characters).
- ``gpu_check.py``  the vLLM backend on one GPU: sampler log-probs, F-TIS steps with weight sync, throughput.
- ``poisoning.py``  the published attacks on decentralized GRPO (out-of-context, in-context, DoS, wrong answer) against
  an honest node, defences on and off (docs/swarm.md); ``poisoning_attacks/`` holds the attackers, the audit of the
  node's steps and the report.
- ``late_joiner.py``  a node joining the demo's swarm after the others trained a while, as users run it: time from
  ``join`` to its first step on a peer's group (cold and warm), its memory, its accuracy against its solo run
  (docs/learning.md).
- ``envelope.py``  what bounding a message from its msgpack headers costs against decoding, and what payloads of
  nested empty arrays cost a decoder with it (docs/protocol.md).
- ``fuzz.py``  100,000+ fuzzed inputs to the protocol decoders and the node's announcement handling, with a limit
  oracle and a memory bound (its parts are in ``tests/fuzz_*.py``, shared with ``tests/test_fuzz.py``).
- ``relay_fetch.py``  payload fetches through the bootstrap's circuit relay beside direct ones, across a real NAT
  built from network namespaces (root); its peers are ``relay_peer.py``, the namespaces ``netns.py`` (which
  ``tests/test_nat.py`` builds too).
- ``swarm_common.py``, ``demo_nodes.py``  helpers of the swarm benchmarks and of the node's CPU benchmarks.
"""
