"""ftis.node.swarm.keys: a node's identity: the key behind its peer id, and where that key may live.

Files:
- ``identity.py``  identity files: one key for the peer id and the announcement signature.
- ``mounts.py``    which mount a folder is on: an anonymous container volume is refused for an identity.
"""
