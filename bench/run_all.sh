#!/usr/bin/env bash
# Set up (first time: the test dependencies, for the Hugging Face peer) and run every benchmark.
# Each prints figures and ratios measured in its own run; nothing asserts on time.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
for bench in bench_kernels bench_engine bench_generate bench_families bench_prompt_trace bench_app bench_sampling_app bench_hf_tokenizer bench_attribution bench_scale bench_load bench_class_generate bench_quant_memory bench_rooms bench_graph; do
  echo; echo "################ bench/$bench.py ################"
  .venv/bin/python "bench/$bench.py"
done
