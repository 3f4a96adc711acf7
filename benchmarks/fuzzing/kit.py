"""What a hostile peer knows of the node it attacks, and the pieces its batches are built from.

Everything in ``Kit`` is public in a real swarm: the run, the model's tokenizer (its fingerprint names it), the task
and its problems (a synthetic task's are a pure function of its settings), how the node renders a prompt, and the
length it samples. So a hostile peer can put the node's own problems, with the node's own prompts, in front of
whatever completions it likes: the batches that reach the node's step rather than its door.

The builders make protocol objects (``encode`` refuses anything the protocol cannot carry, so a ``Case`` built
here always decodes); ``raw.py`` edits their bytes where a case must be what the protocol refuses.
"""

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.fuzzing.peers import Case
from ftis.node.intake.shared_prompts import shared_group_id, shared_problems
from ftis.node.intake.text_groups import MAX_CHARACTERS_PER_TOKEN, RETOKENIZED_PER_TOKEN
from ftis.node.tasks import Problem, Task
from ftis.node.tasks.prompts import Prompter
from ftis.protocol import Completion, Group, PolicyInfo, RolloutBatch, SamplingSettings, TaskRef, TokenizerInfo, encode
from ftis.protocol.limits import MAX_TEXT_BYTES_PER_TOKEN, MAX_TEXT_SLACK_BYTES

OTHER_FINGERPRINT = "sha256:another-tokenizer"  # a peer of another tokenizer: its groups travel by their texts
OTHER_VOCAB = 1000


@dataclass(frozen=True)
class Kit:
    run_id: str
    fingerprint: str  # the node's tokenizer's
    vocab_size: int  # its tokenizer's entries (what its batches declare)
    embedding_rows: int  # its model's: an id at or above has no embedding
    tokenizer: Any
    prompter: Prompter
    task: Task
    split: str  # the split it trains on
    max_new_tokens: int  # the most tokens it samples: the door's bound on a completion
    max_text_characters: int  # ...and on another tokenizer's text (``text_groups.py``: the most it tokenizes)
    group_size: int
    prompts_per_round: int
    swarm_seed: int
    horizontal: bool  # its groups' ids are the round's shared ones
    round: int  # the node's round now

    @classmethod
    def of(cls, node: Any) -> "Kit":
        config = node.config
        return cls(config.swarm.run_id, node.policy.fingerprint, len(node.policy.tokenizer),
                   int(node.policy.model.get_input_embeddings().weight.shape[0]), node.policy.tokenizer,
                   node.prompter, node.task, config.task.split, config.generation.max_new_tokens,
                   MAX_CHARACTERS_PER_TOKEN * RETOKENIZED_PER_TOKEN * config.generation.max_new_tokens,
                   config.generation.group_size,
                   config.generation.prompts_per_round, config.loop.swarm_seed, config.loop.grouping == "horizontal",
                   node.round)

    def ids(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer(text, add_special_tokens=False)["input_ids"], np.int64)

    def problem(self, rng: random.Random) -> Problem:
        size = self.task.size(self.split)
        return self.task.problem(self.split, rng.randrange(size if size is not None else 2**31 - 1))

    def shared(self, round_: int) -> list[tuple[str, Problem]]:
        """The round's shared prompts, with their group ids (horizontal grouping)."""
        problems = shared_problems(self.task, self.split, self.prompts_per_round, self.swarm_seed, round_)
        return [(shared_group_id(self.run_id, round_, k), problem) for k, problem in enumerate(problems)]


def group_id(peer_id: str, round_: int, k: int) -> str:
    """A vertical group id as nodes make them (``peer/round/k``), within the protocol's 256 characters."""
    return f"{peer_id[:200]}/{round_}/{k}"


def tagged(answer: str, think: str = "1") -> str:
    """A completion in the tag format the node's tasks reward."""
    return f"<think> {think} </think> <answer> {answer} </answer>"


