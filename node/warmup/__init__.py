"""ftis.node.warmup: a short supervised warm start for the tiny models, cached on disk, so GRPO starts where
rewards vary (a random tiny model scores 0 on every arithmetic problem, and all-equal groups teach nothing).

Files:
- ``data.py``    the demonstration for a problem in the task's answer format (the task's reward gives it 1),
                 prompt + target ids, and right-padded batches with a mask on the target tokens.
- ``train.py``   ``supervised_warmup``: teacher-forced cross-entropy on the targets, AdamW with a cosine
                 learning rate, progress callbacks; ``greedy_accuracy`` on held-out problems.
- ``cache.py``   ``warm_start``: the recipe's hash names a folder under ``$FTIS_CACHE/warmup`` (or
                 ``~/.cache/ftis-node/warmup``); trained once under a file lock, written atomically,
                 loaded afterwards.
- ``policy.py``  ``load_warm_policy``: ``[model] warmup`` of a node's config → its policy, full or LoRA
                 on the warmed base (what ``build_node`` calls).

Importing this package imports torch and transformers.
"""

from ftis.node.warmup.cache import (
    WarmStart,
    WarmupCacheError,
    WarmupSpec,
    cache_key,
    cache_root,
    is_cached,
    warm_start,
)
from ftis.node.warmup.data import WarmupDataError, demonstration
from ftis.node.warmup.policy import load_warm_policy, warmup_spec
from ftis.node.warmup.train import Progress, WarmupPlan, WarmupResult, greedy_accuracy, supervised_warmup

__all__ = [
    "Progress",
    "WarmStart",
    "WarmupCacheError",
    "WarmupDataError",
    "WarmupPlan",
    "WarmupResult",
    "WarmupSpec",
    "cache_key",
    "cache_root",
    "demonstration",
    "greedy_accuracy",
    "is_cached",
    "load_warm_policy",
    "supervised_warmup",
    "warm_start",
    "warmup_spec",
]
