"""Prompt ids: raw task text, or the text inside the tokenizer's chat template (``[model] chat_template``), with
the begin-of-sequence token (``[model] bos``) and solved examples (``[task] few_shot``)."""

import copy
import json

import pytest
from tokenizers.processors import TemplateProcessing

from ftis.node.models import load_policy
from ftis.node.tasks import ArithmeticSettings, ArithmeticTask, GSM8KTask
from ftis.node.tasks.prompts import (
    BosError,
    ChatTemplateError,
    FewShotError,
    Prompter,
    adds_bos,
    prompt_ids,
    renderings,
    uses_chat_template,
)

TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer():
    return load_policy("tiny-small").tokenizer


@pytest.fixture(scope="module")
def chat_tokenizer(tokenizer):
    templated = copy.deepcopy(tokenizer)
    templated.chat_template = TEMPLATE
    return templated


def test_raw_prompt_is_the_plain_tokenization(tokenizer):
    ids = prompt_ids(tokenizer, "2+3=", chat=False)
    assert ids.dtype.name == "int64"
    assert tokenizer.decode(ids.tolist()) == "2+3="


def test_chat_prompt_wraps_the_text_in_one_user_turn_and_opens_the_assistant_turn(chat_tokenizer):
    ids = prompt_ids(chat_tokenizer, "2+3=", chat=True)
    assert chat_tokenizer.decode(ids.tolist()) == "<user>2+3=</user><assistant>"


@pytest.mark.parametrize(("setting", "expected"), [("auto", True), ("on", True), ("off", False)])
def test_setting_with_a_template(chat_tokenizer, setting, expected):
    assert uses_chat_template(chat_tokenizer, setting) is expected


def test_setting_without_a_template(tokenizer):
    assert uses_chat_template(tokenizer, "auto") is False
    assert uses_chat_template(tokenizer, "off") is False
    with pytest.raises(ChatTemplateError, match="no chat template"):
        uses_chat_template(tokenizer, "on")


def test_empty_prompt_is_refused(tokenizer):
    with pytest.raises(ValueError, match="empty"):
        prompt_ids(tokenizer, "", chat=False)


def test_renderings_are_the_raw_form_and_the_template_form_where_there_is_one(tokenizer, chat_tokenizer):
    # What a receiver accepts as the prompt of one of its problems: peers with its tokenizer may use either form.
    [raw] = renderings(tokenizer, "2+3=")
    assert raw.tolist() == prompt_ids(tokenizer, "2+3=", chat=False).tolist()
    plain, templated = renderings(chat_tokenizer, "2+3=")
    assert plain.tolist() == raw.tolist()
    assert templated.tolist() == prompt_ids(chat_tokenizer, "2+3=", chat=True).tolist() != raw.tolist()


# --- The whole rule: Prompter (begin-of-sequence token, solved examples, renderings) ---------------------------


@pytest.fixture(scope="module")
def bos_tokenizer(tokenizer):
    """The tiny tokenizer, but one that puts its <bos> in front of a text itself (as Gemma's does)."""
    adding = copy.deepcopy(tokenizer)
    adding.backend_tokenizer.post_processor = TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", tokenizer.bos_token_id)])
    return adding


TAGS = ArithmeticTask(ArithmeticSettings(format="tags", max_digits=2, operations="+"))
PLAIN = ArithmeticTask(ArithmeticSettings(max_digits=2, operations="+"))


def test_without_examples_or_bos_the_prompter_gives_the_one_turn_prompt(tokenizer, chat_tokenizer):
    # What every node made before these settings existed: the tiny models' prompts, warm starts and fixtures.
    problem = TAGS.problem("train", 5)
    for tok, chat in ((tokenizer, False), (chat_tokenizer, True)):
        prompter = Prompter.build(tok, TAGS)
        assert (prompter.chat, prompter.bos, prompter.shots) == (chat, False, ())
        assert prompter.ids(problem).tolist() == prompt_ids(tok, TAGS.prompt(problem), chat=chat).tolist()


def test_auto_bos_follows_the_tokenizer(tokenizer, bos_tokenizer):
    problem = PLAIN.problem("test", 0)
    assert adds_bos(bos_tokenizer) and not adds_bos(tokenizer)
    ids = Prompter.build(bos_tokenizer, PLAIN).ids(problem).tolist()
    assert ids[0] == bos_tokenizer.bos_token_id and ids[1:] == prompt_ids(tokenizer, PLAIN.prompt(problem),
                                                                          chat=False).tolist()
    assert Prompter.build(tokenizer, PLAIN).ids(problem)[0] != tokenizer.bos_token_id
    assert Prompter.build(bos_tokenizer, PLAIN, bos="off").ids(problem)[0] != tokenizer.bos_token_id
    assert Prompter.build(tokenizer, PLAIN, bos="on").ids(problem)[0] == tokenizer.bos_token_id


def test_bos_is_written_once_in_a_template_that_writes_it(bos_tokenizer):
    templated = copy.deepcopy(bos_tokenizer)
    templated.chat_template = "{{ bos_token }}" + TEMPLATE
    ids = Prompter.build(templated, PLAIN).ids(PLAIN.problem("test", 0)).tolist()
    assert ids[0] == templated.bos_token_id and ids[1] != templated.bos_token_id


