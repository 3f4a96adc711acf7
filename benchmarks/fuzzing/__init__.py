"""The fuzzers' parts. The protocol fuzzer, used by ``benchmarks/fuzz.py`` (100,000+ inputs) and by the tests
(``tests/test_fuzz.py``, ``tests/test_protocol_malformed.py``: a few thousand):

- ``inputs.py``      valid seed messages of several shapes, and the mutations that corrupt them
- ``strategies.py``  Hypothesis strategies: valid batches and announcements anywhere within the limits, near-valid ones
- ``oracle.py``      the judge: what must hold for every input a decoder is given
- ``swarm.py``       the node's announcement handling (``Directory``, ``Inbox``) given hostile records and payloads

The node fuzzer, used by ``benchmarks/fuzz_node.py`` (100,000 hostile batches) and ``tests/test_fuzz_node.py`` (a
few hundred): hostile batches through a real tiny node's decode, door, scoring, mix and training step.

- ``peers.py``       hostile peers on the in-memory transport: any bytes under any peer's name (``Case``)
- ``kit.py``         what a hostile peer knows of the node, and the builders its batches are made with
- ``hostile.py``     the makers of batches the protocol carries (huge numbers, long completions, odd texts...)
- ``raw.py``         the makers of those it refuses or that lie (deep envelopes, bad UTF-8, bombs), and ``MAKERS``
- ``passes.py``      the trainer's forward passes, counted as ``max_tokens_per_microbatch`` bounds them
- ``node.py``        one node under fuzz: its profiles, its peers, a round and what it broke (``Finding``)
- ``run.py``         the loop and the four properties; ``repro.py``  findings saved, bisected and replayed
"""
