"""The protocol fuzzer's parts, used by ``benchmarks/fuzz.py`` (100,000+ inputs) and by the tests
(``tests/test_fuzz.py``, ``tests/test_protocol_malformed.py``: a few thousand).

- ``inputs.py``      valid seed messages of several shapes, and the mutations that corrupt them
- ``strategies.py``  Hypothesis strategies: valid batches and announcements anywhere within the limits, near-valid ones
- ``oracle.py``      the judge: what must hold for every input a decoder is given
- ``swarm.py``       the node's announcement handling (``Directory``, ``Inbox``) given hostile records and payloads
"""
