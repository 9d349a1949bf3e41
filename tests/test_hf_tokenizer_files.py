"""tfm.text.hf_tokenizer's files: a saved tokenizer reads back through its tfm spec, a changed
source is refused, GPT-2 folders without tokenizer.json, missing / broken / huge files and
unsupported parts refused with one clear message, pre-tokenizer steps before ByteLevel served
exactly (ids equal Hugging Face's), and a folder's Python code never run. The files come from
the `tokenizer_pairs` fixture (tests/hf_tokenizer_files.py)."""

from __future__ import annotations

import json

import pytest

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

from tests.hf_tokenizer_files import BATTERY, copy_file  # noqa: E402
from tfm.text.hf_tokenizer import tokenizer_from_folder, tokenizer_from_spec  # noqa: E402
from tfm.text.tokenizer import Tokenizer  # noqa: E402


def test_save_and_reload_through_a_tfm_spec(tokenizer_pairs, tmp_path):
    """save() copies the files; tokenizer_from_spec (what tfm model folders use) reads them back."""
    text = "Hello <|im_start|> 你好 12345\n\n  x"
    for kind in ("qwen2", "llama2"):
        _, ours, _, _ = tokenizer_pairs(kind)
        spec = ours.save(tmp_path / kind)
        again = tokenizer_from_spec(tmp_path / kind, json.loads(json.dumps(spec)))
        assert type(again) is type(ours) and again.name == ours.name
        assert again.encode(text) == ours.encode(text)
        assert again.encode(text, allow_special=True) == ours.encode(text, allow_special=True)
        assert again.eot_id == ours.eot_id and again.bos_id == ours.bos_id


def test_save_refuses_a_changed_source(tokenizer_pairs, tmp_path):
    src = copy_file(tokenizer_pairs, "gpt2", tmp_path / "src")
    tok = tokenizer_from_folder(src)
    (src / "tokenizer.json").write_text((src / "tokenizer.json").read_text() + " ")
    with pytest.raises(ValueError, match="changed since"):
        tok.save(tmp_path / "out")


def test_gpt2_folder_without_tokenizer_json(gpt2_vocab_folder):
    tok = tokenizer_from_folder(gpt2_vocab_folder)
    ref = Tokenizer.from_hf_gpt2_folder(gpt2_vocab_folder)
    assert tok.encode("The cat sat. 123") == ref.encode("The cat sat. 123")


def test_missing_bad_and_huge_files(tmp_path, tokenizer_pairs, monkeypatch):
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        tokenizer_from_folder(tmp_path)
    (tmp_path / "tokenizer.json").write_bytes(b"{not json")
    with pytest.raises(ValueError, match="^tokenizer.json is not valid JSON"):
        tokenizer_from_folder(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0"}')
    with pytest.raises(ValueError, match='no "model" section'):
        tokenizer_from_folder(tmp_path)
    copy_file(tokenizer_pairs, "gpt2", tmp_path)
    monkeypatch.setattr("tfm.text.hf_tokenizer_file.MAX_FILE_BYTES", 1000)
    with pytest.raises(ValueError, match="^tokenizer.json holds .* bytes; tfm reads such a file up to 1,000 bytes"):
        tokenizer_from_folder(tmp_path)


def test_unsupported_decoder_is_refused_clearly(tokenizer_pairs, tmp_path):
    def wordpiece_decoder(data):
        data["decoder"] = {"type": "WordPiece", "prefix": "##", "cleanup": True}

    with pytest.raises(ValueError, match="decoder .* is not supported"):
        tokenizer_from_folder(copy_file(tokenizer_pairs, "llama2", tmp_path, wordpiece_decoder))

    def broken(data):  # a field the library requires is missing
        del data["pre_tokenizer"]["trim_offsets"]

    with pytest.raises(ValueError, match="the tokenizers library cannot read"):
        tokenizer_from_folder(copy_file(tokenizer_pairs, "gpt2-prefix-space", tmp_path / "b", broken))


ODD_PRE_TOKENIZERS = {  # step before ByteLevel -> the back end that must serve it
    "WhitespaceSplit": ({"type": "WhitespaceSplit"}, "tokenizers"),
    "MergedWithPrevious": (
        {"type": "Split", "pattern": {"Regex": r"\p{P}"}, "behavior": "MergedWithPrevious", "invert": False},
        "tokenizers",
    ),
    "empty matches": (
        {"type": "Split", "pattern": {"Regex": r"\s*"}, "behavior": "Isolated", "invert": False},
        "tokenizers",
    ),
    "String split": (
        {"type": "Split", "pattern": {"String": "e"}, "behavior": "Isolated", "invert": False},
        "tiktoken",
    ),
    "Digits runs": ({"type": "Digits", "individual_digits": False}, "tiktoken"),
}


@pytest.mark.parametrize("name", ODD_PRE_TOKENIZERS)
def test_odd_pre_tokenizers_stay_exact(tokenizer_pairs, tmp_path, name):
    """Steps before ByteLevel: expressible ones split in Python before tiktoken; others are
    served by `tokenizers`, with the reason in backend_note. Ids equal HF's either way."""
    step, backend = ODD_PRE_TOKENIZERS[name]

    def edit(data):
        data["pre_tokenizer"] = {
            "type": "Sequence",
            "pretokenizers": [
                step,
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            ],
        }

    folder = copy_file(tokenizer_pairs, "gpt2", tmp_path, edit)
    tok = tokenizer_from_folder(folder)
    assert tok.backend == backend, tok.backend_note
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    for text in BATTERY:
        assert tok.encode(text, allow_special=True) == hf(text, add_special_tokens=False)["input_ids"]


def test_folder_code_is_never_run(tokenizer_pairs, tmp_path):
    """tokenizer_config.json may name Python code (auto_map); tfm reads JSON only."""
    folder = copy_file(tokenizer_pairs, "gpt2", tmp_path)
    marker = tmp_path / "ran"
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "auto_map": {"AutoTokenizer": ["evil.EvilTokenizer", None]},
                "tokenizer_class": "EvilTokenizer",
                "eos_token": "<|endoftext|>",
            }
        )
    )
    tok = tokenizer_from_folder(folder)
    assert tok.encode("hi") and tok.eot_id == tokenizer_pairs("gpt2")[1].eot_id and not marker.exists()
