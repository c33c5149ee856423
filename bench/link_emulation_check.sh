#!/usr/bin/env bash
# Does `--link RATE,LATENCY` on one host predict the step time of the same run on shaped
# real links? (issue 17) For each model and strategy: `tandem train` on 2 network-
# namespace hosts joined by links shaped with tc tbf (scripts/multihost, Open MPI over
# TCP, one rank per host), and the same run on the local backend (2 ranks as threads of
# one process) with the link emulated; both in the same rounds, interleaved. Prints every
# run's median step, communication and compute times, then per configuration the medians
# over rounds and the ratios emulated / real, of the step and of step - compute (1.00 = a
# perfect prediction; the goal is within 10%).
#
#   bench/link_emulation_check.sh [--rate 1gbit] [--latency 1ms] [--repeats 3] [--steps 12]
#       [--link "1Gb/s,1ms 119.6MB/s,10us"] [--configs "mlp:8x1024/64 mlp:8x512/128"]
#       [--strategies "sequential bucketed"]
#
# --link takes one or more emulations to compare (each BANDWIDTH,LATENCY as --link reads
# it); --configs MODEL/BATCH pairs. Needs root (network namespaces), Open MPI and
# build/release/apps/tandem/tandem. Exit status 77 where namespaces are not permitted.
set -euo pipefail
cd "$(dirname "$0")/.."

rate=1gbit
latency=1ms
repeats=3
steps=12
links="1Gb/s,1ms 119.6MB/s,10us"
configs="mlp:8x1024/64 mlp:8x512/128"
strategies="sequential bucketed"
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate="$2"; shift 2 ;;
    --latency) latency="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --link) links="$2"; shift 2 ;;
    --configs) configs="$2"; shift 2 ;;
    --strategies) strategies="$2"; shift 2 ;;
    *) echo "link_emulation_check: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
tandem=build/release/apps/tandem/tandem
[ -x "$tandem" ] || { echo "link_emulation_check: build $tandem first" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log="$work/rows"
echo "# $(date -u +%FT%TZ); real: 2 hosts, tbf $rate, latency $latency; emulated: --link $links"

# One set of hosts for everything; the local runs go in h0's namespace too (the network
# does not matter to them), interleaved with the real ones.
# shellcheck disable=SC2016  # expanded inside the hosts' shell
scripts/multihost --hosts 2 --rate "$rate" --latency "$latency" -- env TANDEM="$tandem" \
  WORK="$work" REPEATS="$repeats" STEPS="$steps" LINKS="$links" CONFIGS="$configs" \
  STRATEGIES="$strategies" sh -c '
  step_ms() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d[\"step_ms\"][\"median\"], d[\"comm_ms\"][\"median\"], d[\"compute_ms\"][\"median\"])" "$1/summary.json"; }
  for round in $(seq 1 "$REPEATS"); do
    for config in $CONFIGS; do
      model=${config%/*}; batch=${config#*/}
      for strategy in $STRATEGIES; do
        common="train --model $model --batch $batch --steps $STEPS --warmup 2 --strategy $strategy --quiet --force"
        # --bind-to none: both "hosts" are this machine, and by default Open MPI binds the
        # rank of each host to core 0, the same core for both (docs/PERFORMANCE.md).
        $TANDEM_MPIRUN --bind-to none -np 2 "$TANDEM" $common --out "$WORK/real" >/dev/null
        echo "$round $model/$batch $strategy real $(step_ms "$WORK/real")"
        for link in $LINKS; do
          "$TANDEM" $common --backend local --ranks 2 --link "$link" --out "$WORK/emu" >/dev/null
          echo "$round $model/$batch $strategy emulated:$link $(step_ms "$WORK/emu")"
        done
      done
    done
  done' | tee "$log"

# Summary: medians over rounds; ratio = emulated / real step of the same round, then its
# median and range over rounds. The machine is shared, so compute time moves with other
# people's load from one run to the next; "wire" = step - compute, what the link adds, is
# the part the emulation predicts, and gets a ratio of its own.
python3 - "$log" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(dict)  # (config, strategy) -> {kind: {round: (step, comm, compute)}}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) != 7 or f[0].startswith("#"):
        continue
    rnd, config, strategy, kind = f[:4]
    runs[(config, strategy)].setdefault(kind, {})[rnd] = tuple(map(float, f[4:]))
def ratio_text(values):
    return f"{statistics.median(values):5.3f} [{min(values):.3f}-{max(values):.3f}]" if values else ""
print("\n# Summary: medians over rounds (ms); ratios emulated / real per round: median [range]")
print(f"{'config':<16} {'strategy':<11} {'run':<28} {'step':>7} {'compute':>7} {'wire':>7}"
      f"  {'step ratio':<21}  wire ratio")
for (config, strategy), kinds in runs.items():
    real = kinds.get("real", {})
    for kind, by_round in kinds.items():
        step = statistics.median(v[0] for v in by_round.values())
        compute = statistics.median(v[2] for v in by_round.values())
        wire = statistics.median(v[0] - v[2] for v in by_round.values())
        steps = [by_round[r][0] / real[r][0] for r in by_round if r in real and kind != "real"]
        wires = [(by_round[r][0] - by_round[r][2]) / (real[r][0] - real[r][2])
                 for r in by_round if r in real and kind != "real"]
        print(f"{config:<16} {strategy:<11} {kind:<28} {step:7.1f} {compute:7.1f} {wire:7.1f}"
              f"  {ratio_text(steps):<21}  {ratio_text(wires)}")
PY
