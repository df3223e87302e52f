#!/usr/bin/env bash
# Issue 60's placement specs on a CUDA machine, as one prepared run (never run here: no GPU has been
# lent to this project yet). What it checks is what nox -s vulkan checks on lavapipe:
#   harness devices lists CUDA0 with its free/total memory;
#   harness inspect memory: llama.cpp's estimate per device;
#   engines/llamacpp/e2e/test_placement.py --variant cuda: a device budget above the model offloads
#   every layer, one below it splits the layers and agrees with cpu (KLD, top-1), one below the KV
#   cache is refused with the numbers; plus the CPU-side specs.
# The machine has no network: run it from a checkout whose dev venv ($VENV, with the cpu binding
# built) and model cache ($HARNESS_CACHE/models, `harness models fetch` done) travel with it.
#
#   VENV=~/.cache/harness/dev-venv bash scripts/gpu/placement-cuda.sh
set -euo pipefail
VENV=${VENV:-$HOME/.cache/harness/dev-venv}

H="$VENV/bin/harness"
export HARNESS_NO_PROGRESS=1
nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv
"$H" build llamacpp --variant cuda          # the cuda row's architectures (matrix/variants.yaml)
"$H" build-binding llamacpp --variant cuda
"$H" devices
eval "$("$H" models env)"
"$H" inspect memory "$HARNESS_CHAT_MODEL" --variant cuda --ctx 512 --gpu-layers auto --margin 0 --budget 80
"$H" e2e engines/llamacpp/e2e/test_placement.py --variant cuda -- -q
