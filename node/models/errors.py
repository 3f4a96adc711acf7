"""The errors of loading a model, below every module that raises them (``loading.py``, ``gguf.py``, ``fetch.py``),
so that none of those imports another for its errors."""

from ftis.node.errors import UserError


class ModelLoadError(UserError, ValueError):
    """The model named cannot be loaded as a policy (the message says why and what would work)."""


class UnknownModelError(ModelLoadError):
    """A ``tiny-*`` name that is not one of ``TINY_MODELS``."""


class NotAModelError(ModelLoadError):
    """A path that does not exist or is not a model folder."""
