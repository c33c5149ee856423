#!/usr/bin/env bash
# Tensor parallelism against DDP and a pipeline on one GPT and one global batch, 2 ranks
# (docs/TENSOR.md, "Measured"): DDP bucketed (the baseline), --tensor 2, with
# --sequence-parallel, with --tp-overlap, and a 2-stage 1f1b pipeline. The configurations
# are measured in ROUNDS rounds, one after the other within each round, so that a slow
# spell of a shared machine falls on all of them; each row is the median over the rounds
# of `tandem train`'s median step time, with its ratio to DDP's in the same rounds, the
# state and activations per rank, and the time blocked at collectives.
#
#   bench/tensor_compare.sh TANDEM_BINARY [MODEL] [GLOBAL_BATCH] [ROUNDS]
# MODEL defaults to gpt:layers=8,dim=256,heads=8,seq=128,vocab=256; GLOBAL_BATCH to 16;
# ROUNDS to 3.
set -euo pipefail
tandem="$1"
model="${2:-gpt:layers=8,dim=256,heads=8,seq=128,vocab=256}"
global="${3:-16}"
rounds="${4:-3}"
steps=20

# name | flags
configs=(
  "ddp bucketed|--ranks 2 --batch $((global / 2))"
  "tensor 2|--ranks 2 --tensor 2 --batch $global"
  "tensor 2, sequence-parallel|--ranks 2 --tensor 2 --sequence-parallel --batch $global"
  "tensor 2, sp, tp-overlap|--ranks 2 --tensor 2 --sequence-parallel --tp-overlap --batch $global"
  "1f1b P=2, M=4|--ranks 2 --pipeline 2 --schedule 1f1b --micro-batches 4 --batch $global"
)

declare -A step state acts wait
for ((r = 0; r < rounds; ++r)); do
  for entry in "${configs[@]}"; do
    name="${entry%%|*}"
    flags="${entry#*|}"
    # shellcheck disable=SC2086  # flags are words
    text=$("$tandem" train --model "$model" --steps "$steps" $flags 2>&1)
    step[$name]+=" $(awk '/^  step time/ {print $3}' <<<"$text")"
    wait[$name]+=" $(awk '/^  blocked waiting/ {print $3}' <<<"$text")"
    state[$name]=$(awk '/^    rank 0 / {print $3; exit}' <<<"$text")
    # A pipeline stage's: "slots (MiB)" per rank.
    acts[$name]=$( (awk '/^  activations/ {print $2}' <<<"$text"
      sed -n 's/.*micro-batches in flight (activations) per rank: //p' <<<"$text" |
        tr -d ' ') | head -1)
  done
done

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
base=$(median <<<"${step[ddp bucketed]}")
echo "model $model, global batch $global, 2 ranks, $steps steps, median of $rounds rounds"
printf "%-30s %10s %8s %12s %12s %16s\n" "configuration" "step ms" "vs DDP" "waiting ms" \
  "state MiB" "activations MiB"
for entry in "${configs[@]}"; do
  name="${entry%%|*}"
  s=$(median <<<"${step[$name]}")
  printf "%-30s %10.2f %7.3fx %12.2f %12s %16s\n" "$name" "$s" "$(awk -v a="$s" -v b="$base" 'BEGIN {print a / b}')" \
    "$(median <<<"${wait[$name]}")" "${state[$name]}" "${acts[$name]}"
done
