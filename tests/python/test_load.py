"""tandem.load: a results directory as `tandem report` reads it, as DataFrames."""

import json
import math
import subprocess

import pytest

import tandem
from conftest import run_cli

STEPS_CSV = ["step", "rank", "loss", "start_ns", "end_ns", "step_ms", "param_hash", "val_loss"]


@pytest.fixture(scope="module")
def train_dir(cli, tmp_path_factory):
    out = tmp_path_factory.mktemp("train") / "run"
    run_cli(cli, "train", "--ranks", "2", "--model", "mlp:2x32", "--batch", "4", "--steps", "5",
            "--warmup", "1", "--quiet", "--out", str(out))
    return str(out)


def test_train_steps_and_summary(train_dir):
    r = tandem.load(train_dir)
    assert r.command == "train"
    assert r.summary["command"] == "train"
    with open(f"{train_dir}/summary.json") as f:
        assert r.summary == json.load(f)
    assert list(r.steps.columns) == STEPS_CSV
    assert len(r.steps) == 5 * 2
    assert sorted(r.steps["step"].unique()) == list(range(5))
    assert sorted(r.steps["rank"].unique()) == [0, 1]
    assert r.steps["loss"].notna().all()
    assert r.steps["param_hash"].str.len().eq(16).all()


def test_train_spans_and_iterations(train_dir):
    r = tandem.load(train_dir)
    s = r.spans
    assert sorted(s["rank"].unique()) == [0, 1]
    assert {"compute", "comm"} <= set(s["lane"])
    assert (s["dur_ns"] >= 0).all()
    assert set(s[s["lane"] == "compute"]["kind"]) >= {"forward", "backward", "optimizer"}
    it = r.iterations
    assert len(it) == 5 * 2
    # The per-rank metrics are what `tandem analyze DIR/trace.json` computes.
    again = tandem.analyze(f"{train_dir}/trace.json")
    assert it.equals(again.iterations)
    # Every step's compute time is the sum of its compute spans.
    comp = s[s["lane"] == "compute"].groupby(["rank", "step"])["dur_ns"].sum()
    for row in it.itertuples():
        assert row.t_comp_ns == comp[(row.rank, row.step)]


def test_load_analyze_dir(cli, traces, tmp_path):
    out = tmp_path / "a"
    run_cli(cli, "analyze", traces, "--out", str(out), "--quiet")
    r = tandem.load(out)
    assert r.command == "analyze"
    a = tandem.analyze(traces)
    assert len(r.iterations) == len(a.iterations)
    assert (r.iterations["overlap_ns"].values == a.iterations["t_ovl_ns"].values).all()
    assert r.steps["step"].tolist() == a.steps["step"].tolist()
    assert math.isnan(r.metrics().loc["compute_slowdown", "median"])
    assert len(r.spans) == len(a.spans)


def test_load_errors_name_the_path(tmp_path):
    with pytest.raises(tandem.UsageError, match="nowhere"):
        tandem.load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(tandem.UsageError, match="summary.json"):
        tandem.load(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "summary.json").write_text("{")
    with pytest.raises(tandem.UsageError, match="summary.json"):
        tandem.load(tmp_path / "bad")
    with pytest.raises(TypeError, match="results_dir"):
        tandem.load(3)


def test_train_waiting_per_rank(train_dir):
    """Waiting explained as a row per rank, equal to summary.json's and summing up."""
    w = tandem.load(train_dir).waiting()
    with open(f"{train_dir}/summary.json") as f:
        ranks = json.load(f)["waiting"]["ranks"]
    assert list(w["rank"]) == [0, 1]
    assert list(w["skew_ms"]) == [r["skew_ms"] for r in ranks]
    assert (w["steps"] == 4).all()  # 5 steps after 1 warm-up
    total = w["skew_ms"] + w["transfer_ms"] + w["other_ms"]
    assert all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(total, w["blocked_ms"]))