def varied(problem: Problem, count: int, wrong: str = "x") -> list[str]:
    """``count`` tagged completions, every other one right: rewards that vary, so a usable group is trained on."""
    return [tagged(problem.answer if c % 2 else wrong) for c in range(count)]


def sized(kit: Kit, text: str, length: int) -> np.ndarray:
    """``text`` in the node's tokens, made exactly ``length`` long: think filler inserted (the answer kept), or cut."""
    ids = kit.ids(text)
    if len(ids) >= length:
        return ids[-length:]
    filler = np.resize(kit.ids(" 1"), length - len(ids))
    at = 1  # after "<think>"
    return np.concatenate([ids[:at], filler, ids[at:]])


Logprobs = float | Callable[[int], np.ndarray]  # every token's, or each completion's from its length


def completion(ids: np.ndarray, *, logprob: Logprobs = -1.0, finish: str = "length",
               text: str | None = None) -> Completion:
    ids = np.asarray(ids, np.int64)
    logprobs = logprob(len(ids)) if callable(logprob) else np.full(len(ids), logprob)
    return Completion(ids, np.asarray(logprobs, np.float32), 0.0, finish, text)


def own_group(kit: Kit, group_id: str, problem: Problem, rows: Sequence[np.ndarray], *,
              prompt: np.ndarray | None = None, ref: TaskRef | None = None, logprob: Logprobs = -1.0,
              finish: str = "length") -> Group:
    """A group in the node's tokens: on ``problem`` with the node's prompt unless told otherwise."""
    ref = ref if ref is not None else TaskRef(problem.dataset, problem.split, problem.index, problem.answer)
    return Group(group_id, ref, kit.prompter.ids(problem) if prompt is None else prompt,
                 tuple(completion(ids, logprob=logprob, finish=finish) for ids in rows))


def text_group(group_id: str, problem: Problem, texts: Sequence[str], *, ref: TaskRef | None = None,
               finish: str = "stop", id_of: int = 7) -> Group:
    """A group of another tokenizer, carried by its texts: each completion as many ids as its text needs (the
    protocol bounds a text's bytes by its tokens)."""
    ref = ref if ref is not None else TaskRef(problem.dataset, problem.split, problem.index, problem.answer)
    rows = [np.full(max(1, -(-(len(t.encode()) - MAX_TEXT_SLACK_BYTES) // MAX_TEXT_BYTES_PER_TOKEN)), id_of)
            for t in texts]
    return Group(group_id, ref, np.arange(1, 9, dtype=np.int64),
                 tuple(completion(ids, finish=finish, text=text) for ids, text in zip(rows, texts, strict=True)))


def batch(kit: Kit, peer_id: str, round_: int, groups: Sequence[Group], *, fingerprint: str | None = None,
          vocab_size: int | None = None, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
          max_new_tokens: int | None = None, created_at: float | None = None, policy_version: int = 0) -> RolloutBatch:
    """A batch of ``peer_id``'s, in the node's tokenizer unless told otherwise (another's: ``OTHER_VOCAB``)."""
    other = fingerprint is not None and fingerprint != kit.fingerprint
    longest = max(int(c.columns.lengths.max()) for c in groups)
    return RolloutBatch(kit.run_id, peer_id, round_, time.time() if created_at is None else created_at,
                        PolicyInfo("hostile", "", "full", policy_version),
                        TokenizerInfo(fingerprint or kit.fingerprint,
                                      vocab_size or (OTHER_VOCAB if other else kit.vocab_size)),
                        SamplingSettings(temperature, top_p, top_k, max_new_tokens or longest), tuple(groups))


def case(kind: str, made: RolloutBatch, **changes: object) -> Case:
    """The case of a built batch: its bytes, as its peer announces them (``changes``: the descriptor's lies)."""
    return Case(kind, made.peer_id, made.round, encode(made), made.tokenizer.fingerprint, made.created_at,
                dict(changes))
