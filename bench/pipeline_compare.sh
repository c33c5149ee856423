#!/usr/bin/env bash
# Pipeline schedules against each other, and pipelines against DDP and FSDP, on one GPT and
# one global batch, in one run (docs/FINDINGS.md, "Pipelines"). For every configuration:
# `tandem train` for the step time, the bubble per stage (and the textbook value) and the
# memory per rank, then `tandem characterize` for the compute slowdown, the overlap ratio
# and the hidden share of communication (docs/METRICS.md). Ranks are threads of one
# process, one BLAS thread each: give the machine at least as many cores as --ranks.
#
#   bench/pipeline_compare.sh TANDEM_BINARY [MODEL] [GLOBAL_BATCH] [MICRO_BATCHES]
# MODEL defaults to gpt:layers=8,dim=256,heads=4,seq=128,vocab=8192; GLOBAL_BATCH to 32;
# MICRO_BATCHES (per pipeline) to 8.
set -euo pipefail
tandem="$1"
model="${2:-gpt:layers=8,dim=256,heads=4,seq=128,vocab=8192}"
global="${3:-32}"
micro="${4:-8}"
steps=8
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# name | flags (--ranks, the batch per replica and the strategy or pipeline)
configs=(
  "ddp bucketed 2|--ranks 2 --batch $((global / 2)) --micro-batches $((micro / 2))"
  "fsdp 2|--ranks 2 --batch $((global / 2)) --micro-batches $((micro / 2)) --strategy fsdp"
  "gpipe P=2|--ranks 2 --pipeline 2 --schedule gpipe --batch $global --micro-batches $micro"
  "1f1b P=2|--ranks 2 --pipeline 2 --schedule 1f1b --batch $global --micro-batches $micro"
  "interleaved:2 P=2|--ranks 2 --pipeline 2 --schedule interleaved:2 --batch $global --micro-batches $micro"
  "ddp bucketed 4|--ranks 4 --batch $((global / 4)) --micro-batches $((micro / 4))"
  "fsdp 4|--ranks 4 --batch $((global / 4)) --micro-batches $((micro / 4)) --strategy fsdp"
  "gpipe P=4|--ranks 4 --pipeline 4 --schedule gpipe --batch $global --micro-batches $micro"
  "1f1b P=4|--ranks 4 --pipeline 4 --schedule 1f1b --batch $global --micro-batches $micro"
  "interleaved:2 P=4|--ranks 4 --pipeline 4 --schedule interleaved:2 --batch $global --micro-batches $micro"
  "1f1b P=2 x 2 replicas|--ranks 4 --pipeline 2 --schedule 1f1b --batch $((global / 2)) --micro-batches $((micro / 2))"
)

echo "model $model, global batch $global, $micro micro-batches per pipeline, $steps steps"
printf "%-24s %9s %9s %22s %9s %9s %9s %14s %12s\n" "configuration" "step ms" "E2E_ovl" \
  "bubble per rank %" "textbook" "slowdown" "overlap" "hidden comm" "state MiB"
i=0
for entry in "${configs[@]}"; do
  name="${entry%%|*}"
  flags="${entry#*|}"
  i=$((i + 1))
  # shellcheck disable=SC2086 # flags are words
  "$tandem" train --model "$model" $flags --steps "$steps" --quiet --out "$out/train$i" \
    >"$out/train$i.log"
  # shellcheck disable=SC2086
  "$tandem" characterize --model "$model" $flags --warmup 2 --iterations 6 --no-progress \
    --out "$out/char$i" >"$out/char$i.log"
  python3 - "$name" "$out/train$i/summary.json" "$out/char$i/summary.json" <<'PY'
import json, sys
name, train_path, char_path = sys.argv[1:]
t = json.load(open(train_path))
c = json.load(open(char_path))["points"][0]["metrics"]
p = t.get("pipeline")
bubble = " ".join(f"{100 * b:.0f}" for b in p["bubble"]) if p else "-"
textbook = f"{100 * p['textbook_bubble']:.1f}%" if p else "-"
state = max(r["persistent_bytes"] + r["activations_bytes"] for r in t["memory"]) / 2**20
print(f"{name:<24} {t['step_ms']['median']:9.2f} {c['e2e_ovl_ns']['median'] / 1e6:9.2f} "
      f"{bubble:>22} {textbook:>9} {100 * c['compute_slowdown']['median']:8.1f}% "
      f"{100 * c['overlap_ratio']['median']:8.1f}% {100 * c['hidden_share']['median']:13.1f}% "
      f"{state:12.1f}")
PY
done
echo
echo "state MiB: the largest rank's parameters, gradients, velocity and the activations of"
echo "the micro-batches it holds at once (tandem's accounting, summary.json's memory rows)."
