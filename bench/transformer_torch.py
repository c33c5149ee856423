#!/usr/bin/python3
"""The same GPT as tandem's gpt:layers=L,dim=D,heads=H,seq=S (docs/MODELS.md), in PyTorch
on the CPU, for bench/transformer_compare.sh: pre-LayerNorm blocks with a fused QKV
projection, causal multi-head attention, a 4 x dim GELU(tanh) MLP, learned positions, a
final LayerNorm and a head tied to the token embedding; SGD with momentum, fp32.

With --ranks N (N > 1) it trains data-parallel as tandem's ranks do: N processes on this
machine, DistributedDataParallel over gloo on loopback (127.0.0.1), its default 25 MiB
buckets overlapping backward, --batch sequences per rank, --threads per process.
--bind 1 binds each process to --threads CPUs of its own (as tandem binds its ranks) when
all fit.

Prints one line: "torch <version> threads <n> step_ms <median> tokens_per_s <x>"
(tokens per second of the whole job; with --ranks, rank 0's median step).

    transformer_torch.py [--layers 4] [--dim 256] [--heads 4] [--seq 128] [--vocab 50304]
                         [--batch 8] [--steps 8] [--warmup 2] [--threads 1] [--ranks 1]
                         [--port 29511] [--bind 0|1]
"""
import argparse
import math
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, dim, heads, seq):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.fc_proj = nn.Linear(4 * dim, dim)
        # A plain attribute, not a buffer: DDP would broadcast a buffer, and gloo cannot
        # send bool tensors.
        self.mask = torch.ones(seq, seq, dtype=torch.bool).tril()

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, dim, heads, seq, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, seq) for _ in range(layers))
        self.lnf = nn.LayerNorm(dim)

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t))
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # the tied head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def train(rank, a):
    if a.bind:
        # Each process on `threads` CPUs of its own, as tandem binds its ranks (and mpirun
        # its processes): rank r on the r-th `threads` of the CPUs this process may use.
        allowed = sorted(os.sched_getaffinity(0))
        if a.ranks * a.threads <= len(allowed):
            os.sched_setaffinity(0, allowed[rank * a.threads:(rank + 1) * a.threads])
    torch.set_num_threads(a.threads)
    if a.ranks > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=rank,
                                world_size=a.ranks)
    torch.manual_seed(1)
    model = Gpt(a.layers, a.dim, a.heads, a.seq, a.vocab)
    if a.ranks > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    torch.manual_seed(1 + rank)  # each rank its own data, as tandem's shards
    data = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
    times = []
    for step in range(a.steps):
        start = time.perf_counter()
        loss = model(data[:, :-1], data[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        elapsed = time.perf_counter() - start
        if step >= a.warmup:
            times.append(elapsed)
    step_s = statistics.median(times)
    if rank == 0:
        print(f"torch {torch.__version__} threads {a.threads} step_ms {step_s * 1e3:.2f} "
              f"tokens_per_s {a.ranks * a.batch * a.seq / step_s:.0f}", flush=True)
    if a.ranks > 1:
        torch.distributed.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 4), ("dim", 256), ("heads", 4), ("seq", 128),
                          ("vocab", 50304), ("batch", 8), ("steps", 8), ("warmup", 2),
                          ("threads", 1), ("ranks", 1), ("port", 29511), ("bind", 0)]:
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    if a.ranks > 1:
        torch.multiprocessing.spawn(train, args=(a,), nprocs=a.ranks, join=True)
    else:
        train(0, a)


if __name__ == "__main__":
    main()
