"""What ``ftis-node inspect`` shows: a saved batch read within a memory bound, and a printable summary of it."""

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from ftis.protocol.decode import read
from ftis.protocol.errors import DecodeError, UserError
from ftis.protocol.limits import MAX_PAYLOAD_BYTES
from ftis.protocol.schema import RolloutBatch


def read_batch_file(file: Path, max_memory_mb: float) -> tuple[RolloutBatch, int]:
    """The batch saved in ``file`` and its size in bytes. ``DecodeError`` for a file that is no valid batch (one
    over the payload limit refused before it is read); ``UserError`` for a valid one whose columns would take more
    than ``max_memory_mb`` to inflate (weighed before a byte is inflated); ``OSError`` for a file not read."""
    size = file.stat().st_size
    if size > MAX_PAYLOAD_BYTES:
        raise DecodeError("payload", f"{size} bytes is over the {MAX_PAYLOAD_BYTES}-byte limit")
    data = file.read_bytes()
    compressed = read(data)
    cost_mb = compressed.cost() / 2**20
    if cost_mb > max_memory_mb:
        raise UserError(f"{file} is a valid batch whose columns take up to {cost_mb:,.0f} MB to inflate, "
                        f"over --max-memory-mb {max_memory_mb:g}; raise it to read the batch anyway")
    return compressed.inflate(), len(data)


def summarize(batch: RolloutBatch, payload_bytes: int) -> list[tuple[str, str]]:
    """(label, value) rows describing ``batch``, whose encoded form was ``payload_bytes`` long."""
    completions = [c for group in batch.groups for c in group.completions]
    logprobs = np.concatenate([c.sampler_logprobs for c in completions])
    rewards = np.array([c.reward for c in completions])
    sizes = Counter(len(group.completions) for group in batch.groups)
    finish = Counter(c.finish_reason for c in completions)
    tokens = batch.num_completion_tokens
    created = datetime.fromtimestamp(batch.created_at, UTC).isoformat(timespec="seconds")
    policy = batch.policy
    texts = [c.text for c in completions if c.text is not None]
    return [
        ("run", batch.run_id),
        ("peer", batch.peer_id),
        ("sequence", str(batch.round)),
        ("created", created),
        ("policy", f"{policy.model}{'@' + policy.revision if policy.revision else ''} ({policy.adapter}), "
                   f"version {policy.policy_version}"),
        ("tokenizer", f"{batch.tokenizer.fingerprint} (vocab {batch.tokenizer.vocab_size})"),
        ("sampling", f"temperature {batch.sampling.temperature:g}, top-p {batch.sampling.top_p:g}, "
                     f"top-k {batch.sampling.top_k or 'off'}, max new tokens {batch.sampling.max_new_tokens}"),
        ("groups", f"{len(batch.groups)} (sizes: {_counts(sizes)})"),
        ("completions", f"{len(completions)} (finish: {_counts(finish)})"),
        ("tokens", f"{tokens} completion + {batch.num_prompt_tokens} prompt"),
        ("bytes", f"{payload_bytes} ({payload_bytes / tokens:.2f} per completion token)"),
        ("texts", f"{sum(len(t.encode()) for t in texts)} bytes of UTF-8 in {len(texts)} completions" if texts
                  else "none (the batch carries no texts)"),
        ("log-probs", f"mean {logprobs.mean():.3f}, min {logprobs.min():.3f}, "
                      f"{(logprobs >= -0.01).mean():.0%} of tokens ≥ -0.01"),
        ("rewards (advisory)", f"mean {rewards.mean():.3f}, min {rewards.min():g}, max {rewards.max():g}"),
    ]


def _counts(counter: Counter) -> str:
    return ", ".join(f"{key} (×{count})" for key, count in sorted(counter.items()))
