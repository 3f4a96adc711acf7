"""GSM8K (the paper's training and in-distribution set): grade-school word problems with a number answer.

Rows come from ``datasets.load_dataset("openai/gsm8k", "main", split=...)`` or from local JSONL files
(one per split) with the same fields: ``question`` and ``answer``, the worked solution ending in
``#### <number>``. The gold answer is that number, commas removed ("1,000" -> "1000").

Reward (binary): the completion follows the tag format (``tags.py``) and the one number in its answer
equals the gold number (``numeric.py``: "18", "18.0", "$18", "18." all equal 18).
"""

import re
from collections.abc import Mapping
from pathlib import Path

from ftis.node.tasks.base import Problem, TaskDataError
from ftis.node.tasks.numeric import tagged_number_reward
from ftis.node.tasks.sources import HubDataset, SplitTable, TaggedTableTask

GSM8K_HUB = HubDataset(path="openai/gsm8k", config="main", splits=("train", "test"))
ANSWER_HINT = "a single number, without units"
_GOLD = re.compile(r"-?\d+(?:\.\d+)?")
_CALCULATOR = re.compile(r"<<[^<>]*>>")  # GSM8K's calculator annotations: "48/2=<<48/2=24>>24"


def worked_solution(solution: str) -> str:
    """The reasoning of a GSM8K solution: before its ``####`` line, without the calculator annotations."""
    return _CALCULATOR.sub("", solution.rsplit("####", 1)[0]).strip()


def gold_number(solution: str) -> str:
    """The number after the last ``####`` of a GSM8K solution, commas removed."""
    if "####" not in solution:
        raise TaskDataError("the answer has no '#### <number>' line")
    gold = solution.rsplit("####", 1)[1].strip().replace(",", "")
    if not _GOLD.fullmatch(gold):
        raise TaskDataError(f"the gold answer {gold!r} is not a number")
    return gold


class GSM8KTask(TaggedTableTask):
    """GSM8K by hub name (splits "train" and "test") or from ``data_files`` (split name -> JSONL path)."""

    name = "gsm8k"
    answer_hint = ANSWER_HINT

    def __init__(self, data_files: Mapping[str, str | Path] | None = None, hub: HubDataset = GSM8K_HUB):
        self._table = SplitTable(self.name, hub, data_files, ("question", "answer"), self._to_problem)

    def reward(self, completion_text: str, gold: str) -> float:
        return tagged_number_reward(completion_text, gold)

    def _to_problem(self, row: dict, split: str, index: int) -> Problem:
        return Problem(self.name, split, index, row["question"], gold_number(row["answer"]),
                       worked_solution(row["answer"]))
