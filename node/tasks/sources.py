"""Where dataset rows come from: a local JSONL file per split, or ``datasets.load_dataset`` by hub name.

``SplitTable`` loads a split on first use and keeps its problems, so building a task is instant and
offline; only ``problem``/``size`` on a split reach for the file or the hub (and ``datasets`` is
imported only then).
"""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ftis.node.tasks.base import Problem, PromptParts, TaskDataError, UnknownSplitError, check_index
from ftis.node.tasks.tags import tag_parts, tagged_answer, tagged_completion


@dataclass(frozen=True)
class HubDataset:
    path: str  # e.g. "openai/gsm8k"
    config: str | None  # e.g. "main"; None for datasets without configs
    splits: tuple[str, ...]


def read_jsonl(path: str | Path, fields: tuple[str, ...]) -> list[dict]:
    """The rows of a JSONL file, each an object holding at least ``fields`` as strings; blank lines skipped."""
    rows = []
    with open(path, encoding="utf-8") as file:
        for line_number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise TaskDataError(f"{path}:{line_number}: not JSON ({error.msg})") from error
            check_row(row, fields, f"{path}:{line_number}")
            rows.append(row)
    return rows


def load_hub_split(hub: HubDataset, split: str) -> list[dict]:
    """The rows of one split of a Hugging Face dataset (downloads on first use, then the local cache)."""
    import datasets  # heavy: only when a split is actually loaded from the hub

    args = (hub.path,) if hub.config is None else (hub.path, hub.config)
    return [dict(row) for row in datasets.load_dataset(*args, split=split)]


def check_row(row: object, fields: tuple[str, ...], where: str) -> None:
    if not isinstance(row, dict):
        raise TaskDataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for field in fields:
        if not isinstance(row.get(field), str):
            raise TaskDataError(f"{where}: field {field!r} missing or not a string")


class SplitTable:
    """The problems of each split, loaded from ``data_files`` (split -> JSONL path) when given, else from
    the hub, on first use. ``to_problem(row, split, index)`` turns a checked row into a ``Problem``."""

    def __init__(
        self,
        dataset: str,
        hub: HubDataset,
        data_files: Mapping[str, str | Path] | None,
        fields: tuple[str, ...],
        to_problem: Callable[[dict, str, int], Problem],
    ):
        if data_files is not None and not data_files:
            raise TaskDataError(f"{dataset}: data_files is empty")
        self.dataset = dataset
        self.hub = hub
        self.data_files = None if data_files is None else {split: Path(path) for split, path in data_files.items()}
        self.fields = fields
        self.to_problem = to_problem
        self._loaded: dict[str, tuple[Problem, ...]] = {}

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.data_files) if self.data_files is not None else self.hub.splits

    def problems(self, split: str) -> tuple[Problem, ...]:
        if split not in self.splits:
            raise UnknownSplitError(f"{self.dataset}: no split {split!r} (has {', '.join(self.splits)})")
        if split not in self._loaded:
            self._loaded[split] = self._load(split)
        return self._loaded[split]

    def problem(self, split: str, index: int) -> Problem:
        problems = self.problems(split)
        check_index(self.dataset, split, index, len(problems))
        return problems[index]

    def _load(self, split: str) -> tuple[Problem, ...]:
        if self.data_files is not None:
            rows, origin = read_jsonl(self.data_files[split], self.fields), str(self.data_files[split])
        else:
            rows, origin = load_hub_split(self.hub, split), f"{self.hub.path}[{split}]"
        problems = []
        for index, row in enumerate(rows):
            check_row(row, self.fields, f"{origin} row {index}")
            try:
                problems.append(self.to_problem(row, split, index))
            except TaskDataError as error:
                raise TaskDataError(f"{origin} row {index}: {error}") from error
        return tuple(problems)



class TaggedTableTask:
    """What GSM8K and MATH-500 share: problems from a ``SplitTable`` and the tag-format prompt and
    answer. A subclass sets ``name``, ``answer_hint``, builds ``self._table`` and scores answers.

    Solved examples (few-shot) come from the "train" split, when the task has one: the worked solution inside the
    think tags, the gold answer inside the answer tags."""

    name: str
    answer_hint: str
    answer_format = "tags"
    _table: SplitTable

    @property
    def splits(self) -> tuple[str, ...]:
        return self._table.splits

    @property
    def shot_split(self) -> str | None:
        return "train" if "train" in self.splits else None

    def problem(self, split: str, index: int) -> Problem:
        return self._table.problem(split, index)

    def size(self, split: str) -> int:
        return len(self._table.problems(split))

    def prompt(self, problem: Problem) -> str:
        return self.prompt_parts(problem).text

    def prompt_parts(self, problem: Problem) -> PromptParts:
        return tag_parts(problem.question, self.answer_hint)

    def solved(self, problem: Problem) -> str:
        return tagged_completion(problem.solution or problem.answer, problem.answer)

    def parse_answer(self, completion_text: str) -> str | None:
        return tagged_answer(completion_text)
