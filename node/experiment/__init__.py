"""ftis.node.experiment: ``ftis-node experiment``, the paper's comparison in miniature, on tiny models.

Files:
- ``grid.toml``   the default grid: three heterogeneous tiny models (size, specialisation, LoRA vs full),
                  the conditions (each model solo; the swarm with nois, vis, tis, ftis, fvis; ftis with
                  horizontal grouping), seeds, rounds, evaluation, every node's settings, and ``--quick``.
- ``tokenizers.toml`` a second grid (``--config``): a tiny-small beside a peer of another tokenizer (tiny-small-bpe)
                  and beside one of its own, and each alone.
- ``grid.py``     the grid's typed schema, ``load_grid``, its cells, each node's config, cell fingerprints.
- ``lockstep.py`` a swarm's nodes stepped in lockstep in one process (threads, the in-memory transport,
                  a barrier at each publish).
- ``cell.py``     one cell (a condition at a seed): warm starts, rounds, evaluations, its JSON record.
- ``store.py``    cells on disk, written atomically, skipped on rerun when their fingerprint matches.
- ``stats.py``    the report's numbers: mean ± std over seeds, final and AUC, paired differences.
- ``plots.py``    the PNG figures (matplotlib, Agg).
- ``report.py``   ``report.md`` and the figures from the finished cells.
- ``runner.py``   ``run_experiment``: every unfinished cell with progress and ETA, then the report.

Importing ``grid``, ``store``, ``stats``, ``report`` or ``plots`` does not import torch; ``cell``,
``lockstep`` and running the grid do.
"""
