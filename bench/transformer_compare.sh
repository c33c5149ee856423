#!/usr/bin/env bash
# tandem's CPU transformer against PyTorch on the same GPT, the same shapes and one thread
# each, interleaved round by round so that the machine's noise hits both alike. Each
# round runs bench/transformer_bench (tandem: the sgemm rate, 1 rank x 1 thread and 2
# ranks x 1 thread) and then bench/transformer_torch.py (PyTorch, 1 thread). Prints the
# medians and the ratio of tokens per second, tandem / PyTorch (> 1: tandem is faster).
#
#   bench/transformer_compare.sh BENCH_BINARY [ROUNDS]
# Needs Debian's python3-torch (apt-get install python3-torch) for /usr/bin/python3.
set -euo pipefail
bench="$1"
rounds="${2:-3}"
here="$(dirname "$0")"
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "transformer_compare: PyTorch is missing: apt-get install python3-torch" >&2
  exit 2
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 0; r < rounds; r++)); do
  "$bench" --rounds 1 >"$out/tandem.$r"
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 "$here/transformer_torch.py" \
    --threads 1 >"$out/torch.$r"
done
head -2 "$out/tandem.0"
awk -v rounds="$rounds" '
  function median(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  /^single-thread sgemm/ { sgemm = sgemm " " $4 }
  /^1 rank x 1 thread/ { ms1 = ms1 " " $(NF - 3); tok1 = tok1 " " $(NF - 2); pct1 = pct1 " " $NF + 0 }
  /^2 ranks x 1 thread/ { ms2 = ms2 " " $(NF - 3); tok2 = tok2 " " $(NF - 2); pct2 = pct2 " " $NF + 0 }
  /^torch / { version = $2; torch_ms = torch_ms " " $6; torch_tok = torch_tok " " $8 }
  END {
    printf "single-thread sgemm: %.1f GFLOP/s\n", median(sgemm)
    printf "%-40s %10s %10s %10s\n", "implementation", "step ms", "tokens/s", "of sgemm"
    printf "%-40s %10.1f %10.0f %9.1f%%\n", "tandem, 1 rank x 1 thread", median(ms1), median(tok1), median(pct1)
    printf "%-40s %10.1f %10.0f %9.1f%%\n", "tandem, 2 ranks x 1 thread, bucketed", median(ms2), median(tok2), median(pct2)
    printf "%-40s %10.1f %10.0f %10s\n", "PyTorch " version ", 1 thread", median(torch_ms), median(torch_tok), "-"
    printf "tandem / PyTorch tokens/s, 1 thread each: %.2f (medians of %d interleaved rounds)\n", median(tok1) / median(torch_tok), rounds
  }' "$out"/tandem.* "$out"/torch.*
