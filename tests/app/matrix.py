"""The page matrix (issues #28, #29): every page of ui/nav.py, every tab or mode of it, on every
kind of model the app offers. A new page joins by one line in PAGES, a new model kind by one
line in MODELS (a spec text, or a builder that writes a folder and returns its spec), a new link
parameter by one line in LINK_PARAMS; test_matrix.py and test_hostile_links.py read only these.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from streamlit.testing.v1 import AppTest

from tests.app.conftest import APP

PROMPT = "The cat sat on the mat. The cat sat on the"
WHY_TABS = (
    "Attribution",
    "Attribution vs ablation",
    "Intervene",
    "MLP neurons",
    "Activation patching",
    "Contribution graph",
)


@dataclass(frozen=True)
class Page:
    """How the matrix drives one page. Each view is the session settings of one tab or mode
    (set, then one run) and the plotly charts it must draw at least (its main chart)."""

    views: tuple[tuple[dict, int], ...] = (({}, 1),)
    model_free: bool = False  # the page ignores the sidebar's model: one cell, on the bundled model
    press: str | None = None  # a button pressed once after the views (its result checked too)
    setup: dict = field(default_factory=dict)  # session settings before the first run
    example: int | None = None  # charts drawn after pressing its first example button (ui/examples.py),
    # where the model has one; None: the page offers no examples


PAGES: dict[str, Page] = {
    "home": Page(views=(({}, 0),)),
    "classroom": Page(views=(({}, 0),), model_free=True),  # no room: the join and open forms
    "tour": Page(views=(({}, 0),)),
    "induction": Page(views=(({}, 0),), model_free=True),
    "tokens": Page(views=(({}, 0),)),
    "attention": Page(
        views=(
            ({"attn.mode": "head", "attn.view": "Pattern"}, 1),
            ({"attn.mode": "mean", "attn.view": "All heads"}, 1),
            ({"attn.mode": "max", "attn.view": "Head view"}, 1),
            ({"attn.mode": "rollout", "attn.view": "Head table"}, 0),  # a table
            ({"attn.mode": "head", "attn.view": "Neuron view"}, 2),
        ),
        example=1,
    ),
    "look_at": Page(),  # encoders only: other models get a line and a button (NEEDS)
    "similarity": Page(views=(({}, 2),)),
    "positions": Page(),
    "norms": Page(views=(({}, 4),)),
    "shapes": Page(),
    "logit_lens": Page(views=(({"lens.kind": "logit"}, 2), ({"lens.kind": "tuned"}, 2)), example=1),  # grid + KL chart
    # Intervene and MLP neurons draw tables until parts are picked; the patching example may not fit a
    # small vocabulary (an info says so), so the last view types answers every byte-level one has.
    "why": Page(
        views=(
            *(
                ({"why.tab": t}, 1 if t in ("Attribution", "Attribution vs ablation", "Contribution graph") else 0)
                for t in WHY_TABS
            ),
            (
                {
                    "why.tab": "Activation patching",
                    "why.clean": "a",
                    "why.corrupt": "b",
                    "why.answer": "c",
                    "why.wrong": "d",
                },
                2,
            ),
        ),
        example=1,
    ),  # one byte: one token everywhere
    "next_token": Page(),
    "generate": Page(
        views=(({"gen.mode": "Plain text"}, 0), ({"gen.mode": "Chat"}, 0)), press="gen.run", setup={"gen.max_new": 3}
    ),  # chat mode shows only where the model has a chat template
    "encdec": Page(views=(({}, 0),), model_free=True),
    "experiments": Page(views=(({}, 6),), model_free=True),
    # The real model and the bundled one ship an SAE; other models get an info saying so.
    "features": Page(views=(({}, 0),), example=3),
    # Models without a shipped transcoder set get an info saying how to train one.
    "attribution_graph": Page(views=(({}, 0),)),
    # Non-GGUF models get an info; GGUF kinds draw the stored block (quantizing is a button, not pressed).
    "quant": Page(views=(({}, 0),)),
    "steer": Page(views=(({"steer.source": "Prompt pair"}, 1),), setup={"steer.new": 3}),
}

# Small shapes where the shape does not matter; each preset keeps its own vocabulary, which is
# larger than the bundled tokenizer's 4,096 ids (a padded vocabulary), except "tiny" (smaller).
SMALL = {"n_layer": 2, "d_model": 32, "n_head": 4, "d_ff": 64, "context_length": 64}


def random(preset: str, **config) -> str:
    return "random:" + json.dumps({"preset": preset, "config": {**SMALL, **config}}, separators=(",", ":"))


def hf_family(case: str):
    """A Hugging Face folder of a family (tests/test_families.py's builders, 2 layers)."""

    def build(root: Path) -> str:
        from tests.test_families import hf_model, save

        folder = root / case
        if not folder.is_dir():
            save(hf_model(case), folder, _tok(root))
        return "path:" + str(folder)

    return build


def hf_bert(arch: str):
    """A random Hugging Face BERT folder with a WordPiece tokenizer.json (tests/test_families_bert.py)."""

    def build(root: Path) -> str:
        import tokenizers
        from tests.conftest import BPE_TEXT
        from tests.test_families import SMALL as FAMILY, save
        from tests.test_families_bert import bert_hf

        folder, vocab = root / arch, root / "wordpiece"
        if not (vocab / "tokenizer.json").is_file():
            vocab.mkdir(parents=True, exist_ok=True)
            wp = tokenizers.BertWordPieceTokenizer(lowercase=True)
            wp.train_from_iterator(BPE_TEXT, vocab_size=FAMILY["vocab_size"], min_frequency=1, show_progress=False)
            wp.save(str(vocab / "tokenizer.json"))
        if not folder.is_dir():
            save(bert_hf(arch), folder, vocab)
        return "path:" + str(folder)

    return build


def _tok(root: Path) -> Path:
    from tests.test_families import write_tokenizer

    folder = root / "bytelevel"
    if not (folder / "tokenizer.json").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        write_tokenizer(folder)
    return folder


def hf_gpt2(root: Path) -> str:
    """A Hugging Face GPT-2 folder (vocab.json + merges.txt), as tests/test_parity_hf.py writes it."""
    from tests.test_parity_hf import hf_model, save_hf_folder

    folder = root / "gpt2"
    if not folder.is_dir():
        vocab = root / "gpt2-vocab"
        if not (vocab / "vocab.json").is_file():
            import tokenizers
            from tests.conftest import BPE_TEXT

            vocab.mkdir(parents=True, exist_ok=True)
            bpe = tokenizers.ByteLevelBPETokenizer()
            bpe.train_from_iterator(
                BPE_TEXT, vocab_size=320, min_frequency=2, special_tokens=["<|endoftext|>"], show_progress=False
            )
            bpe.save_model(str(vocab))
        n = len(json.loads((vocab / "vocab.json").read_text(encoding="utf-8")))
        save_hf_folder(hf_model(n + 7), folder, vocab)  # 7 padded rows past the tokenizer's ids
    return "path:" + str(folder)


def gguf_file(arch: str, qtype: str, rope_freqs: bool = False, **kw):
    """A GGUF file of one tensor type (tests/gguf_files.py writes it with gguf.GGUFWriter);
    `rope_freqs`: with Llama 3.1's rescaling as llama.cpp stores it."""

    def build(root: Path) -> str:
        from tests.gguf_files import llama_cpp_rope_freqs, write_model

        path = root / f"{arch}-{qtype}{'-rope-freqs' if rope_freqs else ''}.gguf"
        if not path.is_file():
            extra = {"rope_freqs.weight": llama_cpp_rope_freqs(16)} if rope_freqs else None
            write_model(path, arch, qtype, extra_tensors=extra, **kw)
        return "path:" + str(path)

    return build


def gguf_family(arch: str):
    """A GGUF file of gemma3 / qwen3 / phi3 as tests/test_gguf_families.py writes it."""

    def build(root: Path) -> str:
        from tests.test_gguf_families import write

        path = root / f"{arch}.gguf"
        return "path:" + str(path if path.is_file() else write(root, arch))

    return build


# name: a spec text, or a builder (folder root -> spec text) for kinds that are files.
MODELS: dict[str, object] = {
    "bundled": "default",
    "gpt2-padded": random("gpt2"),
    "smollm2-padded": random("smollm2-135m", n_kv_head=2),
    "smollm2-gqa": random("smollm2-135m", d_model=72, n_head=9, n_kv_head=3),  # SmolLM2's 9 query / 3 k-v heads
    "mqa": random("smollm2-135m", n_kv_head=1),  # multi-query: every head shares one k-v head
    "qwen2.5-padded": random("qwen2.5-0.5b", n_kv_head=2),
    "pythia-padded": random("pythia-160m"),
    "tiny-vocab": random("tiny"),  # fewer rows than the tokenizer has ids
    "post-norm": random("transformer-base"),  # post-norm, sinusoidal, ReLU
    "no-position": random("tfm-small", pos_encoding="none", vocab_size=4100),
    "hf-gpt2": hf_gpt2,
    "hf-llama": hf_family("llama-gqa"),
    "hf-qwen2": hf_family("qwen2-bias-tied"),
    "hf-mistral": hf_family("mistral-gqa"),
    "hf-neox": hf_family("neox-parallel"),
    "gguf-llama-q4_1": gguf_file("llama", "Q4_1"),
    "gguf-llama-q8_0": gguf_file("llama", "Q8_0"),
    "gguf-llama-q4_k": gguf_file("llama", "Q4_K", d=256, f=256),
    "gguf-qwen2-f16": gguf_file("qwen2", "F16"),
    "gguf-gpt2-q5_0": gguf_file("gpt2", "Q5_0", f=256),
    "gguf-llama31-rope-freqs": gguf_file("llama", "Q8_0", rope_freqs=True),  # Llama 3.1's rescaled RoPE
    "real": "smollm2",  # SmolLM2-135M-Instruct, the app's default
    # Gemma 3's shape: window 4 (shorter than PROMPT), 5 local : 1 global, MQA, head_dim 32 != d / H,
    # QK-norm, four norms a block, GeGLU, scaled embeddings, two RoPE bases
    "gemma3-window": random(
        "smollm2-135m",
        n_layer=6,
        n_head=4,
        n_kv_head=1,
        head_dim=32,
        activation="geglu",
        qk_norm=True,
        post_norms=True,
        scale_embeddings=True,
        attn_scalar=32.0,
        sliding_window=4,
        local_layers=[0, 1, 2, 3, 4],
        rope_local_base=10000.0,
        rope_base=1000000.0,
    ),
    "qwen3-qknorm": random("qwen2.5-0.5b", n_kv_head=2, qkv_bias=False, qk_norm=True, head_dim=24),
    "phi3-window": random("smollm2-135m", n_kv_head=2, sliding_window=5, local_layers=[0, 1]),
    "gguf-gemma3": gguf_family("gemma3"),  # a gemma3 GGUF file (window 5, head_dim 256)
    "minilm": "minilm",  # all-MiniLM-L6-v2: a BERT encoder, no LM head
    "bert-random": random("minilm-l6", d_model=48, n_head=4),  # a random BERT shape (the bundled tokenizer)
    "hf-bert-mlm": hf_bert("BertForMaskedLM"),  # a BertForMaskedLM folder: fill the [MASK]
}

# What a valid setup shows instead of its chart, per (page, model kind): a page that explains it
# cannot work on that model (only these messages may appear as error boxes).
EXPECTED = {("why", "post-norm"): "needs a pre-norm model"}

# Pages that need a model's head or kind show one line (an info, never an error) on models without
# it, and a button that fixes it: (pages, model kinds, the words the info holds, the button's key).
LM_PAGES = ("logit_lens", "why", "generate", "steer", "features", "attribution_graph")
NEEDS: list[tuple[tuple[str, ...], tuple[str, ...], str, str]] = [
    (LM_PAGES + ("next_token",), ("minilm", "bert-random"), "needs a language-model head", "needs.switch"),
    (LM_PAGES, ("hf-bert-mlm",), "needs a language-model head", "needs.switch"),
    (
        ("similarity", "look_at"),
        tuple(k for k in MODELS if k not in ("minilm", "bert-random", "hf-bert-mlm")),
        "needs an encoder",
        "needs.switch",
    ),
    (("next_token",), ("hf-bert-mlm",), "in the prompt where a word should be filled", "next.mask"),  # no [MASK] typed
]


def needs(page: str, kind: str) -> tuple[str, str] | None:
    """(the info's words, its button) `page` shows instead of its charts on model `kind`, if it needs
    what the model lacks."""
    return next(((words, button) for pages, kinds, words, button in NEEDS if page in pages and kind in kinds), None)


# Every link parameter of every page: (page, parameter, prefix put before the hostile value). The
# sidebar's (model, prompt, seed, device) are read on every page; they are tried on two.
LINK_PARAMS: list[tuple[str, str, str]] = [
    ("tokens", "model", "path:"),
    ("tokens", "prompt", ""),
    ("tokens", "seed", ""),
    ("tokens", "device", ""),
    ("attention", "model", ""),
    ("attention", "layer", ""),
    ("attention", "head", ""),
    ("next_token", "t", ""),
    ("next_token", "top_k", ""),
    ("next_token", "top_p", ""),
    ("tour", "present", ""),
    ("tour", "step", ""),
    ("tour", "pos", ""),
    ("tour", "layer", ""),
    ("tour", "head", ""),
    *[("why", p, "") for p in ("pos", "token", "vs", "tab", "clean", "corrupt", "answer", "wrong")],
    ("generate", "prompt", ""),
    ("features", "feature", ""),
    ("logit_lens", "lens", ""),
    ("classroom", "room", ""),
    ("classroom", "me", ""),
    ("classroom", "teacher", ""),
]
# Values a link may carry: markup, huge, non-numbers and extremes, invisible characters, special
# tokens, paths. A new one joins by one line.
HOSTILE: dict[str, str] = {
    "md-link": "[Log in again](https://example.com/login)",
    "md-image": "![x](http://host.example/pixel.png)",
    "html": "<img src=x onerror=alert(1)><a href='https://example.com'>click</a>",
    "heading": "# Heading\n**bold** _em_ `code` ~~s~~ $x$ :red[x] :smile: | a | b |",
    "autolink": "www.example.com https://example.com a@b.example <https://example.com>",
    "long": "x" * 50_000,
    "nan": "nan",
    "inf": "inf",
    "-inf": "-inf",
    "huge": "1e308",
    "neg": "-1",
    "2**70": str(2**70),
    "20-digits": "99999999999999999999",
    "null": "a\x00b",
    "rtl-zero-width": "\u202eevil\u200b\u2066x",
    "special": "<|endoftext|>",
    "traversal": "../../../../etc/passwd",
    "backslash": "\\[x\\](y)",
}


def spec_of(kind: str, root: Path) -> str:
    made = MODELS[kind]
    return made(root) if callable(made) else made


def open_cell(
    page: str, spec: str | None, params: dict | None = None, setup: dict | None = None, timeout: float = 120
) -> AppTest:
    """A fresh session opening `page` by link (the model and prompt in the address), as a shared
    link does: the page's first run, without the home page before it."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.query_params.update({"prompt": PROMPT, **({"model": spec} if spec else {}), **(params or {})})
    for key, value in (setup or {}).items():
        at.session_state[key] = value
    at.switch_page(f"pages/{page}.py").run()
    return at


def set_view(at: AppTest, settings: dict) -> AppTest:
    """Open a tab or mode: its widget's value and the remembered copy pages restore (ui.links.keep)."""
    for key, value in settings.items():
        at.session_state[key] = value
        at.session_state["keep." + key] = value
    return at.run() if settings else at
