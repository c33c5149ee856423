#!/usr/bin/env python3
"""Each overlap technique against the plain strategy it modifies (docs/FINDINGS.md).

For every workload (GPT and MLP at 2 ranks), with and without --link emulation, and every
technique, `tandem characterize` runs the plain configuration and the technique's
alternately, ROUNDS times each (the machine is shared and noisy: the two sides of a ratio
are measured in the same minutes), and `tandem train` runs each once for the memory and
the loss. Printed per row: the medians over rounds of each side's per-step medians (step
time E2E_ovl, compute slowdown S, overlap ratio R, hidden share, exposed communication),
the bytes on the wire per step and rank, the memory per rank (activations kept, the
process's peak resident set in the steps) and the ratio of the technique's step time to
the plain one's.

    bench/techniques.py TANDEM_BINARY [--rounds N] [--only NAME] [--out DIR]
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORKLOADS = {
    "mlp": ["--model", "mlp:8x1024", "--ranks", "2", "--batch", "64"],
    "gpt": ["--model", "gpt:layers=4,dim=128,heads=4,seq=64,vocab=4096", "--ranks", "2",
            "--batch", "8"],
}
# name: (the plain configuration's flags, the technique's extra flags, its workloads, its
# links)
ALL_LINKS = ["", "10GB/s,20us"]
TECHNIQUES = {
    "overlap-optimizer (bucketed)": (["--strategy", "bucketed"], ["--overlap-optimizer"],
                                     ["mlp", "gpt"], ALL_LINKS),
    "overlap-optimizer (layerwise)": (["--strategy", "layerwise"], ["--overlap-optimizer"],
                                      ["mlp", "gpt"], ALL_LINKS),
    "overlap-optimizer (zero2)": (["--strategy", "zero2"], ["--overlap-optimizer"],
                                  ["mlp", "gpt"], ALL_LINKS),
    "overlap-optimizer (fsdp)": (["--strategy", "fsdp"], ["--overlap-optimizer"], ["mlp", "gpt"],
                                 ALL_LINKS),
    # 1GB/s: the mlp's 28 MiB take about as long on the wire as its compute.
    "double-buffer (bucketed)": (["--strategy", "bucketed"], ["--double-buffer"], ["mlp", "gpt"],
                                 ALL_LINKS + ["1GB/s,20us"]),
    "layer-drop 0.2 + find-unused": (["--strategy", "bucketed"],
                                     ["--layer-drop", "0.2", "--find-unused"], ["gpt"],
                                     ALL_LINKS),
    "recompute full": (["--strategy", "bucketed"], ["--recompute", "full"], ["gpt"], ALL_LINKS),
    "recompute selective": (["--strategy", "bucketed"], ["--recompute", "selective"], ["gpt"],
                            ALL_LINKS),
    "compress fp16 (bucketed)": (["--strategy", "bucketed"], ["--compress", "fp16"],
                                 ["mlp", "gpt"], ALL_LINKS + ["1GB/s,20us"]),
    "compress bf16 (bucketed)": (["--strategy", "bucketed"], ["--compress", "bf16"],
                                 ["mlp", "gpt"], ALL_LINKS),
    "compress powersgd:4 (bucketed)": (["--strategy", "bucketed"], ["--compress", "powersgd:4"],
                                       ["mlp", "gpt"], ALL_LINKS + ["1GB/s,20us"]),
    "compress bf16 (zero2)": (["--strategy", "zero2"], ["--compress", "bf16"], ["mlp", "gpt"],
                              ALL_LINKS),
}
# The loss each technique that changes training costs: 200 steps of a GPT on a text file,
# the plain run beside the technique's, the training loss every 50 steps and the held-out
# loss at the end.
LOSS_RUN = ["--model", "gpt:layers=2,dim=64,heads=4,seq=64", "--ranks", "2", "--batch", "8",
            "--steps", "200", "--data", "/usr/share/common-licenses/GPL-3"]
LOSS_LRS = ["0.1", "0.03"]
LOSS_TECHNIQUES = {"double-buffer": ["--double-buffer"],
                   "compress fp16": ["--compress", "fp16"],
                   "compress bf16": ["--compress", "bf16"],
                   "compress powersgd:4": ["--compress", "powersgd:4"],
                   "compress bf16 (zero2)": ["--compress", "bf16", "--strategy", "zero2"]}
METRICS = ["e2e_ovl_ns", "compute_slowdown", "overlap_ratio", "hidden_share", "exposed_comm_ns"]


def run(cmd, log):
    with open(log, "w") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}; see {log}")


def characterize(tandem, flags, out):
    run([tandem, "characterize", *flags, "--iterations", "20", "--out", str(out)],
        f"{out}.log")
    point = json.loads((out / "summary.json").read_text())["points"][0]
    values = {m: point["metrics"][m]["median"] for m in METRICS}
    steps = point["scenarios"]["overlapped"]["steps"]
    values["bytes"] = statistics.median(s["bytes"] for s in steps)
    return values


def train(tandem, flags, out):
    run([tandem, "train", *flags, "--steps", "10", "--out", str(out)], f"{out}.log")
    summary = json.loads((out / "summary.json").read_text())
    rank0 = summary["memory"][0]
    compress = summary.get("compress_ms")
    return {"activations": rank0["activations_bytes"],
            "rss": rank0["steps_peak_rss_bytes"], "loss": summary["last_loss"],
            "compress_ms": compress["median"] if compress else 0.0}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tandem")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", help="techniques whose name contains this")
    parser.add_argument("--out", help="keep every run here (default: a temporary directory)")
    parser.add_argument("--loss-only", action="store_true", help="only the loss comparisons")
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="tandem-techniques-"))
    root.mkdir(parents=True, exist_ok=True)
    print("| workload | link | technique | side | step ms | S | R | hidden | exposed ms "
          "| MiB/step | activations MiB | peak RSS MiB | compress ms | ratio |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    n = 0
    for technique, (plain, extra, workloads, links) in TECHNIQUES.items():
        if (args.only and args.only not in technique) or args.loss_only:
            continue
        for workload in workloads:
            wflags = WORKLOADS[workload]
            for link in links:
                lflags = ["--link", link] if link else []
                sides = {"plain": wflags + lflags + plain,
                         "technique": wflags + lflags + plain + extra}
                per_round = {side: [] for side in sides}
                for r in range(args.rounds):
                    order = list(sides) if r % 2 == 0 else list(reversed(sides))
                    for side in order:
                        n += 1
                        per_round[side].append(characterize(args.tandem, sides[side],
                                                            root / f"c{n}"))
                rows = {}
                for side, flags in sides.items():
                    n += 1
                    row = {m: statistics.median(v[m] for v in per_round[side])
                           for m in per_round[side][0]}
                    row.update(train(args.tandem, flags, root / f"t{n}"))
                    rows[side] = row
                for side, row in rows.items():
                    ratio = row["e2e_ovl_ns"] / rows["plain"]["e2e_ovl_ns"]
                    print(f"| {workload} | {link or 'none'} | {technique} | {side} "
                          f"| {row['e2e_ovl_ns'] / 1e6:.2f} | {100 * row['compute_slowdown']:.1f}% "
                          f"| {100 * row['overlap_ratio']:.1f}% | {100 * row['hidden_share']:.0f}% "
                          f"| {row['exposed_comm_ns'] / 1e6:.2f} | {row['bytes'] / 2**20:.1f} "
                          f"| {row['activations'] / 2**20:.2f} | {row['rss'] / 2**20:.0f} "
                          f"| {row['compress_ms']:.2f} | {ratio:.3f} |", flush=True)
    print("\n| technique | lr | side | loss step 1 | 50 | 100 | 150 | 200 | held-out loss |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for technique, extra in LOSS_TECHNIQUES.items():
        if args.only and args.only not in technique:
            continue
        for lr, (side, flags) in ((lr, side) for lr in LOSS_LRS
                                  for side in (("plain", LOSS_RUN),
                                               ("technique", LOSS_RUN + extra))):
            n += 1
            out = root / f"l{n}"
            run([args.tandem, "train", *flags, "--lr", lr, "--quiet", "--out", str(out)],
                f"{out}.log")
            loss = {}  # step -> [rank losses]
            for row in (out / "steps.csv").read_text().splitlines()[1:]:
                cells = row.split(",")
                loss.setdefault(int(cells[0]), []).append(float(cells[2]))
            at = [statistics.mean(loss[k]) for k in (0, 49, 99, 149, 199)]
            held_out = json.loads((out / "summary.json").read_text())["val_loss"]
            # A diverged run's losses are NaN (summary.json says null).
            print(f"| {technique} | {lr} | {side} | " + " | ".join(f"{v:.3f}" for v in at) +
                  f" | {'diverged' if held_out is None else f'{held_out:.3f}'} |", flush=True)
    print(f"runs kept in {root}" if args.out else "", file=sys.stderr)


if __name__ == "__main__":
    main()
