"""ftis.node.records: what a node records of its rounds and shows, and what the readers of its files share.

Files:
- ``round_report.py`` ``RoundReport``: a round's figures, each declared once with where it goes (add a metric here).
- ``metrics.py``      the per-step record and where it goes: ``metrics.jsonl``, TensorBoard events, the display.
- ``peer_tables.py``  the per-peer tables of a round (scores, mutes, rejections, use), bounded, for ``peers.json``.
- ``display.py``      the terminal: a live rich table, or one summary line per step off a terminal.
- ``writer.py``       a background thread for those files and the round's publish, in order; errors reach the loop.
- ``utilisation.py``  where a round's wall time goes (generating, training, the rest): measured, recorded, read back.
- ``record_kinds.py`` ``is_step``, ``is_evaluation``: the two kinds of ``metrics.jsonl`` line, for its readers
                      (the demo's view, the dashboard).
"""
