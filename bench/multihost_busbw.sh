#!/usr/bin/env bash
# tandem's all-reduce against the wire (issue 17): bus bandwidth of tandem's mpi backend
# (auto, ring, native) beside Open MPI's blocking MPI_Allreduce, across 2 and 4
# network-namespace hosts (scripts/multihost) whose links are shaped with tc tbf, in
# nccl-tests' columns, with busbw as a share of the shaped rate. Beside them, the same
# hosts' plain TCP ceiling: every host streams to its right neighbour and from its left
# one at once (a ring's traffic, no MPI), per host GB/s, comparable with busbw.
#
#   bench/multihost_busbw.sh [--rates "1gbit 10gbit"] [--hosts "2 4"] [--repeats 3]
#                            [--min-bytes 1MiB] [--max-bytes 64MiB] [--iters 5] [--warmup 1]
#
# Needs root (network namespaces), Open MPI and build/release/bench/mpi_allreduce_bench
# (cmake --build build/release --target mpi_allreduce_bench). Per rate and host count, one
# set of hosts; in it `--repeats` rounds, each round running the three algorithms (order
# rotated from round to round) and the TCP ceiling. Every mpi_allreduce_bench run times
# MPI_Allreduce and tandem alternately (--table nccl), so each tandem row has a baseline
# from the same minutes. Prints every run's rows as they come, then a summary: per
# configuration the median over rounds of time and bandwidths, and busbw's range.
# Exit status 77 where namespaces are not permitted (scripts/multihost's).
set -euo pipefail
cd "$(dirname "$0")/.."

rates="1gbit 10gbit"
host_counts="2 4"
repeats=3
min_bytes=1MiB
max_bytes=64MiB
iters=5
warmup=1
while [ $# -gt 0 ]; do
  case "$1" in
    --rates) rates="$2"; shift 2 ;;
    --hosts) host_counts="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --min-bytes) min_bytes="$2"; shift 2 ;;
    --max-bytes) max_bytes="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    *) echo "multihost_busbw: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
bench=build/release/bench/mpi_allreduce_bench
[ -x "$bench" ] || { echo "multihost_busbw: build $bench first" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The plain TCP ring: rank r (Open MPI's environment says which) sends `bytes` to host r+1
# and receives as many from host r-1 at once, three times; prints GB/s each way.
cat >"$work/tcp_ring.py" <<'PY'
import os, socket, sys, threading, time
rank, n = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
total, reps, port = int(sys.argv[1]), int(sys.argv[2]), 47000
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((f"10.77.0.{rank + 1}", port))
server.listen(1)
for _ in range(400):
    try:
        out = socket.create_connection((f"10.77.0.{(rank + 1) % n + 1}", port))
        break
    except OSError:
        time.sleep(0.05)
inp, _ = server.accept()
sink = memoryview(bytearray(4 << 20))
source = memoryview(bytes(4 << 20))
def receive():
    got = 0
    while got < total:
        k = inp.recv_into(sink[:min(len(sink), total - got)])
        if k == 0:
            raise SystemExit("tcp_ring: peer closed")
        got += k
def token():  # twice around the ring: everyone starts together
    for _ in range(2):
        if rank == 0:
            out.sendall(b"x"); inp.recv(1)
        else:
            inp.recv(1); out.sendall(b"x")
times = []
for _ in range(reps):
    token()
    start = time.perf_counter()
    receiver = threading.Thread(target=receive)
    receiver.start()
    sent = 0
    while sent < total:
        k = min(len(source), total - sent)
        out.sendall(source[:k])
        sent += k
    receiver.join()
    times.append(time.perf_counter() - start)
if rank == 0:
    times.sort()
    t = times[len(times) // 2]
    print(f"tcp_ring {total} {t * 1e6:.1f} {total / t / 1e9:.4f}", flush=True)
PY

# The rate as --link-rate reads it, from tc's spelling.
link_rate() {
  case "$1" in
    *gbit) echo "${1%gbit}Gb/s" ;;
    *mbit) echo "${1%mbit}Mb/s" ;;
    *) echo "$1" ;;
  esac
}
max_b=$(python3 -c "
import re,sys
m=re.fullmatch(r'(\d+)(KiB|MiB|GiB)?','$max_bytes'); print(int(m[1])*{None:1,'KiB':1<<10,'MiB':1<<20,'GiB':1<<30}[m[2]])")

log="$work/rows"
algorithms=(auto ring native)
for rate in $rates; do
  for n in $host_counts; do
    echo "== $n hosts, each link tbf $rate (scripts/multihost), $(date -u +%FT%TZ)"
    # shellcheck disable=SC2016  # expanded inside the hosts' shell
    scripts/multihost --hosts "$n" --rate "$rate" -- env N="$n" RATE="$rate" \
      LINK="$(link_rate "$rate")" REPEATS="$repeats" BENCH="$bench" ALGS="${algorithms[*]}" \
      ARGS="--min-bytes $min_bytes --max-bytes $max_bytes --iters $iters --warmup $warmup" \
      TCP="$work/tcp_ring.py" MAXB="$max_b" sh -c '
      set -- $ALGS
      # --bind-to none: every "host" is this machine, and by default Open MPI binds the
      # rank of each host to core 0, the same core for all (docs/PERFORMANCE.md).
      for round in $(seq 1 "$REPEATS"); do
        for alg in "$@"; do
          $TANDEM_MPIRUN --bind-to none -np "$N" "$BENCH" --table nccl --algorithm "$alg" --link-rate "$LINK" \
            $ARGS | sed "s/^/$RATE $N $round /"
        done
        $TANDEM_MPIRUN --bind-to none -np "$N" python3 "$TCP" "$MAXB" 3 | sed "s/^/$RATE $N $round /"
        first=$1; shift; set -- "$@" "$first"  # rotate the order for the next round
      done' | tee -a "$log"
  done
done

# Summary: per rate, hosts, size and implementation, medians over rounds; MPI_Allreduce
# pools its rows from the three algorithms' runs.
python3 - "$log" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
tcp = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 4 or f[3].startswith("#"):
        continue
    rate, n, _ = f[0], int(f[1]), f[2]
    if f[3] == "tcp_ring":
        tcp[(rate, n)].append(float(f[6]))
    elif len(f) >= 12:
        size, count, impl, t, alg, bus = int(f[3]), f[4], f[7], float(f[8]), float(f[9]), float(f[10])
        pct = float(f[11].rstrip("%"))
        rows[(rate, n, size, impl)].append((t, alg, bus, pct))
print("\n# Summary: median over rounds (busbw range in brackets); %link = busbw / shaped rate")
print(f"{'rate':>7} {'hosts':>5} {'size':>10} {'count':>9} {'type':>5} {'impl':<14} {'time_us':>11}"
      f" {'algbw':>7} {'busbw':>7} {'%link':>6}  busbw range")
for key in sorted(rows, key=lambda k: (k[0], k[1], k[2], k[3])):
    rate, n, size, impl = key
    v = rows[key]
    med = lambda i: statistics.median(x[i] for x in v)
    buses = [x[2] for x in v]
    print(f"{rate:>7} {n:>5} {size:>10} {size // 4:>9} float {impl:<14} {med(0):>11.1f}"
          f" {med(1):>7.4f} {med(2):>7.4f} {med(3):>5.1f}%  [{min(buses):.4f}-{max(buses):.4f}] x{len(v)}")
for (rate, n), v in sorted(tcp.items()):
    print(f"{rate:>7} {n:>5} plain TCP ring (per host, each way): median {statistics.median(v):.4f} GB/s"
          f" [{min(v):.4f}-{max(v):.4f}] x{len(v)}")
PY
