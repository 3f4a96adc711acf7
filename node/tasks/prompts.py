"""The token ids a node conditions on for a problem: how a task's prompt becomes what a model reads.

    prompter = Prompter.build(tokenizer, task, chat_template="auto", bos="auto", few_shot=4)
    ids = prompter.ids(problem)                   # what the generator conditions on and the batch carries

Three settings shape it, and every prompt a node makes goes through them: its own rounds, evaluation, the
warm-up, and the prompts it renders for a peer's groups of another tokenizer.

- ``[model] chat_template``: ``auto`` wraps the prompt in the tokenizer's chat template when it has one (an
  instruct model answers far better inside it), ``on`` requires one, ``off`` never uses it. Without a template
  the prompt is the task's text as it is ("raw"), and with solved examples the project's own plain layout:
  the instruction once, then each example's question and answer, a blank line after each (a newline after a
  one-line answer), then the question.
- ``[model] bos``: ``auto`` puts the tokenizer's begin-of-sequence token in front where the tokenizer itself
  adds one to a text (Gemma: a model fed no ``<bos>`` reads text at 5.1 nats a token instead of 2.0, and answers
  garbage), ``on`` always, ``off`` never adds one (a chat template that writes one keeps it).
- ``[task] few_shot``: k solved examples (``Task.solved``, drawn from ``Task.shot_split``, the same ones for
  every problem) before the question: in the chat template as earlier turns, raw in the plain layout. A small
  instruct model that never writes the answer format on its own learns it from them.

Whatever is chosen, the ids are exactly what the generator conditions on and what the batch carries as
``prompt_ids``. A receiving node trains on a peer's ``prompt_ids`` only when they are one of the renderings of
the named problem it makes itself (``Prompter.renderings``: raw and in the chat template where the tokenizer has
one, each with and without the begin-of-sequence token, with this node's solved examples), so a peer cannot put
another prompt in front of a problem whose gold answer it likes. Peers of one tokenizer must therefore use the
same ``few_shot``; peers of another tokenizer never need to (their prompts are rendered here).
"""

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from transformers import PreTrainedTokenizerBase

from ftis.node.errors import UserError
from ftis.node.tasks.base import Problem, Task

ChatTemplate = Literal["auto", "on", "off"]
BosSetting = Literal["auto", "on", "off"]
MAX_FEW_SHOT = 16  # solved examples a prompt may show (the config's bound)
_DRAWS_PER_SHOT = 20  # a synthetic split's draws per distinct example before giving up


class PromptError(UserError, ValueError):
    """The prompt settings cannot work with this model or task (the message says which and why)."""


class ChatTemplateError(PromptError):
    """``chat_template = "on"`` for a tokenizer that has no chat template."""


class BosError(PromptError):
    """``bos = "on"`` for a tokenizer without a begin-of-sequence token, or a tokenizer whose token is not the
    model's."""


class FewShotError(PromptError):
    """Solved examples asked of a task that has no split to take them from."""


def uses_chat_template(tokenizer: PreTrainedTokenizerBase, setting: ChatTemplate) -> bool:
    """Whether prompts are wrapped in the tokenizer's chat template under ``setting``."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if setting == "on" and not has_template:
        raise ChatTemplateError("chat_template = 'on' but the model's tokenizer has no chat template; "
                                "use 'auto' or 'off'")
    return has_template and setting != "off"


def adds_bos(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the tokenizer puts its begin-of-sequence token in front of a text on its own."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    with_special = tokenizer("a")["input_ids"]
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    return bool(with_special) and with_special[0] == bos and (not plain or plain[0] != bos)


def uses_bos(tokenizer: PreTrainedTokenizerBase, setting: BosSetting, model_bos_id: int | None = None) -> bool:
    """Whether prompts start with the begin-of-sequence token under ``setting``. ``model_bos_id``: the model's
    config's ``bos_token_id``; a tokenizer whose token differs from it is refused rather than used."""
    if setting == "off":
        return False
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        if setting == "on":
            raise BosError("bos = 'on' but the model's tokenizer has no begin-of-sequence token; use 'auto' or 'off'")
        return False
    wanted = setting == "on" or adds_bos(tokenizer)
    if wanted and model_bos_id is not None and int(model_bos_id) != int(bos):
        raise BosError(f"the tokenizer's begin-of-sequence token {tokenizer.bos_token!r} is id {bos}, but the model's "
                       f"config says bos_token_id {model_bos_id}: the tokenizer is not this model's "
                       "(or set bos = 'off')")
    return wanted


def prompt_ids(tokenizer: PreTrainedTokenizerBase, text: str, *, chat: bool) -> np.ndarray:
    """The int64 token ids of the one-turn prompt ``text`` (template applied when ``chat``), without a
    begin-of-sequence token the template does not write: ``Prompter`` is the whole rule."""
    if chat:
        text = _templated(tokenizer, [{"role": "user", "content": text}])
    return _encode(tokenizer, [text], None)[0]


def renderings(tokenizer: PreTrainedTokenizerBase, text: str) -> tuple[np.ndarray, ...]:
    """Both forms of the one-turn prompt ``text``: raw, and (when the tokenizer has a chat template) wrapped in it."""
    raw = prompt_ids(tokenizer, text, chat=False)
    if not getattr(tokenizer, "chat_template", None):
        return (raw,)
    return raw, prompt_ids(tokenizer, text, chat=True)


