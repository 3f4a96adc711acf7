"""``python -m ftis.node.cli``: the command line where the ``ftis-node`` entry point is not installed."""

from ftis.node.cli import main

if __name__ == "__main__":  # imported (a walk over the modules), it runs nothing
    main()
