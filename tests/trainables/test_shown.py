"""trainables.shown: file text on a terminal and in MLflow's Markdown, shown as written."""

from __future__ import annotations

import pytest

from trainables.shown import in_code, in_markdown, shown

CONTROLS = [chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0))]
MARKS = ["\u061c", "\u200e", "\u200f"]
BIDI = [*MARKS, *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))]


@pytest.mark.parametrize("char", CONTROLS + BIDI)
def test_every_steering_character_is_written_as_its_escape(char):
    code = ord(char)
    escape = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    assert shown(f"a{char}b") == f"a{escape}b"


def test_ordinary_text_newlines_tabs_and_backslashes_are_unchanged_and_twice_is_once():
    text = "τ=0.1 B=64 — café\tC:\\data\\x1b\nnext line ✓"
    assert shown(text) == text
    nasty = "\x1b[2J\x1b]52;c;ZWNobw==\x07\u202e"
    assert shown(shown(nasty)) == shown(nasty) == "\\x1b[2J\\x1b]52;c;ZWNobw==\\x07\\u202e"


def test_markdown_keeps_html_links_and_emphasis_from_rendering():
    text = '<img src="http://e.example/x.png"> [x](http://e.example/y) *b* _i_ `c` ~~s~~ a|b @bob'
    out = in_markdown(text)
    assert "<" not in out and ">" not in out and "&lt;img" in out
    assert "http://" not in out and "http&#58;//" in out  # no bare address to link
    assert "\\[x\\]" in out and "\\*b\\*" in out and "\\_i\\_" in out and "\\`c\\`" in out
    assert "\\~\\~s\\~\\~" in out and "a\\|b" in out and "&#64;bob" in out
    assert in_markdown("www.e.example") == "www&#46;e.example"
    assert in_markdown("&lt;") == "&amp;lt;"  # an entity in the file reads as typed


def test_markdown_blocks_are_not_opened_by_a_line_and_words_read_as_before():
    out = in_markdown("# h\n- item\n+ item\n1. one\n2) two\n===\n    code\n> quote")
    assert out.splitlines() == ["\\# h", "\\- item", "\\+ item", "1\\. one", "2\\) two",
                                "\\===", "code", "&gt; quote"]  # fmt: skip
    plain = "No factor has a detectable effect on probe/knn_top1_h (τ=0.1, B=64; 84.5%)."
    assert in_markdown(plain) == plain  # the analysis' own words are unchanged
    assert in_markdown("0.1, 0.5") == "0.1, 0.5" and in_markdown("-5 degrees") == "-5 degrees"


def test_markdown_is_cut_within_its_limit_never_inside_an_escape():
    out = in_markdown("<" * 100, limit=50)
    assert len(out) <= 50 and out == "&lt;" * (len(out) // 4)
    assert in_markdown("short", limit=50) == "short"


def test_code_span_fences_the_backticks_it_holds():
    assert in_code("probe/knn_top1_h") == "`probe/knn_top1_h`"
    assert in_code("a`b") == "``a`b``"
    assert in_code("`x\ny\x1b") == "`` `x y\\x1b ``"
