"""ftis.node: everything a node runs besides the wire format.

Files:
- ``cli.py``     the ``ftis-node`` command line (thin: parse, build config, call one function).
- ``config.py``  the typed config tree (pydantic, ``extra="forbid"``), each setting documented once.
- ``loss/``      the F-TIS algorithm core: pure functions over tensors (see ``loss/__init__.py``).

Importing this package imports nothing heavy: torch and hivemind load inside the modules that use
them, so ``ftis-node --help`` stays instant.
"""
