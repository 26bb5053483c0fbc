"""How text from outside (a server's body, a cell, a log, a marker file) is shown to a person: its control characters
escaped, so a server cannot move the cursor, clear a line or retitle the terminal, and Markdown's syntax escaped, so a
reason cannot become a remote image or a link where a committed page is rendered.

    print(f"  {shown(case_id)}  {shown(reason)}")   # terminal: C0/C1 controls as \\x1b, \\r, \\u009b
    f"| {md_text(reason)} |"                        # Markdown table cell or running text
    f"`{md_code(value)}`"                           # inside a code span

The escaped form is plain ASCII-visible text; nothing is dropped, so a person still sees that the text held escapes.
"""

from __future__ import annotations

import re

__all__ = ["shown", "shown_json", "shown_lines", "md_text", "md_code", "strip_ansi"]

# C0 controls (tab kept only where asked), DEL, C1 controls, and the Unicode line/paragraph separators and bidi
# overrides, which reorder or break what a terminal or a renderer shows.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_CONTROL_NO_TAB = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\x1b"}
# ANSI CSI / OSC sequences as a terminal reads them (for logs shown folded: the sequences go, the text stays).
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]")


def _escape(match: re.Match[str]) -> str:
    ch = match.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: object, *, keep_tab: bool = False) -> str:
    """`text` on one line with every control character escaped (newlines included)."""
    pattern = _CONTROL if keep_tab else _CONTROL_NO_TAB
    return pattern.sub(_escape, str(text))


# what json.dumps(ensure_ascii=False) leaves raw in a string that shown() escapes (JSON escapes C0 itself)
_JSON_RAW_CONTROL = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def shown_json(text: str) -> str:
    """A JSON text (json.dumps, ensure_ascii=False) safe for a terminal, and still the same JSON: each control
    character shown() escapes as a \\uXXXX escape (outside strings JSON text is ASCII, so each is inside a string,
    where the escape means the same character). Other non-ASCII text stays readable."""
    return _JSON_RAW_CONTROL.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def shown_lines(text: object) -> str:
    """`text` with its line breaks kept and every other control character escaped (a log tail, a multi-line reason)."""
    return "\n".join(shown(line, keep_tab=True) for line in str(text).replace("\r\n", "\n").split("\n"))


def strip_ansi(text: object) -> str:
    """`text` without its ANSI escape sequences (colour, cursor moves, titles); other controls are left to shown()."""
    return _ANSI.sub("", str(text))


# Every character Markdown (CommonMark + GFM tables) gives a meaning to inside a line: escaped with a backslash, so
# `![x](https://host/p.png)` stays text and `|` does not end a table cell. `<` and `&` become entities (raw HTML).
# (`#`, `-`, `+`, `.`, `>` mean something only at a line's start, which an escaped one-line text never is.)
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()!|~])")


def md_text(text: object) -> str:
    """`text` for Markdown running text or a table cell: one line, controls escaped, Markdown syntax inert."""
    one = shown(text).replace("&", "&amp;").replace("<", "&lt;")
    return _MD_SPECIAL.sub(r"\\\1", one)


def md_code(text: object) -> str:
    """`text` for the inside of a single-backtick code span: one line, no backtick (which would end the span), and `|`
    escaped for a table cell. A code span shows backslashes literally, so a backtick becomes U+02CB, which reads alike."""
    return shown(text).replace("`", "\u02cb").replace("|", "\\|")
