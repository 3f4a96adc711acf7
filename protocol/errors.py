"""The protocol's typed errors. Every failure names the field it concerns, as a path into the
message (``body.groups[3].lengths``) or, for encode, into the batch being encoded.

``UserError``, the base of every error a user or a peer can cause, lives here too: this is the lowest
layer, and a peer's undecodable batch (``DecodeError``) is one. The node's side of it (what belongs
under it, the exit codes) is ``ftis.node.errors``."""


class UserError(Exception):
    """An error that a user's input or a peer's data can cause, never a programming error: a config file
    with a bad key, a path that holds no model, a checkpoint of another model, bytes that do not decode.
    Its message says what is wrong in the user's terms. A command line prints it and exits with
    ``exit_code`` (1 here; 2 for a usage error, see ``ftis.node.errors``); anything else is a bug."""

    exit_code: int = 1


class ProtocolError(ValueError):
    """A batch that the protocol cannot carry; ``field`` says where, ``reason`` says why."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class DecodeError(UserError, ProtocolError):
    """Bytes that are not a valid message of a supported version. Nothing was built from them."""


class EncodeError(ProtocolError):
    """A batch that cannot be encoded (for example a positive or non-finite log-prob): this node's own
    batch, so a bug rather than a user's error."""
