"""The node's typed config tree: pydantic models with ``extra="forbid"``, each setting documented once.

Files:
- ``node.py``       ``NodeConfig``, every section together; the sections of the run around the step (``[mix]``,
                    ``[eval]``, ``[loop]``, ``[metrics]``, ``[checkpoint]``); ``load_config(path)`` reads and
                    validates a TOML file.
- ``training.py``   ``[loss]``, ``[trainer]``, ``[model.warmup]``: the loss and its variants, the optimizer step, the
                    tiny models' warm start.
- ``policy.py``     ``[model]`` and ``[task]``: the policy a node trains and what it trains on.
- ``generation.py`` ``[generation]`` and ``[generation.vllm]``: sampling the node's own groups.
- ``arithmetic.py`` ``[task.arithmetic]``, and the warm-up's override of it.
- ``swarm.py``      ``[swarm]``: joining the swarm, the exchange, peer scores.
- ``base.py``       the mechanism the demo's file (``demo/settings.py``) and the experiment's grid
                    (``experiment/grid.py``) share: ``Section`` (the base of every section), ``merged`` (a partial
                    table laid over another), ``read_toml``, ``describe_validation_error`` (every problem as
                    ``loc.path: reason``) and ``validated``.

``examples/*.toml`` are parsed by the test suite, so they cannot rot. This package imports nothing of the node
outside itself, only ``ftis.protocol`` (its limits, ``UserError``; docs/development.md, "Layers"): each package
turns its section into the plain settings it takes (``swarm.exchange.inbox.inbox_limits``,
``trainer.loss_params.loss_params``, ...).
"""

from ftis.node.config.arithmetic import (
    ARITHMETIC_OPERATIONS,
    MAX_ARITHMETIC_DIGITS,
    MAX_ARITHMETIC_OPERANDS,
    ArithmeticConfig,
    ArithmeticOverride,
)
from ftis.node.config.base import (
    MAX_BYTES,
    MAX_CONCURRENT_STREAMS,
    MAX_COUNT,
    MAX_GRADIENT_NORM,
    MAX_LEARNING_RATE,
    MAX_LORA_RANK,
    MAX_SECONDS,
    MAX_SEED,
    MAX_THREADS,
    ConfigError,
    Section,
    describe_validation_error,
    merged,
    partial_of,
    read_toml,
    validated,
    validation_problems,
)
from ftis.node.config.generation import MAX_STOP_CHARACTERS, GenerationConfig, VllmConfig
from ftis.node.config.node import (
    CheckpointConfig,
    EvalConfig,
    LoopConfig,
    MetricsConfig,
    MixConfig,
    NodeConfig,
    load_config,
)
from ftis.node.config.policy import ModelConfig, TaskConfig
from ftis.node.config.swarm import RUN_ID_PATTERN, SwarmConfig
from ftis.node.config.training import LossConfig, LossVariant, TrainerConfig, WarmupConfig

__all__ = [
    "ARITHMETIC_OPERATIONS",
    "MAX_ARITHMETIC_DIGITS",
    "MAX_ARITHMETIC_OPERANDS",
    "MAX_BYTES",
    "MAX_CONCURRENT_STREAMS",
    "MAX_COUNT",
    "MAX_GRADIENT_NORM",
    "MAX_LEARNING_RATE",
    "MAX_LORA_RANK",
    "MAX_SECONDS",
    "MAX_SEED",
    "MAX_STOP_CHARACTERS",
    "MAX_THREADS",
    "RUN_ID_PATTERN",
    "ArithmeticConfig",
    "ArithmeticOverride",
    "CheckpointConfig",
    "ConfigError",
    "EvalConfig",
    "GenerationConfig",
    "LoopConfig",
    "LossConfig",
    "LossVariant",
    "MetricsConfig",
    "MixConfig",
    "ModelConfig",
    "NodeConfig",
    "Section",
    "SwarmConfig",
    "TaskConfig",
    "TrainerConfig",
    "VllmConfig",
    "WarmupConfig",
    "describe_validation_error",
    "load_config",
    "merged",
    "partial_of",
    "read_toml",
    "validated",
    "validation_problems",
]
