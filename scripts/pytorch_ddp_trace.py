"""One rank of a PyTorch DDP job (gloo, CPU) under torch.profiler, for
scripts/validate-replay-pytorch: a real profile to replay, and the configuration a
what-if predicts, measured.

    python3 pytorch_ddp_trace.py RANK WORLD PORT MODE LAYERS WIDTH BATCH OUT

MODE overlapped: DDP as everyone runs it, each 4 MiB bucket all-reduced by gloo while
backward goes on. MODE sequential: backward without DDP's hooks (no_sync), then the same
buckets (parameters in reverse order, cut at 4 MiB, as DDP cuts them) flattened,
all-reduced one after another, averaged and copied back: the communication after compute.
MODE compute-only: backward under no_sync and no communication at all (the baseline
`tandem analyze --baseline` and `simulate --from-trace --baseline` take). Writes OUT/rank{RANK}.json (export_chrome_trace) of 12 steps after 2 skipped and 2 warm-up.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

BUCKET_BYTES = 4 << 20


def main():
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    mode, layers, width, batch, out = sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), int(
        sys.argv[7]), sys.argv[8]
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = port
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(layers)])
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=BUCKET_BYTES / 2**20)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(batch, width)

    buckets, bucket, size = [], [], 0
    for p in reversed(list(model.parameters())):
        bucket.append(p)
        size += p.numel() * p.element_size()
        if size >= BUCKET_BYTES:
            buckets.append(bucket)
            bucket, size = [], 0
    if bucket:
        buckets.append(bucket)

    def step():
        opt.zero_grad()
        if mode == "overlapped":
            ddp(x).square().mean().backward()
        else:
            with ddp.no_sync():
                ddp(x).square().mean().backward()
            for b in buckets if mode == "sequential" else []:
                flat = torch.cat([p.grad.reshape(-1) for p in b])
                dist.all_reduce(flat)
                flat /= world
                offset = 0
                for p in b:
                    p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
                    offset += p.numel()
        opt.step()

    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=2, warmup=2, active=12)) as prof:
        for _ in range(16):
            step()
            prof.step()
    os.makedirs(out, exist_ok=True)
    prof.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
