"""Issues #28/#29 in the engine: tfm.core.escape (every echoed value as plain, short text), the
temperature snap at the extremes, tokens of a padded vocabulary, the allowed-folder refusal
and the upload bound. Markdown is checked with the `markdown` package's CommonMark-style
renderer where it is installed (Streamlit's own renderer runs in the browser: the e2e test)."""

from __future__ import annotations

import io
import math
import re
import zipfile

import pytest

import tfm
from tfm.analysis import attribution
from tfm.core.escape import ZWSP, escape_markdown, plain, short, visible
from tfm.loaders.paths import resolve_allowed
from tfm.viz.sampling import TEMPERATURES, nearest_temperature

HOSTILE = [
    "[Log in again](https://example.com/login)",
    "![x](http://host/pixel.png)",
    "<img src=x onerror=a()>",
    "# Heading",
    "**b** _e_ `c` ~~s~~ $x$",
    ":red[x] :smile:",
    "www.example.com a@b.example",
    "<https://example.com>",
    "\\[x\\](y)",
    "- item",
    "1. item",
    "&lt;b&gt;",
    "a | b",
]


def unescape(text: str) -> str:
    """What the reader sees (the zero-width spaces that break autolinks are invisible)."""
    return re.sub(r"\\(.)", r"\1", text).replace(ZWSP, "")


@pytest.mark.parametrize("value", HOSTILE)
def test_plain_shows_the_value_as_typed_with_no_markup_left(value):
    out = plain(value)
    assert unescape(out) == value  # what the reader sees is what was typed
    bare = re.sub(r"\\.", "", out)  # what Markdown could still act on
    for markup in ("](", "<img", "<http", "://", "www.", "@", "`", "*", "$", ":", "[", "<", "&", "|"):
        assert markup not in bare, (value, out, markup)
    assert not re.match(r"[#>+=-]|\d+[.)]", bare), out  # no block marker at the start


def test_identifiers_stay_readable():
    assert plain("vocab_size=200,000 is out of range") == "vocab_size=200,000 is out of range"


def test_long_values_are_cut_with_their_length():
    assert short("x" * 50_000) == "x" * 80 + "… (50,000 characters)"
    assert len(plain("[" * 50_000)) < 250 and plain("abc") == "abc"


def test_invisible_characters_are_written_out():
    assert visible("a\x00b\u202ec\u200bd\ne") == "a\\x00b\\u202ec\\u200bd\\x0ae"
    assert unescape(plain("a\u202eb")) == "a\\u202eb" and visible("漢字 ok") == "漢字 ok"


def test_every_line_of_a_multiline_text_shows_as_typed():
    """Generated and token text keep their newlines (the Steer page's continuations): a block
    marker at any line's start, after any indent, is escaped as at the first."""
    lines = [
        "- item",
        "  - nested",
        "1. one",
        "  12) twelve",
        "# heading",
        "> quote",
        "===",
        "---",
        "+ plus",
        "plain line",
    ]
    out = escape_markdown("\n".join(lines)).split("\n")
    assert [unescape(o) for o in out] == lines
    for o in out:  # each line starts (after its indent) with an escape, or with no marker at all
        assert not re.match(r"\s*([#>+=-]|\d+[.)])", o), o
    assert out[-1] == "plain line" and escape_markdown("a - b. 1. c") == "a - b. 1. c"  # mid-line: untouched


def test_escape_markdown_escapes_backslashes_first_class():
    assert escape_markdown("\\") == "\\\\" and unescape(escape_markdown("\\[x\\]")) == "\\[x\\]"


@pytest.mark.parametrize(
    "value,want",
    [(1e308, 3.0), (float("9" * 20), 3.0), (1e9, 3.0), (-1, 0.0), (-1e308, 0.0), (0.73, 0.7), (2.2, 2.0), (2**70, 3.0)],
)
def test_temperature_snaps_to_the_nearest_option_even_at_the_extremes(value, want):
    assert nearest_temperature(value) == want
    assert nearest_temperature(value) in TEMPERATURES and not math.isnan(nearest_temperature(value))


def test_padded_vocabulary_rows_are_no_token():
    lm = tfm.load('random:{"preset":"tiny","config":{"vocab_size":5000}}')  # the bundled tokenizer: 4,096 ids
    n = lm.tokenizer.vocab_size
    assert attribution.n_words(lm) == min(n, 5000)
    ids = lm.tokenizer.encode("The cat sat on the mat")
    attr = attribution.direct(lm, ids)
    assert attr.token < attribution.n_words(lm)  # the top token is a token, never a padded row
    with pytest.raises(ValueError, match="not one token"):
        attribution.token_id(lm.tokenizer, "x" * 5_000, attribution.n_words(lm))
    with pytest.raises(ValueError, match="not of this model"):
        attribution.token_id(lm.tokenizer, " the", lm.tokenizer.encode(" the")[0])  # a row the model lacks


def test_folder_refusal_names_the_roots_as_shown(tmp_path):
    with pytest.raises(ValueError) as e:
        resolve_allowed("/etc", [tmp_path / "models"], shown=["models"])
    assert "(models)" in str(e.value) and str(tmp_path) not in str(e.value)
    with pytest.raises(ValueError) as e:
        resolve_allowed("x" * 10_000, [tmp_path], shown=["models"])
    assert len(str(e.value)) < 400


def test_zip_members_are_bounded_before_they_are_decompressed():
    from tfm.teach import toy

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("config.json", "{}")
        z.writestr("model.safetensors", b"\0" * 5_000_000)  # ~5 kB zipped
    with pytest.raises(ValueError, match="larger than this server takes") as e:
        toy.from_zip(buf.getvalue(), max_bytes=1_000_000)
    assert "5,000,000" not in str(e.value) and "5000000" not in str(e.value)


def test_a_one_token_context_is_refused_in_the_users_words():
    from tfm.generation.generate import prepare_prompt

    lm = tfm.load('random:{"preset":"tiny","config":{"context_length":1}}')
    with pytest.raises(ValueError, match="context holds 1 token: no room") as e:
        prepare_prompt(lm, "hello", room=1)
    assert "room=" not in str(e.value)
    assert prepare_prompt(lm, "hello", room=0).ids  # a view of the prompt alone still works
