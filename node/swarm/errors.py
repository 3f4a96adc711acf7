"""``SwarmError``: the swarm could not be joined. Below every room of the swarm, so that any of them raises it."""

from ftis.node.errors import UserError


class SwarmError(UserError, RuntimeError):
    """The swarm could not be joined: a bad peer address, a start-up timeout, an unusable identity..."""
