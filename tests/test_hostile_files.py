"""Hostile files in model folders (issue #40): whatever a config.json, tokenizer.json,
tokenizer_config.json, vocab.json, .tiktoken file, sharded-weights index, Ollama manifest or SAE
card holds (JSON nested 200,000 deep, 1e400, a 5000-digit number, bad UTF-8, a value of the
wrong kind), `tfm.load` and the server's size check raise one ValueError that names the file by
its name (never the folder's server path), never RecursionError / TypeError / OverflowError.
Before this, `"[" * 200000 + "]" * 200000` as config.json raised RecursionError through
`tfm.load` and the app's model check."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

import tfm
from tests.conftest import BPE_TEXT
from tfm.core.config import ModelConfig
from tfm.core.files import MAX_JSON_DEPTH, json_depth, parse_json
from tfm.loaders import limits as tfm_limits
from tfm.loaders.weights import save_model
from tfm.text.hf_tokenizer import tokenizer_from_folder

pytestmark = pytest.mark.usefixtures("one_thread")

DEEP = "[" * 200_000 + "]" * 200_000
HOSTILE_JSON = {  # name: file content
    "nested 200,000 deep": DEEP,
    "an object nested 100,000 deep": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "nested 40 deep (Python reads it)": "[" * 40 + "]" * 40,
    "1e400": '{"format": "tfm", "version": 1e400}',
    "NaN": '{"format": "tfm", "version": NaN}',
    "a 5000-digit number": '{"format": "tfm", "version": ' + "9" * 5000 + "}",
    "bad UTF-8": b'{"format": "\xff\xfe"}',
    "truncated": '{"format": "tfm", "model": {"n_layer": ',
}
WRONG_KINDS = [None, [], {}, "x", -1, 10**30, 1e300, True, [[1]], {"a": {"b": 1}}]


def refused(call, *words: str, folder: Path) -> str:
    """`call()` raises one ValueError naming every word, without the folder's path."""
    with pytest.raises(ValueError) as e:
        call()
    msg = str(e.value)
    assert all(w in msg for w in words), msg
    assert str(folder) not in msg and len(msg) < 800, msg
    return msg


def loads_or_refuses(folder: Path) -> None:
    """The server's check and tfm.load either accept the folder or raise ValueError (or
    FileNotFoundError for a file it names), never naming the folder's path: nothing else."""
    try:
        tfm_limits.check_folder(folder, tfm_limits.Limits())
        tfm.load(folder, device="cpu").tokenizer.encode("Hello world")
    except (ValueError, FileNotFoundError) as e:
        assert str(folder) not in str(e), str(e)


def write_folders(root: Path) -> Path:
    """root/tfm: a tfm folder (tiktoken ranks); root/hf: one whose tokenizer is a Hugging Face
    tokenizer.json; root/gpt2: a Hugging Face GPT-2 folder (vocab.json + merges.txt +
    tokenizer_config.json). The app's tests open them too."""
    import tokenizers
    import transformers

    lm = tfm.random_model(ModelConfig.preset("tiny"), seed=1)
    save_model(root / "tfm", lm.model, lm.tokenizer)
    (root / "json").mkdir()
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(BPE_TEXT, vocab_size=320, special_tokens=["<|endoftext|>"], show_progress=False)
    bpe.save(str(root / "json" / "tokenizer.json"))
    bpe.save_model(str(root / "json"))  # vocab.json + merges.txt of the same BPE
    tok = tokenizer_from_folder(root / "json")
    lm = tfm.random_model(ModelConfig.preset("tiny", vocab_size=320), tokenizer=tok, seed=1)
    save_model(root / "hf", lm.model, tok)
    gpt2 = root / "gpt2"
    transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=16, vocab_size=320)
    ).save_pretrained(gpt2)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(root / "json" / name, gpt2 / name)
    (gpt2 / "tokenizer_config.json").write_text(
        json.dumps({"added_tokens_decoder": {"0": {"content": "<|endoftext|>", "special": True}}})
    )
    return root


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return write_folders(tmp_path_factory.mktemp("good"))


def copy_of(good: Path, kind: str, tmp_path: Path) -> Path:
    folder = tmp_path / f"{kind}-copy"
    shutil.copytree(good / kind, folder)
    return folder


def test_the_good_folders_load(good):
    for kind in ("tfm", "hf", "gpt2"):
        tfm_limits.check_folder(good / kind, tfm_limits.Limits())
        lm = tfm.load(good / kind, device="cpu")
        assert lm.tokenizer.decode(lm.tokenizer.encode("The cat sat.")) == "The cat sat."


