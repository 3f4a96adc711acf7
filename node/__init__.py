"""ftis.node: everything a node runs besides the wire format.

Files:
- ``cli/``       the ``ftis-node`` command line (thin: parse options into a request, call one function).
- ``config/``    the typed config tree (pydantic, ``extra="forbid"``), each setting documented once.
- ``signals.py`` SIGTERM raised as ``Terminated`` so commands stop like on Ctrl-C.
- ``errors.py``  ``UserError``, the base of every error a user or a peer can cause, and the CLI's exit codes.
- ``atomic.py``  ``replace_folder``: a folder (export, checkpoint) replaced in one rename.
- ``figures.py`` ``figure()``: a metric declared once as a dataclass field; its record and TensorBoard tags.
- ``printable.py`` ``printable()``: a string a peer wrote, safe to show on a terminal, in a log or on a page.
- ``prompt_prefix.py`` ``shared_prefix``: the first tokens a batch of prompts shares, run once (sampler, trainer).
- ``loss/``      the F-TIS algorithm core: pure functions over tensors (see ``loss/__init__.py``).
- ``models/``, ``tasks/``, ``generation/``, ``trainer/``: the policy, tasks and rewards, sampling, the F-TIS step.
- ``swarm/``     the transports (hivemind, in-memory), announcements, the bootstrap peer.
- ``records/``   a round's report, the ``metrics.jsonl`` record, TensorBoard, the display; what its readers share.
- ``evaluation/`` greedy accuracy on held-out problems: inside the join loop, and ``ftis-node eval``.
- ``intake/``    peers' batches into the groups a step trains on: admitted, scored with the node's task, mixed.
- ``runner/``    a node's rounds, ``join`` and its run loop, checkpoints.
- ``warmup/``, ``demo/``, ``experiment/``: tiny models' warm start, ``ftis-node demo``, ``ftis-node experiment``.
- ``dashboard/`` ``ftis-node dashboard``: a local web page of the run's members and each node's figures.

Importing this package imports nothing heavy: torch and hivemind load inside the modules that use
them, so ``ftis-node --help`` stays instant.
"""
