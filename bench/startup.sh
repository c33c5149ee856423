#!/usr/bin/env bash
# Start-up cost of the tandem program: peak RSS and wall time of --version and --help,
# against the same program with the GPU plug-in (and so the CUDA libraries) preloaded, as
# a build that linked the GPU parts in did before they became a plug-in. Median of N runs;
# the wall time includes /usr/bin/time's own start (about a millisecond).
#   bench/startup.sh [build dir, default build/release] [runs, default 21]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build/release}"
runs="${2:-21}"
tandem="$build/apps/tandem/tandem"
plugin="$build/lib/libtandem_gpu.so"
scratch=$(mktemp)
trap 'rm -f "$scratch"' EXIT

measure() {  # prints "median_ms median_kb" over $runs runs of "$@"
  local times=() rss=()
  for ((i = 0; i < runs; i++)); do
    local start end
    start=$EPOCHREALTIME
    /usr/bin/time -o "$scratch" -f "%M" "$@" >/dev/null 2>&1
    end=$EPOCHREALTIME
    times+=("$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", (b - a) * 1000}')")
    rss+=("$(tail -1 "$scratch")")
  done
  local t k
  t=$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(((runs + 1) / 2))p")
  k=$(printf '%s\n' "${rss[@]}" | sort -n | sed -n "$(((runs + 1) / 2))p")
  echo "$t $k"
}

printf '%-12s %22s %32s %8s\n' "command" "tandem (ms, KB)" "with the plug-in preloaded" "RSS x"
for args in --version --help; do
  read -r t k < <(measure "$tandem" "$args")
  if [[ -f "$plugin" ]]; then
    read -r tp kp < <(measure env LD_PRELOAD="$plugin" "$tandem" "$args")
    printf '%-12s %10s ms %8s KB %18s ms %9s KB %7.1fx\n' "$args" "$t" "$k" "$tp" "$kp" \
      "$(awk -v a="$kp" -v b="$k" 'BEGIN{print a / b}')"
  else
    printf '%-12s %10s ms %8s KB %32s\n' "$args" "$t" "$k" "(no plug-in: a build without CUDA)"
  fi
done
