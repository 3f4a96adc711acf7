"""``printable``: a peer's string, safe to show. Every character a terminal or a page would act on or hide is
escaped as Python writes it; visible text of any script stays; the length is capped.

Run: python -m pytest tests/test_printable.py -q
"""

import pytest

from ftis.node.printable import MAX_SHOWN_CHARS, printable


@pytest.mark.parametrize(("text", "shown"), [
    ("tiny-small", "tiny-small"),  # plain names are left alone
    ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"),
    ("modèle 模型 модель", "modèle 模型 модель"),  # visible letters of any script
    ("\x1b[2J\x1b]0;pwned\x07", "\\x1b[2J\\x1b]0;pwned\\x07"),  # clear screen, window title (C0 controls)
    ("a\x9b31mb\x85", "a\\x9b31mb\\x85"),  # C1 controls (CSI, NEL)
    ("row\nfake row\r", "row\\nfake row\\r"),  # newlines: no row of their own
    ("txt\u202eexe.", "txt\\u202eexe."),  # a right-to-left override
    ("\u2066a\u2069 \u200b\u200d\ufeff", "\\u2066a\\u2069 \\u200b\\u200d\\ufeff"),  # isolates, zero-width, BOM
    ("a\u00a0b\tc\u3000", "a\\xa0b\\tc\\u3000"),  # spaces other than U+0020
    ("\u2028\u2029\ue000\U000e0001", "\\u2028\\u2029\\ue000\\U000e0001"),  # separators, private use, a tag
    ("\x7f\x00", "\\x7f\\x00"),
])
def test_every_character_a_terminal_or_a_page_would_act_on_is_escaped(text, shown):
    assert printable(text) == shown


def test_the_length_is_capped():
    assert printable("x" * 500) == "x" * (MAX_SHOWN_CHARS - 1) + "…"
    assert printable("\x1b" * 500, max_chars=12) == "\\x1b\\x1b\\x1…"  # escaped first, then cut
    assert printable("abc", max_chars=3) == "abc"
    assert all(len(printable(chr(c) * 300)) <= MAX_SHOWN_CHARS for c in (0x1b, 0x202E, 0x41, 0x10FFFF))


def test_anything_else_is_shown_as_its_text():
    assert printable(12) == "12" and printable(None) == "None"
