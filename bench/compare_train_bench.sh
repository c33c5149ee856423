#!/usr/bin/env bash
# Compares two builds' bench/train_bench in one interleaved run: round by round, OLD then
# NEW (each one round of every configuration), so the machine's noise hits both alike.
# Prints, per configuration, the median step time of each build over the rounds, the
# ratio of the medians NEW / OLD (< 1: NEW is faster), and the range of the per-round
# ratios (each round's NEW over the same round's OLD): how much of a ratio is noise.
#
#   bench/compare_train_bench.sh OLD_BINARY NEW_BINARY [ROUNDS] [train_bench flags...]
set -euo pipefail
old="$1"
new="$2"
rounds="${3:-5}"
shift $(($# < 3 ? $# : 3))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 0; r < rounds; r++)); do
  "$old" --rounds 1 "$@" >"$out/old.$r"
  "$new" --rounds 1 "$@" >"$out/new.$r"
done
head -2 "$out/new.0"
# Table rows: "<configuration>  <step ms> ..." after the header line "configuration ...".
awk -v rounds="$rounds" '
  function median(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  FNR == 1 {
    build = FILENAME ~ /\/old\./ ? "old" : "new"; table = 0
    round = FILENAME; sub(/.*\./, "", round)
  }
  /^configuration/ { table = 1; next }
  /^timeline cost/ { table = 0 }
  table {
    name = substr($0, 1, 48); sub(/ +$/, "", name)
    split(substr($0, 49), f, " ")
    if (!(name in seen)) { seen[name] = 1; order[++count] = name }
    ms[build, name] = ms[build, name] " " f[1]
    at[build, name, round] = f[1]
  }
  END {
    printf "%-48s %10s %10s %8s  %s\n", "configuration", "old ms", "new ms", "new/old", "per-round range"
    for (i = 1; i <= count; i++) {
      n = order[i]; o = median(ms["old", n]); w = median(ms["new", n])
      lo = 1e9; hi = 0
      for (r = 0; r < rounds; r++) {
        q = at["new", n, r] / at["old", n, r]
        if (q < lo) lo = q
        if (q > hi) hi = q
      }
      printf "%-48s %10.2f %10.2f %8.3f  %.3f-%.3f\n", n, o, w, w / o, lo, hi
    }
    printf "(medians of %d interleaved rounds)\n", rounds
  }' "$out"/old.* "$out"/new.*
