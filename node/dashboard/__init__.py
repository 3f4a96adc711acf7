"""ftis.node.dashboard: ``ftis-node dashboard``, a local web page showing a run's members (from the DHT, as
``ftis-node status`` reads them) and how each node whose folder it is given learns: plots over rounds, its
scores of its peers and its mutes. Standard library only; the page's script and style ship with the package.

Files:
- ``series.py``   reading ``metrics.jsonl`` incrementally (offset kept) into series of bounded length.
- ``charts.py``   the plots, each line named by a declared figure (``RoundReport``, ``StepFigures``).
- ``nodes.py``    one node's folder: its series, latest figures and ``peers.json``, as the page gets them.
- ``members.py``  the run's members, read from the DHT again and again by a thread of its own.
- ``server.py``   the HTTP server (``http.server``): the page, its files, the JSON endpoints, the headers,
                  the refusal of a public address.
- ``heads.py``    a request's line and headers read within a deadline and a size; the connections still
                  sending theirs, so that the oldest can make room.
- ``defaults.py`` the address, port, refresh interval and points per line, for the command line too.
- ``run.py``      ``open_dashboard`` / ``run_dashboard``: join, watch, serve; close it all.
- ``static/``     ``index.html``, ``dashboard.js`` (DOM built as text, SVG plots), ``dashboard.css``.
"""
