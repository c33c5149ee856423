#!/usr/bin/env bash
# Memory of sharded data parallelism, measured: one rank per process under mpirun, for
# 1, 2 and 4 processes, DDP (bucketed) against zero1, zero2 and fsdp on the same model, in
# one run. Prints per configuration the persistent state per rank (tandem's accounting),
# the gathered and unreduced-gradient peaks, the largest peak RSS over the processes (what
# the operating system saw during the training steps, Note [peak RSS] in
# src/engine/trainer.cpp) and the median step time; then each strategy's peak RSS as a
# ratio of DDP's at the same process count.
#
#   bench/sharded_memory.sh TANDEM_BINARY [MODEL] [STEPS]
# MODEL defaults to mlp:8x2048 (33.6 M parameters: DDP's state is 403 MB per rank).
set -euo pipefail
tandem="$1"
model="${2:-mlp:8x2048}"
steps="${3:-8}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpirun=(mpirun --oversubscribe --allow-run-as-root --bind-to none)
printf "%-22s %14s %22s %14s %10s\n" "configuration" "persistent" "gathered + grads peak" \
  "peak RSS" "step ms"
for np in 1 2 4; do
  for strategy in bucketed zero1 zero2 fsdp; do
    log="$out/$np-$strategy"
    "${mpirun[@]}" -np "$np" "$tandem" train --backend mpi --model "$model" --batch 8 \
      --steps "$steps" --strategy "$strategy" --quiet >"$log"
    # The summary's memory rows: "rank R  P MiB (...) | G MiB + D MiB | STEPS MiB (RUN MiB)".
    awk -v name="$np x $strategy" '
      /step time/ { ms = $3 }
      /^    rank / {
        persistent = $3; split($0, parts, "|")
        split(parts[2], t, " "); gathered = t[1]; grads = t[4]
        split(parts[3], r, " "); if (r[1] > rss) rss = r[1]
      }
      END { printf "%-22s %10.1f MiB %10.1f + %6.1f MiB %10.1f MiB %10.2f\n",
                   name, persistent, gathered, grads, rss, ms }' "$log" | tee -a "$out/table"
  done
done
echo
echo "peak RSS against DDP (bucketed) at the same process count:"
awk '{ np = $1; strategy = $3; rss[np, strategy] = $(NF - 2) }
     END {
       for (np = 1; np <= 4; np *= 2) {
         printf "  %d process%s:", np, np > 1 ? "es" : ""
         printf "  zero1 %.2f  zero2 %.2f  fsdp %.2f\n", rss[np, "zero1"] / rss[np, "bucketed"],
                rss[np, "zero2"] / rss[np, "bucketed"], rss[np, "fsdp"] / rss[np, "bucketed"]
       }
     }' "$out/table"
