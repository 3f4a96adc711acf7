"""What a real model needs to be trained on a task (docs/prompts.md), on the two real models (``models fetch``):
SmolLM2-135M-Instruct in its chat template with solved examples, and Gemma 3 270M, a base model without a template,
with its begin-of-sequence token, solved examples in the plain layout and a stop string.

Each is evaluated greedily through ``evaluate`` as a node evaluates (its ``Prompter`` and stop strings) on a few
two-digit additions: without solved examples neither writes the answer format (``in_format`` near 0, accuracy 0);
with them both do, and stop where the answer ends.
"""

import math

import pytest
import torch
from helpers.real_models import real_model

from ftis.node.evaluation.evaluation import evaluate
from ftis.node.generation.stops import StopStrings
from ftis.node.models import load_policy
from ftis.node.tasks import ArithmeticSettings, ArithmeticTask
from ftis.node.tasks.prompts import Prompter

TASK = ArithmeticTask(ArithmeticSettings(format="tags", max_digits=2, operations="+"))
PROBLEMS = 12
TEXT = "The quick brown fox jumps over the lazy dog. It was a sunny day, and the children played in the park."


@pytest.fixture(scope="module")
def smollm2():
    return load_policy(str(real_model("smollm2-135m-instruct")))


@pytest.fixture(scope="module")
def gemma():
    return load_policy(str(real_model("gemma-3-270m")))


def run(policy, prompter: Prompter, stop: StopStrings | None = None, max_new_tokens: int = 40):
    return evaluate(policy, TASK, "test", limit=PROBLEMS, batch_size=PROBLEMS, max_new_tokens=max_new_tokens,
                    prompter=prompter, stop=stop, keep_records=True)


def test_smollm2_answers_in_format_with_solved_examples_in_its_chat_template(smollm2):
    tokenizer = smollm2.tokenizer
    alone = Prompter.build(tokenizer, TASK)
    assert alone.chat and not alone.bos  # its template; its tokenizer adds no BOS
    without = run(smollm2, alone)
    shown = Prompter.build(tokenizer, TASK, few_shot=4)
    with_examples = run(smollm2, shown)
    assert without.in_format <= PROBLEMS // 4 and without.correct == 0
    assert with_examples.in_format >= PROBLEMS - 1
    assert all(record.finish_reason == "stop" for record in with_examples.records)  # it ends its turn itself
    assert tokenizer.decode(shown.ids(TASK.problem("test", 0)).tolist()).count("<|im_start|>assistant") == 5


def test_gemma_gets_its_bos_and_reads_text_far_better_with_it(gemma):
    tokenizer = gemma.tokenizer
    prompter = Prompter.build(tokenizer, TASK, model_bos_id=gemma.model.config.bos_token_id)
    assert not prompter.chat and prompter.bos and prompter.ids(TASK.problem("test", 0))[0] == tokenizer.bos_token_id
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]

    def nats_per_token(prefix: list[int]) -> float:  # the text's tokens after its first, read after ``prefix``
        with torch.no_grad():
            logits = gemma.model(input_ids=torch.tensor([prefix + ids])).logits[0, len(prefix) : -1]
        return torch.nn.functional.cross_entropy(logits.float(), torch.tensor(ids[1:])).item()

    with_bos, without = nats_per_token([tokenizer.bos_token_id]), nats_per_token([])
    assert math.isfinite(with_bos) and with_bos < without - 1.0, (with_bos, without)


def test_gemma_answers_in_format_and_stops_with_solved_examples_and_a_stop_string(gemma):
    tokenizer = gemma.tokenizer
    shown = Prompter.build(tokenizer, TASK, few_shot=4)
    assert shown.bos and shown.text(TASK.problem("test", 0)).endswith("?\n")
    never_stops = run(gemma, shown, max_new_tokens=24)
    assert all(record.finish_reason == "length" for record in never_stops.records)  # a base model never ends
    stopped = run(gemma, shown, StopStrings(tokenizer, ["</answer>"]))
    assert stopped.in_format >= PROBLEMS - 1
    assert all(record.finish_reason == "stop" and record.completion.rstrip().endswith("</answer>")
               for record in stopped.records)
