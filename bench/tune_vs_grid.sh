#!/usr/bin/env bash
# tandem tune against the exhaustive grid over the same space (docs/TUNE.md, "Targets"):
# for every workload, `tandem tune --exhaustive` measures every configuration for the same
# steps as tune's last round (the grid), then `tandem tune` searches. The two answers are
# then measured again against each other, alternating, in the same run (the grid's best
# is the fastest of many noisy medians, so its own number flatters it): the ratio of
# tune's pick to the grid's best, and of tune's whole time (the default's
# characterization included) to the grid's measuring time.
#
#   bench/tune_vs_grid.sh TANDEM_BINARY [WORKLOAD...]
# A workload is "name|flags" (tune's flags, e.g. "mlp|--model mlp:8x1024 --ranks 2
# --batch 64"); a name starting with mpi runs under `mpirun -np RANKS`. Without any, the
# set of docs/TUNE.md. Ranks are threads (or processes) with one BLAS thread each.
set -euo pipefail
tandem="$1"
shift
workloads=("$@")
if [ ${#workloads[@]} -eq 0 ]; then
  workloads=(
    "mlp 2|--model mlp:8x1024 --ranks 2 --batch 64"
    "mlp 2 link|--model mlp:8x1024 --ranks 2 --batch 64 --link 10GB/s,20us"
    "gpt 2|--model gpt:layers=4,dim=128,heads=4,seq=64,vocab=4096 --ranks 2 --batch 8"
    "llama 2|--model llama:layers=4,dim=128,heads=4,seq=64,vocab=4096 --ranks 2 --batch 8"
    "mlp 4|--model mlp:6x512 --ranks 4 --batch 32"
    "mpi mlp 2|--model mlp:8x1024 --ranks 2 --batch 64"
  )
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ab_rounds=3
ab_steps=30

launcher() { # name ranks
  if [[ "$1" == mpi* ]]; then
    echo "mpirun --allow-run-as-root --oversubscribe -np $2"
  fi
}

printf "%-12s %-44s %-44s %8s %8s %9s %9s %7s %s\n" "workload" "grid's best" "tune's pick" \
  "grid ms" "pick ms" "pick/best" "time" "configs" "same"
i=0
for entry in "${workloads[@]}"; do
  name="${entry%%|*}"
  flags="${entry#*|}"
  i=$((i + 1))
  ranks=$(sed -n 's/.*--ranks \([0-9]*\).*/\1/p' <<<"$flags")
  run=$(launcher "$name" "${ranks:-2}")
  if [ -n "$run" ]; then flags=$(sed 's/--ranks [0-9]*//' <<<"$flags"); fi
  # shellcheck disable=SC2086 # flags and the launcher are words
  $run "$tandem" tune $flags --exhaustive --budget 2h --out "$out/grid$i" >"$out/grid$i.log"
  # shellcheck disable=SC2086
  $run "$tandem" tune $flags --out "$out/tune$i" >"$out/tune$i.log"
  grid_cmd=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tune"]["answer"]["command"])' "$out/grid$i/summary.json")
  tune_cmd=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tune"]["answer"]["command"])' "$out/tune$i/summary.json")
  # The two answers, alternating, each ab_rounds times for ab_steps steps.
  for r in $(seq "$ab_rounds"); do
    for who in grid tune; do
      cmd=$([ "$who" = grid ] && echo "$grid_cmd" || echo "$tune_cmd")
      cmd="${cmd#tandem }"
      # shellcheck disable=SC2086
      eval "$run \"$tandem\" $cmd --steps $ab_steps --warmup 3 --quiet --out \"$out/ab$i-$who-$r\"" \
        >/dev/null
    done
  done
  python3 - "$name" "$out" "$i" "$ab_rounds" <<'PY'
import json, statistics, sys
name, out, i, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
grid = json.load(open(f"{out}/grid{i}/summary.json"))["tune"]
tune = json.load(open(f"{out}/tune{i}/summary.json"))["tune"]
def ab(who):
    steps = []
    for r in range(1, rounds + 1):
        s = json.load(open(f"{out}/ab{i}-{who}-{r}/summary.json"))
        steps.append(s["step_ms"]["median"])
    return statistics.median(steps)
g, t = ab("grid"), ab("tune")
label = {c["id"]: c["label"] for c in grid["candidates"]}
grid_time = grid["measurement_s"] - grid["baseline"]["wall_s"]
configs = sum(1 for c in grid["candidates"] if c["rounds"] > 0)
same = "yes" if grid["answer"]["command"] == tune["answer"]["command"] else "no"
print(f"{name:<12} {label[grid['answer']['best']]:<44} {label[tune['answer']['best']]:<44} "
      f"{g:8.2f} {t:8.2f} {t / g:9.3f} {100 * tune['measurement_s'] / grid_time:8.1f}% {configs:7d} {same}")
PY
done
echo "pick/best: tune's pick over the grid's best, both measured again alternating ($ab_rounds x $ab_steps steps, the median of the runs' medians)"
echo "time: tune's whole search (the default's characterization included) over the grid's measuring time"
echo "same: whether tune's pick is the grid's best configuration (its command line), so that pick/best is the noise of measuring one configuration twice"
