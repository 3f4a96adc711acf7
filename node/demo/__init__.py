"""ftis.node.demo: ``ftis-node demo``, a heterogeneous swarm on one machine — a bootstrap peer and a few
tiny-model nodes (different sizes, one LoRA) as separate processes over real hivemind on 127.0.0.1 —
with a live view, a summary and a plot.

Files:
- ``config.toml``  the packaged settings: the demo's, the nodes' shared ones, one table per node.
- ``settings.py``  ``load_demo_config``: that file (or another) validated, each node's ``NodeConfig``.
- ``toml_file.py`` writing a node's settings as the TOML file ``ftis-node join --config`` reads.
- ``children.py``  the processes started: own process groups, logs, SIGTERM → wait → SIGKILL, no orphans.
- ``launch.py``    the ``ftis-node bootstrap`` / ``join`` command lines, environment, the bootstrap's address.
- ``follow.py``    following a node's ``metrics.jsonl`` as it is written; ``NodeProgress`` per node.
- ``view.py``      the live view: a rich table with a row per node, or a line per node step.
- ``summary.py``   start vs end accuracy per node (and the solo baseline's), for the terminal, markdown, JSON.
- ``plot.py``      ``accuracy.png``: accuracy per node over rounds (matplotlib, Agg).
- ``run.py``       ``run_demo``: warm-up, processes, view, solo baseline, summary and plot, in that order.
"""
