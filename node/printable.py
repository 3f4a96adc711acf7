"""Strings a peer wrote, made safe to show on a terminal, in a log line or on a page: ``printable(text)``.

Peers choose their model name, tokenizer name, peer id, reach and relay addresses; a name such as
``"\\x1b[2J\\x1b]0;pwned\\x07"`` would clear a terminal and set its title, a newline would print a fake row, a
right-to-left override (U+202E) would show ``exe.txt`` for ``txt.exe``, a zero-width space would make two ids
look alike. ``printable`` escapes every character that is not a visible one or a plain space, as Python writes
it (``\\x1b``, ``\\n``, ``\\u202e``), and caps the length:

    printable("tiny\\x1b[2J")          # 'tiny\\\\x1b[2J'  (a backslash, then x1b: seen, not obeyed)
    printable("x" * 500)               # 79 x's and '…'

Escaped: Unicode's control (Cc: C0, DEL, C1), format (Cf: bidi overrides and isolates, zero-width characters,
the BOM, soft hyphen), line and paragraph separator (Zl, Zp), surrogate, private-use and unassigned (Cs, Co,
Cn) characters, and every space other than U+0020 (tabs, no-break and ideographic spaces).
"""

import unicodedata

MAX_SHOWN_CHARS = 80  # a peer string shown longer than this is cut, ending in "…"
_ESCAPED = frozenset({"Cc", "Cf", "Zl", "Zp", "Zs", "Cs", "Co", "Cn"})


def printable(text: object, max_chars: int = MAX_SHOWN_CHARS) -> str:
    """``text`` (``str()`` of it when it is no string) with every character that is not visible escaped, at most
    ``max_chars`` characters long (cut, ending in "…")."""
    text = text if isinstance(text, str) else str(text)
    shown = "".join(_shown(char) for char in text[: max_chars + 1]) if not text.isprintable() else text
    return shown if len(shown) <= max_chars else shown[: max_chars - 1] + "…"


def _shown(char: str) -> str:
    if char == " " or unicodedata.category(char) not in _ESCAPED:
        return char
    return char.encode("unicode_escape").decode("ascii")