def shot_problems(task: Task, count: int) -> tuple[Problem, ...]:
    """``count`` solved-example problems of ``task``: the first ones of its ``shot_split`` (distinct questions)."""
    if count == 0:
        return ()
    if not 0 < count <= MAX_FEW_SHOT:
        raise FewShotError(f"few_shot must be between 0 and {MAX_FEW_SHOT}, not {count}")
    split = task.shot_split
    if split is None:
        raise FewShotError(f"{task.name} has no split to take solved examples from (it has "
                           f"{', '.join(task.splits)}): give it a 'train' data file, or set few_shot = 0")
    size = task.size(split)
    if size is not None and size < count:
        raise FewShotError(f"{task.name}/{split} has {size} problems, fewer than few_shot = {count}")
    chosen: dict[str, Problem] = {}
    for index in range(count * _DRAWS_PER_SHOT if size is None else size):
        problem = task.problem(split, index)
        chosen.setdefault(problem.question, problem)
        if len(chosen) == count:
            return tuple(chosen.values())
    raise FewShotError(f"{task.name}/{split}: fewer than {count} distinct problems to show as solved examples")


@dataclass(frozen=True)
class Prompter:
    """How this node renders a problem of ``task`` into the ids its model conditions on (module docstring)."""

    tokenizer: PreTrainedTokenizerBase
    task: Task
    chat: bool  # in the tokenizer's chat template
    bos: bool  # the begin-of-sequence token in front
    shots: tuple[Problem, ...] = ()  # solved examples before the question

    @classmethod
    def build(cls, tokenizer: PreTrainedTokenizerBase, task: Task, *, chat_template: ChatTemplate = "auto",
              bos: BosSetting = "auto", few_shot: int = 0, model_bos_id: int | None = None) -> "Prompter":
        """The prompter the settings give; ``PromptError`` when they cannot work with this tokenizer or task."""
        return cls(tokenizer, task, uses_chat_template(tokenizer, chat_template),
                   uses_bos(tokenizer, bos, model_bos_id), shot_problems(task, few_shot))

    def text(self, problem: Problem, *, chat: bool | None = None) -> str:
        """The prompt as text (special tokens as their strings), in the template when ``chat`` (default: the
        node's choice)."""
        if self.chat if chat is None else chat:
            return _templated(self.tokenizer, self.messages(problem))
        return self._plain(problem)

    def ids(self, problem: Problem) -> np.ndarray:
        """The int64 ids the model conditions on for ``problem``."""
        return self.many_ids([problem])[0]

    def many_ids(self, problems: list[Problem]) -> list[np.ndarray]:
        """``ids`` of each of ``problems``, in one call of the tokenizer."""
        bos = getattr(self.tokenizer, "bos_token_id", None) if self.bos else None
        return _encode(self.tokenizer, [self.text(problem) for problem in problems], bos)

    def renderings(self, problem: Problem) -> tuple[np.ndarray, ...]:
        """Every form of ``problem``'s prompt a peer of this tokenizer may condition on (module docstring)."""
        forms = [False, True] if getattr(self.tokenizer, "chat_template", None) else [False]
        bos = self.tokenizer.bos_token_id
        found: list[np.ndarray] = []
        for chat in forms:
            ids = _encode(self.tokenizer, [self.text(problem, chat=chat)], None)[0]
            with_bos = ids if bos is None or ids[0] == bos else np.concatenate([[bos], ids]).astype(np.int64)
            for form in (ids, with_bos):
                if not any(np.array_equal(form, other) for other in found):
                    found.append(form)
        return tuple(found)

    def messages(self, problem: Problem) -> list[dict[str, str]]:
        """The conversation of the chat form: the solved examples as earlier turns, then the question."""
        parts = self.task.prompt_parts(problem)
        if not self.shots:
            return [{"role": "user", "content": parts.text}]
        turns: list[dict[str, str]] = []
        for k, shot in enumerate(self.shots):
            shot_parts = self.task.prompt_parts(shot)
            turns += [{"role": "user", "content": shot_parts.text if k == 0 else shot_parts.question},
                      {"role": "assistant", "content": self.task.solved(shot)}]
        return [*turns, {"role": "user", "content": parts.question}]

    def _plain(self, problem: Problem) -> str:
        """The raw form: the task's text alone, or the plain layout with solved examples."""
        parts = self.task.prompt_parts(problem)
        if not self.shots:
            return parts.text
        pieces = [f"{parts.instruction}\n\n"] if parts.instruction else []
        for shot in self.shots:
            shot_parts = self.task.prompt_parts(shot)
            pieces.append(f"{shot_parts.question}{shot_parts.lead}{self.task.solved(shot)}{shot_parts.gap}")
        return "".join([*pieces, parts.question, parts.lead])


def _templated(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> str:
    """``messages`` in the tokenizer's chat template, the assistant's turn opened."""
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def _encode(tokenizer: PreTrainedTokenizerBase, texts: list[str], bos: int | None) -> list[np.ndarray]:
    # A rendered template already holds its special tokens (a BOS where the template writes one).
    encoded = []
    for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        if not ids:
            raise ValueError("the prompt is empty after tokenization")
        if bos is not None and ids[0] != bos:
            ids = [bos, *ids]
        encoded.append(np.asarray(ids, dtype=np.int64))
    return encoded


def policy_prompter(policy: Any, task: Task, *, chat_template: ChatTemplate, bos: BosSetting,
                    few_shot: int) -> Prompter:
    """``Prompter.build`` for a loaded ``Policy``: its tokenizer, checked against its model's begin-of-sequence id."""
    config = getattr(policy.model, "config", None)
    return Prompter.build(policy.tokenizer, task, chat_template=chat_template, bos=bos, few_shot=few_shot,
                          model_bos_id=getattr(config, "bos_token_id", None))