def test_bos_settings_the_model_cannot_take_are_refused(tokenizer, bos_tokenizer):
    no_bos = copy.deepcopy(tokenizer)
    no_bos.bos_token = None
    with pytest.raises(BosError, match="no begin-of-sequence token"):
        Prompter.build(no_bos, PLAIN, bos="on")
    assert Prompter.build(no_bos, PLAIN).bos is False  # auto: nothing to add
    with pytest.raises(BosError, match="bos_token_id 7"):  # a tokenizer that is not this model's
        Prompter.build(bos_tokenizer, PLAIN, model_bos_id=7)
    assert Prompter.build(bos_tokenizer, PLAIN, model_bos_id=bos_tokenizer.bos_token_id).bos
    assert Prompter.build(bos_tokenizer, PLAIN, bos="off", model_bos_id=7).bos is False  # not used: no conflict


def test_raw_prompt_with_examples_is_the_plain_layout(tokenizer):
    prompter = Prompter.build(tokenizer, TAGS, few_shot=2)
    first, second = prompter.shots
    assert (first.split, second.split) == ("dev", "dev") and first.question != second.question
    problem = TAGS.problem("train", 9)
    instruction = TAGS.prompt_parts(problem).instruction
    assert prompter.text(problem) == (
        f"{instruction}\n\n"
        f"Problem: What is {first.question}?\n<think> {first.question}={first.answer} </think>\n"
        f"<answer> {first.answer} </answer>\n\n"
        f"Problem: What is {second.question}?\n<think> {second.question}={second.answer} </think>\n"
        f"<answer> {second.answer} </answer>\n\n"
        f"Problem: What is {problem.question}?\n")
    plain = Prompter.build(tokenizer, PLAIN, few_shot=3)
    shots = plain.shots
    assert plain.text(problem) == "".join(f"{s.question}={s.answer}\n" for s in shots) + f"{problem.question}="


def test_chat_prompt_with_examples_has_them_as_earlier_turns(chat_tokenizer):
    prompter = Prompter.build(chat_tokenizer, TAGS, few_shot=2)
    problem = TAGS.problem("train", 9)
    first, second = prompter.shots
    assert prompter.messages(problem) == [
        {"role": "user", "content": TAGS.prompt(first)},
        {"role": "assistant", "content": TAGS.solved(first)},
        {"role": "user", "content": TAGS.prompt_parts(second).question},
        {"role": "assistant", "content": TAGS.solved(second)},
        {"role": "user", "content": TAGS.prompt_parts(problem).question},
    ]
    assert chat_tokenizer.decode(prompter.ids(problem).tolist()).endswith(
        f"<user>Problem: What is {problem.question}?</user><assistant>")


def test_examples_are_the_same_for_every_problem_and_solved(tokenizer):
    a, b = Prompter.build(tokenizer, TAGS, few_shot=4), Prompter.build(tokenizer, TAGS, few_shot=4)
    assert a.shots == b.shots and len({shot.question for shot in a.shots}) == 4
    assert all(TAGS.reward(TAGS.solved(shot), shot.answer) == 1.0 for shot in a.shots)
    assert Prompter.build(tokenizer, TAGS, few_shot=2).shots == a.shots[:2]


def test_gsm8k_examples_show_the_worked_solution_without_calculator_notes(tokenizer, tmp_path):
    rows = [{"question": "Ann has 3 pens and buys 4. How many?", "answer": "3+4=<<3+4=7>>7 pens\n#### 7"},
            {"question": "Bob has 9 cups and breaks 2. How many?", "answer": "9-2=<<9-2=7>>7\n#### 7"}]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(row) + "\n" for row in rows))
    task = GSM8KTask(data_files={"train": train, "test": train})
    [shot] = Prompter.build(tokenizer, task, few_shot=1).shots
    assert task.solved(shot) == "<think> 3+4=7 pens </think>\n<answer> 7 </answer>"
    assert task.reward(task.solved(shot), shot.answer) == 1.0
    with pytest.raises(FewShotError, match="fewer than few_shot = 3"):
        Prompter.build(tokenizer, task, few_shot=3)
    with pytest.raises(FewShotError, match="no split to take solved examples from"):
        Prompter.build(tokenizer, GSM8KTask(data_files={"test": train}), few_shot=1)


def test_renderings_hold_this_nodes_forms_with_and_without_bos(bos_tokenizer):
    templated = copy.deepcopy(bos_tokenizer)
    templated.chat_template = TEMPLATE
    prompter = Prompter.build(templated, TAGS, few_shot=2)
    problem = TAGS.problem("train", 1)
    forms = [ids.tolist() for ids in prompter.renderings(problem)]
    assert prompter.ids(problem).tolist() in forms
    raw, chat = (Prompter.build(templated, TAGS, few_shot=2, chat_template=setting, bos="off").ids(problem).tolist()
                 for setting in ("off", "on"))
    bos = templated.bos_token_id
    assert sorted(forms) == sorted([raw, [bos, *raw], chat, [bos, *chat]])
    # another number of solved examples is another prompt: peers of one tokenizer agree on few_shot
    assert Prompter.build(templated, TAGS, few_shot=1).ids(problem).tolist() not in forms
