"""The protocol's typed errors. Every failure names the field it concerns, as a path into the
message (``body.groups[3].lengths``) or, for encode, into the batch being encoded."""


class ProtocolError(ValueError):
    """A batch that the protocol cannot carry; ``field`` says where, ``reason`` says why."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class DecodeError(ProtocolError):
    """Bytes that are not a valid message of a supported version. Nothing was built from them."""


class EncodeError(ProtocolError):
    """A batch that cannot be encoded (for example a positive or non-finite log-prob)."""