@pytest.mark.parametrize("what", sorted(HOSTILE_JSON))
def test_a_hostile_config_json_is_one_valueerror_naming_it(good, tmp_path, what):
    folder = copy_of(good, "tfm", tmp_path)
    content = HOSTILE_JSON[what]
    (folder / "config.json").write_bytes(content if isinstance(content, bytes) else content.encode())
    for call in (lambda: tfm.load(folder, device="cpu"), lambda: tfm_limits.check_folder(folder, tfm_limits.Limits())):
        msg = refused(call, "config.json", folder=folder)
        assert msg.startswith("config.json"), msg


@pytest.mark.parametrize("file", ["tokenizer.json", "tokenizer_config.json"])
@pytest.mark.parametrize("what", ["nested 200,000 deep", "nested 40 deep (Python reads it)", "1e400", "bad UTF-8"])
def test_a_hostile_tokenizer_file_is_one_valueerror_naming_it(good, tmp_path, file, what):
    folder = copy_of(good, "hf", tmp_path)
    content = HOSTILE_JSON[what]
    (folder / file).write_bytes(content if isinstance(content, bytes) else content.encode())
    refused(lambda: tfm.load(folder, device="cpu"), file, folder=folder)


@pytest.mark.parametrize("file", ["vocab.json", "merges.txt", "tokenizer_config.json"])
def test_hostile_gpt2_vocabulary_files_are_one_valueerror_naming_them(good, tmp_path, file):
    for content in (DEEP.encode(), b"\xff\xfe" + (good / "gpt2" / file).read_bytes(), b'{"a": 1e400}'):
        folder = copy_of(good, "gpt2", tmp_path / str(len(content)))
        (folder / file).write_bytes(content)
        refused(lambda: tfm.load(folder, device="cpu"), file, folder=folder)


def test_a_hostile_tiktoken_file_is_one_valueerror_naming_it(good, tmp_path):
    folder = copy_of(good, "tfm", tmp_path)
    lines = (folder / "tokenizer.tiktoken").read_bytes().splitlines()
    for bad in (b"\xff\xfe" + lines[0], lines[-1].split()[0] + b" " + b"9" * 30):  # tiktoken overflowed on the rank
        (folder / "tokenizer.tiktoken").write_bytes(b"\n".join(lines[:-1] + [bad]))
        refused(lambda: tfm.load(folder, device="cpu"), "tokenizer.tiktoken", folder=folder)


def test_values_of_the_wrong_kind_anywhere_are_a_valueerror(good, tmp_path):
    """Every top-level entry of config.json (and of its tokenizer section), tokenizer.json (and
    its model section) and vocab.json set to each JSON kind: the folder loads or is refused with
    a ValueError. Before, config.json's tokenizer section raised TypeError (`folder / None` for
    the file, an unhashable pattern), tokenizer.json's sections AttributeError or TypeError, and
    a vocab.json id of 10**30 OverflowError."""
    cases = []
    for kind, file, section in (
        ("tfm", "config.json", None),
        ("tfm", "config.json", "tokenizer"),
        ("hf", "tokenizer.json", None),
        ("hf", "tokenizer.json", "model"),
        ("gpt2", "vocab.json", None),
        ("gpt2", "config.json", None),
    ):
        data = json.loads((good / kind / file).read_text())
        where = data[section] if section else data
        keys = list(where)[:8] if kind != "gpt2" or file != "vocab.json" else list(where)[:3] + ["<|endoftext|>"]
        cases += [(kind, file, section, key, value) for key in keys for value in WRONG_KINDS]
    for i, (kind, file, section, key, value) in enumerate(cases):
        folder = copy_of(good, kind, tmp_path / str(i))
        data = json.loads((folder / file).read_text())
        (data[section] if section else data)[key] = value
        (folder / file).write_text(json.dumps(data))
        loads_or_refuses(folder)
    assert len(cases) > 300


def test_a_tokenizer_spec_cannot_name_a_file_outside_the_folder(good, tmp_path):
    """config.json's tokenizer names its ranks file: a path out of the folder is refused unread
    (the outside file is a valid ranks file, so only the check can refuse it)."""
    folder = copy_of(good, "tfm", tmp_path)
    shutil.copy(folder / "tokenizer.tiktoken", tmp_path / "outside.tiktoken")
    data = json.loads((folder / "config.json").read_text())
    for name in ("../outside.tiktoken", str(tmp_path / "outside.tiktoken"), "..", ""):
        data["tokenizer"]["file"] = name
        (folder / "config.json").write_text(json.dumps(data))
        refused(lambda: tfm.load(folder, device="cpu"), "must name a file inside the model folder", folder=tmp_path)
    data["tokenizer"]["file"] = "tokenizer.tiktoken"
    (folder / "config.json").write_text(json.dumps(data))
    assert tfm.load(folder, device="cpu").config.n_layer == ModelConfig.preset("tiny").n_layer


