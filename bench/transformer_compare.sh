#!/usr/bin/env bash
# tandem's CPU transformer against PyTorch on the same GPT, the same shapes and one thread
# per rank, interleaved round by round so that the machine's noise hits both alike. Each
# round runs bench/transformer_bench (tandem: the sgemm rate, 1 rank x 1 thread and 2
# ranks x 1 thread) and then bench/transformer_torch.py (PyTorch: 1 process x 1 thread,
# and DistributedDataParallel over gloo, 2 processes x 1 thread).
#
# PyTorch at its best: Debian's build multiplies through OpenBLAS, which runs generic
# kernels on CPU models it does not know. Each PyTorch run is made three times per round:
# as the environment gives it, with OPENBLAS_CORETYPE naming the best kernel family this
# CPU supports (SkylakeX with AVX-512, Haswell with AVX2) in that command alone, and that
# again with each process bound to a CPU of its own (--bind 1, as tandem binds its ranks
# by default); the fastest counts. Prints the medians and the ratios tandem / PyTorch.
#
#   bench/transformer_compare.sh BENCH_BINARY [ROUNDS] [VOCAB]
# Needs Debian's python3-torch (apt-get install python3-torch) for /usr/bin/python3.
set -euo pipefail
bench="$1"
rounds="${2:-3}"
vocab="${3:-50304}"
here="$(dirname "$0")"
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "transformer_compare: PyTorch is missing: apt-get install python3-torch" >&2
  exit 2
fi
best_core=""
if grep -qw avx512f /proc/cpuinfo; then best_core=SkylakeX; elif grep -qw avx2 /proc/cpuinfo; then best_core=Haswell; fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
torch_run() {  # RANKS BIND [VAR=VALUE...]: one PyTorch run's line, in that environment
  local ranks="$1" bind="$2"
  shift 2
  env "$@" OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 "$here/transformer_torch.py" \
    --threads 1 --ranks "$ranks" --vocab "$vocab" --bind "$bind"
}
torch_best() {  # ranks, output file: the fastest of the settings
  local ranks="$1" file="$2" force=() a b c
  [[ -z "$best_core" ]] || force=("OPENBLAS_CORETYPE=$best_core")
  a=$(torch_run "$ranks" 0)
  b="$a"
  [[ -z "$best_core" ]] || b=$(torch_run "$ranks" 0 "${force[@]}")
  c=$(torch_run "$ranks" 1 "${force[@]}")
  echo "as-given: $a" >>"$out/settings"
  echo "forced $best_core: $b" >>"$out/settings"
  echo "forced $best_core, bound: $c" >>"$out/settings"
  # The smallest step time (6th field); on a tie the earlier setting.
  printf '%s\n' "$a" "$b" "$c" | sort -s -g -k6,6 | head -1 >"$file"
}
for ((r = 0; r < rounds; r++)); do
  "$bench" --rounds 1 --model "gpt:layers=4,dim=256,heads=4,seq=128,vocab=$vocab" >"$out/tandem.$r"
  torch_best 1 "$out/torch.$r"
  torch_best 2 "$out/ddp.$r"
done
head -2 "$out/tandem.0"
echo "# PyTorch runs (step ms is the 6th field):"
sed 's/^/#   /' "$out/settings"
awk -v rounds="$rounds" '
  function median(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  /^single-thread sgemm/ { sgemm = sgemm " " $4 }
  /^1 rank x 1 thread/ { ms1 = ms1 " " $(NF - 3); tok1 = tok1 " " $(NF - 2); pct1 = pct1 " " $NF + 0 }
  /^2 ranks x 1 thread/ { ms2 = ms2 " " $(NF - 3); tok2 = tok2 " " $(NF - 2); pct2 = pct2 " " $NF + 0 }
  /^torch / && FILENAME ~ /torch\./ { version = $2; torch_ms = torch_ms " " $6; torch_tok = torch_tok " " $8 }
  /^torch / && FILENAME ~ /ddp\./ { ddp_ms = ddp_ms " " $6; ddp_tok = ddp_tok " " $8 }
  END {
    printf "single-thread sgemm: %.1f GFLOP/s\n", median(sgemm)
    printf "%-44s %10s %10s %10s\n", "implementation", "step ms", "tokens/s", "of sgemm"
    printf "%-44s %10.1f %10.0f %9.1f%%\n", "tandem, 1 rank x 1 thread", median(ms1), median(tok1), median(pct1)
    printf "%-44s %10.1f %10.0f %9.1f%%\n", "tandem, 2 ranks x 1 thread, bucketed", median(ms2), median(tok2), median(pct2)
    printf "%-44s %10.1f %10.0f %10s\n", "PyTorch " version ", 1 thread", median(torch_ms), median(torch_tok), "-"
    printf "%-44s %10.1f %10.0f %10s\n", "PyTorch " version " DDP gloo, 2 ranks x 1 thread", median(ddp_ms), median(ddp_tok), "-"
    printf "tandem / PyTorch step time, 1 rank: %.2f; 2 ranks (DDP gloo): %.2f (medians of %d interleaved rounds)\n", median(ms1) / median(torch_ms), median(ms2) / median(ddp_ms), rounds
  }' "$out"/tandem.* "$out"/torch.* "$out"/ddp.*
