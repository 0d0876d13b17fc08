#!/usr/bin/env bash
# Train with flexkit inside verl's v1 trainer (needs GPUs, vLLM or SGLang, and a model). Run from anywhere:
#   MODEL=Qwen/Qwen2.5-0.5B-Instruct bash examples/verl/launch.sh [more verl overrides]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mapfile -t overrides < "$here/overrides.txt"
exec python -m flexkit_verl.main_ppo \
  "${overrides[@]}" \
  data.train_files="$here/data/train.parquet" \
  data.val_files="$here/data/val.parquet" \
  actor_rollout_ref.model.path="${MODEL:?set MODEL to a Hugging Face model id or path}" \
  +flexkit.pipeline="$here/pipeline.toml" \
  "$@"