def test_an_ollama_manifest_or_an_sae_card_nested_deep_is_a_valueerror(tmp_path):
    from tfm.analysis.dictionaries.sae import read_card
    from tfm.loaders.ollama import blob_of

    manifest = tmp_path / "models" / "manifests" / "registry.ollama.ai" / "library" / "m" / "latest"
    manifest.parent.mkdir(parents=True)
    (tmp_path / "models" / "blobs").mkdir()
    manifest.write_text(DEEP)
    refused(lambda: blob_of(manifest), "latest", "nests", folder=tmp_path)
    (tmp_path / "sae").mkdir()
    (tmp_path / "sae" / "card.json").write_text(DEEP)
    refused(lambda: read_card(tmp_path / "sae"), "card.json", "nests", folder=tmp_path)


def test_an_uploaded_toy_model_zip_with_hostile_contents_is_a_valueerror():
    """The encoder-decoder page loads a .zip a browser uploads: its config.json nested 200,000
    deep (was RecursionError) or a corrupt compressed member (was zlib.error) is one ValueError."""
    import io
    import zipfile
    from tfm.teach import toy
    from tfm.teach.encdec import EncDecConfig, EncoderDecoder

    model = EncoderDecoder(
        EncDecConfig(
            src_vocab_size=16,
            tgt_vocab_size=16,
            src_context_length=8,
            tgt_context_length=8,
            d_model=16,
            n_enc_layer=1,
            n_dec_layer=1,
            n_head=2,
            d_ff=32,
        )
    )
    good = toy.to_zip(model, toy.ToySpec("reverse", 2, 5))
    assert toy.from_zip(good)[1] == toy.ToySpec("reverse", 2, 5)
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(good)) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("config.json", DEEP)
        z.writestr("model.safetensors", src.read("model.safetensors"))
    with pytest.raises(ValueError, match="^the uploaded zip's config.json nests its JSON deeper"):
        toy.from_zip(buf.getvalue(), "the uploaded zip")
    corrupt = bytearray(good)
    start = corrupt.index(b"config.json") + len(b"config.json") + 5  # inside its compressed bytes
    corrupt[start : start + 40] = bytes(b ^ 0x5A for b in corrupt[start : start + 40])
    with pytest.raises(ValueError, match="^the uploaded zip could not be read: error: Error -3 while decompressing"):
        toy.from_zip(bytes(corrupt), "the uploaded zip")


def recursive_depth(x) -> int:
    """The oracle: levels of lists and dicts, by the definition."""
    if isinstance(x, list):
        return 1 + max(map(recursive_depth, x), default=0)
    if isinstance(x, dict):
        return 1 + max(map(recursive_depth, x.values()), default=0)
    return 0


def random_value(rng: random.Random, depth: int):
    roll = rng.random()
    if depth == 0 or roll < 0.3:
        return rng.choice([1, "s", None, 2.5, True])
    if roll < 0.65:
        return [random_value(rng, depth - 1) for _ in range(rng.randrange(4))]
    return {f"k{i}": random_value(rng, depth - 1) for i in range(rng.randrange(4))}


def test_json_depth_equals_the_recursive_definition():
    rng = random.Random(0)
    for _ in range(500):
        value = random_value(rng, rng.randrange(9))
        assert json_depth(value, 64) == recursive_depth(value), value
    deep = json.loads("[" * 200 + "]" * 200)
    assert json_depth(deep, 64) == 65 and recursive_depth(deep) == 200  # stops counting past the limit


def test_parse_json_bounds_depth_and_numbers_and_reads_the_rest_as_json_does():
    inside = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert parse_json(inside, "x.json") == json.loads(inside)
    text = '{"a": [1, 2.5, -3e-2, "é\\u00e9", null, true, {"b": 1000000000000000019884624838656}]}'
    assert parse_json(text, "x.json") == json.loads(text)  # tokenizer_config's model_max_length reads as it is
    for bad, words in (
        ("[" + inside + "]", "more than 32 levels"),
        (DEEP, "deeper than Python can read"),
        ("[1e400]", "number tfm cannot read"),
        ("[NaN]", "number tfm cannot read"),
        ("[-Infinity]", "number tfm cannot read"),
        ("[" + "9" * 5000 + "]", "number tfm cannot read"),
        (b'["\xff"]', "not UTF-8 text (byte 0xff at offset 2)"),
        ("[1,", "not valid JSON"),
    ):
        with pytest.raises(ValueError, match="^x.json ") as e:
            parse_json(bad, "x.json")
        assert words in str(e.value), str(e.value)
