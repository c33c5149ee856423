"""Fixtures of the Python module's tests: the tandem CLI, and small PyTorch-profiler
(Kineto) traces whose overlap is known by construction.

Each rank's step k (1000 us long) holds, relative to its start T:
  compute   gemm_fwd [100, 300), gemm_bwd [300, 600 + 20 r)    (stream 7)
  comm      ncclDevKernel_AllReduce [450, 750), 2^20 Float, group 2   (stream 20)
  memory    Memcpy [800, 820)
so per iteration: T_comp = 500 + 20 r, T_comm = 300, T_ovl = 150 + 20 r, and the hidden
share (150 + 20 r) / 300. The baseline (compute-only) has the compute kernels at 0.8x
their duration and no communication.
"""

import gzip
import json
import os
import subprocess

import pytest

import tandem

STEPS = 4
ALLREDUCE_ELEMS = 1 << 20


def kineto_trace(rank, steps=STEPS, comm=True, scale=1.0):
    events = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python"}}]
    corr = 1
    for k in range(steps):
        t = 10.0 + 1000.0 * k
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}",
                       "pid": 100, "tid": 100, "ts": t, "dur": 990.0})
        kernels = [("gemm_fwd", 100.0, 200.0 * scale), ("gemm_bwd", 300.0, (300.0 + 20 * rank) * scale)]
        for i, (name, start, dur) in enumerate(kernels):
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": 100, "tid": 100, "ts": t + 1 + i, "dur": 1.0,
                           "args": {"correlation": corr, "cbid": 211}})
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7,
                           "ts": t + start, "dur": dur,
                           "args": {"device": 0, "stream": 7, "correlation": corr}})
            corr += 1
        if comm:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": 100, "tid": 100, "ts": t + 5, "dur": 1.0,
                           "args": {"correlation": corr, "cbid": 211}})
            events.append({"ph": "X", "cat": "kernel",
                           "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)",
                           "pid": 0, "tid": 20, "ts": t + 450.0, "dur": 300.0,
                           "args": {"device": 0, "stream": 20, "correlation": corr,
                                    "Collective name": "allreduce",
                                    "In msg nelems": ALLREDUCE_ELEMS,
                                    "Out msg nelems": ALLREDUCE_ELEMS, "Group size": 2,
                                    "dtype": "Float", "Process Group Name": "0"}})
            corr += 1
        events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
                       "pid": 0, "tid": 7, "ts": t + 800.0, "dur": 20.0, "args": {"stream": 7}})
    return {"schemaVersion": 1, "deviceProperties": [],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
            "traceEvents": events, "displayTimeUnit": "ms"}


def write_traces(directory, comm=True, scale=1.0):
    os.makedirs(directory, exist_ok=True)
    for rank in range(2):
        doc = json.dumps(kineto_trace(rank, comm=comm, scale=scale))
        if rank == 1:  # one gzip file: detected by content
            with gzip.open(os.path.join(directory, f"rank{rank}.json.gz"), "wt") as f:
                f.write(doc)
        else:
            with open(os.path.join(directory, f"rank{rank}.json"), "w") as f:
                f.write(doc)
    return str(directory)


@pytest.fixture(scope="session")
def cli():
    """The tandem executable the package runs (bin/tandem beside it)."""
    return tandem._executable()


@pytest.fixture(scope="session")
def traces(tmp_path_factory):
    return write_traces(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="session")
def baseline_traces(tmp_path_factory):
    return write_traces(tmp_path_factory.mktemp("baseline"), comm=False, scale=0.8)


def run_cli(cli, *args):
    done = subprocess.run([cli, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout
