#!/usr/bin/env python3
"""tandem.analyze (the Python module) against `tandem analyze` (the CLI) on one large
generated PyTorch-profiler trace directory, timed in the same run, rounds interleaved.

    PYTHONPATH=build/release/python python3 bench/python_analyze.py [--mb 1024] [--ranks 2]
        [--rounds 3] [--dir /tmp/tandem-py-bench] [--keep]

The traces are written once (reused by a later run with the same size and ranks unless
--regenerate): per rank, ProfilerStep windows of 1000 kernels, each a cpu_op, its
cudaLaunchKernel and the kernel with Kineto's usual args, every 20th an NCCL all-reduce
with PyTorch's collective args on a second stream, every 50th a memcpy; the sizes add up
to --mb. Each round runs the CLI (`tandem analyze DIR --quiet`, output discarded) and,
in this process, tandem.analyze(DIR) followed by reading the DataFrames the CLI prints
(iterations, steps, ranks, collectives). Prints the median wall time of each and the
ratio Python / CLI. Not part of the test suite.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

import tandem

GEMM = ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"
        "(cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)")
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
CPU_OPS = ("aten::linear", "aten::addmm", "aten::relu", "aten::add_")


def generate(path: str, rank: int, target_bytes: int) -> int:
    """One rank's trace of about target_bytes; returns its kernels."""
    with open(path, "w", buffering=1 << 22) as f:
        f.write('{"schemaVersion": 1, "deviceProperties": [], "distributedInfo": '
                f'{{"backend": "nccl", "rank": {rank}, "world_size": 2}},\n"traceEvents": [\n')
        kernels, written = 0, 0
        t, gpu, step, step_start = 1.0, 5.0, 0, 1.0
        while written < target_bytes:
            chunk = []
            for _ in range(1000):
                corr = 1000 + kernels
                comm = kernels % 20 == 19
                copy = kernels % 50 == 7
                chunk.append(
                    f'{{"ph": "X", "cat": "cpu_op", "name": "{CPU_OPS[kernels % 4]}", "pid": 4242, '
                    f'"tid": 4242, "ts": {t:.3f}, "dur": 9.250, "args": {{"External id": {kernels}, '
                    f'"Record function id": 0, "Sequence number": {kernels}}}}},\n'
                    f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, '
                    f'"tid": 4242, "ts": {t + 2:.3f}, "dur": 4.125, "args": {{"External id": '
                    f'{kernels}, "cbid": 211, "correlation": {corr}}}}},\n')
                stream = 13 if comm else 7
                args = (f'"External id": {kernels}, "device": 0, "context": 1, "stream": {stream}, '
                        f'"correlation": {corr}, "registers per thread": 232, "shared memory": '
                        f'49152, "grid": [108, 2, 1], "block": [128, 1, 1]')
                if comm:
                    args += (', "Collective name": "allreduce", "In msg nelems": 6553600, '
                             '"Out msg nelems": 6553600, "Group size": 2, "dtype": "Float"')
                name = "Memcpy DtoD (Device -> Device)" if copy else NCCL if comm else GEMM
                cat = "gpu_memcpy" if copy else "kernel"
                chunk.append(
                    f'{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": 0, "tid": {stream}, '
                    f'"ts": {gpu:.3f}, "dur": {40.0 if comm else 11.5 + rank:.3f}, "args": {{{args}}}}},\n')
                t += 12.5
                gpu = max(gpu + (0.5 if comm else 12.0 + rank), t + 3)
                kernels += 1
            chunk.append(
                f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", '
                f'"pid": 4242, "tid": 4242, "ts": {step_start:.3f}, "dur": {t - step_start:.3f}}},\n')
            step += 1
            step_start = t
            text = "".join(chunk)
            f.write(text)
            written += len(text)
        f.write('{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python"}}\n]}\n')
    return kernels


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=1024, help="total trace size, MB (default 1024)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", default="/tmp/tandem-py-bench")
    p.add_argument("--regenerate", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the traces afterwards")
    o = p.parse_args()

    stamp = os.path.join(o.dir, f".generated-{o.mb}MB-{o.ranks}ranks")
    if o.regenerate or not os.path.exists(stamp):
        shutil.rmtree(o.dir, ignore_errors=True)
        os.makedirs(o.dir)
        t0 = time.perf_counter()
        for r in range(o.ranks):
            generate(os.path.join(o.dir, f"rank{r}.json"), r, o.mb * 1_000_000 // o.ranks)
        open(stamp, "w").close()
        print(f"generated {o.ranks} traces in {time.perf_counter() - t0:.1f} s", flush=True)
    size = sum(os.path.getsize(os.path.join(o.dir, f)) for f in os.listdir(o.dir))
    cli = tandem._executable()
    print(f"{size / 1e6:.0f} MB of traces in {o.dir}; CLI {cli}; tandem {tandem.__version__}")

    cli_s, py_s = [], []
    for i in range(o.rounds):
        t0 = time.perf_counter()
        done = subprocess.run([cli, "analyze", o.dir, "--quiet"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        cli_s.append(time.perf_counter() - t0)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        t0 = time.perf_counter()
        a = tandem.analyze(o.dir)
        frames = (a.iterations, a.steps, a.ranks, a.collectives)
        py_s.append(time.perf_counter() - t0)
        print(f"round {i + 1}: CLI {cli_s[-1]:.2f} s, Python {py_s[-1]:.2f} s "
              f"({len(frames[0])} iteration rows)", flush=True)
    c, y = statistics.median(cli_s), statistics.median(py_s)
    print(f"median: CLI {c:.2f} s ({size / 1e6 / c:.0f} MB/s), Python {y:.2f} s "
          f"({size / 1e6 / y:.0f} MB/s); Python / CLI = {y / c:.3f}")
    if not o.keep:
        shutil.rmtree(o.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
