"""Prompt ids: raw task text, or the text inside the tokenizer's chat template (``[model] chat_template``)."""

import copy

import pytest

from ftis.node.models import load_policy
from ftis.node.tasks.prompts import ChatTemplateError, prompt_ids, renderings, uses_chat_template

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
