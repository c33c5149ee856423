"""tandem.analyze: the CLI's numbers (tandem analyze --out's summary.json) as DataFrames,
and the overlap the fixture traces hold by construction (conftest.py)."""

import json
import math
import os

import numpy as np
import pandas as pd
import pytest

import tandem
from conftest import ALLREDUCE_ELEMS, STEPS, run_cli


def cli_summary(cli, tmp_path, *args):
    out = tmp_path / "cli"
    run_cli(cli, "analyze", *args, "--out", str(out), "--quiet")
    with open(out / "summary.json") as f:
        return json.load(f)


def records(df):
    """DataFrame rows as dicts with NaN as None, to compare with json.load's records."""
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
            for row in df.to_dict("records")]


def test_iterations_equal_cli(cli, traces, tmp_path):
    expected = cli_summary(cli, tmp_path, traces, "--warmup", "1")
    a = tandem.analyze(traces, warmup=1)
    assert records(a.iterations) == expected["iterations"]
    assert records(a.steps) == expected["steps"]
    assert records(a.collectives) == expected["collectives"]
    assert a.summary["ranks"] == expected["ranks"]
    assert a.summary["metrics"] == expected["metrics"]
    assert a.hidden_share == expected["hidden_share"]


def test_overlap_by_construction(traces):
    a = tandem.analyze(traces, warmup=1)
    it = a.iterations
    assert len(it) == 2 * (STEPS - 1)
    assert sorted(it["step"].unique()) == list(range(1, STEPS))
    for rank in (0, 1):
        r = it[it["rank"] == rank]
        assert (r["t_comp_ns"] == (500 + 20 * rank) * 1000).all()
        assert (r["t_comm_ns"] == 300_000).all()
        assert (r["t_ovl_ns"] == (150 + 20 * rank) * 1000).all()
        assert np.allclose(r["hidden_share"], (150 + 20 * rank) / 300)
    # HTA's per-rank number: 100 overlap / comm, rounded to 0.01.
    hta = a.get_comm_comp_overlap()
    assert list(hta.columns) == ["rank", "comp_comm_overlap_pctg"]
    assert hta["rank"].tolist() == [0, 1]
    assert hta["comp_comm_overlap_pctg"].tolist() == [50.0, round(100 * 170 / 300, 2)]


def test_waiting_by_construction(traces):
    """Both ranks start their all-reduce kernel together: no skew, the whole 300 us of it
    transfer (no wait lane in a Kineto trace: the kernel is the blocked time), nobody late."""
    a = tandem.analyze(traces, warmup=1)
    w = a.waiting
    assert w["rank"].tolist() == [0, 1]
    assert np.allclose(w["blocked_ms"], 0.3)
    assert np.allclose(w["skew_ms"], 0.0)
    assert np.allclose(w["transfer_ms"], 0.3)
    assert (w["last_arrivals"] == 0).all()
    assert a.summary["waiting"]["blocked_on"] == "collective spans"
    assert a.summary["waiting"]["collectives"] == STEPS - 1
    assert "Kineto" in a.summary["waiting"]["clocks"]
    # Both ranks' all-reduces name process group "0": one nonzero group, compute none.
    s = a.spans
    comm = s[s["lane"] == "comm"]
    assert comm["group"].nunique() == 1 and (comm["group"] != 0).all()
    assert (s[s["lane"] == "compute"]["group"] == 0).all()


def test_collectives_and_spans(traces):
    a = tandem.analyze(traces)
    c = a.collectives
    assert c["collective"].tolist() == ["AllReduce"]
    assert c["bytes"].tolist() == [4 * ALLREDUCE_ELEMS]
    assert c["group_size"].tolist() == [2]
    assert c["count"].tolist() == [2 * STEPS]

    s = a.spans
    comm = s[s["lane"] == "comm"]
    assert len(comm) == 2 * STEPS
    assert set(comm["collective"]) == {"AllReduce"}
    assert (comm["dur_ns"] == 300_000).all()
    assert len(s[s["lane"] == "compute"]) == 2 * 2 * STEPS
    assert set(s[s["lane"] == "idle"]["kind"]) == {"memory"}
    files = a.summary["inputs"]
    assert sum(f["comm_spans"] for f in files) == len(comm)

    k = a.kernels
    fwd = k[(k["name"] == "gemm_fwd") & (k["rank"] == 1)].iloc[0]
    assert fwd["count"] == STEPS
    assert fwd["mean_ns"] == 200_000
    bwd = k[(k["name"] == "gemm_bwd") & (k["rank"] == 1)].iloc[0]
    assert bwd["total_ns"] == STEPS * 320_000


def test_slowdowns_equal_cli(cli, traces, baseline_traces, tmp_path):
    expected = cli_summary(cli, tmp_path, traces, "--baseline", baseline_traces)
    a = tandem.analyze(traces, baseline=baseline_traces)
    assert a.summary["kernel_slowdown"] == expected["kernel_slowdown"]
    assert a.summary["metrics"] == expected["metrics"]
    sd = a.slowdowns.set_index("name")
    # The baseline's kernels take 0.8x: every matched kernel is 25% slower under overlap.
    assert np.allclose(sd["slowdown"], 0.25)
    assert sd.loc["gemm_fwd", "count"] == 2 * STEPS
    assert sd.loc["gemm_fwd", "under_comm_ns"] == 0
    assert sd.loc["gemm_bwd", "under_comm_ns"] == STEPS * (150_000 + 170_000)
    sc = a.slowdown_collectives
    assert sc[sc["name"] == "gemm_bwd"]["collective"].tolist() == ["AllReduce"]
    assert a.baseline_spans is not None and len(a.baseline_spans[lambda d: d["lane"] == "comm"]) == 0


def test_without_baseline_no_slowdowns(traces):
    a = tandem.analyze(traces)
    assert a.slowdowns is None and a.slowdown_collectives is None and a.baseline_spans is None
    assert math.isnan(a.metrics.loc["compute_slowdown", "median"])


def test_text_is_the_cli_output(traces):
    text = str(tandem.analyze(traces))
    assert "per rank" in text and "AllReduce" in text


def test_files_list_and_tandem_trace(traces, tmp_path):
    files = sorted(os.path.join(traces, f) for f in os.listdir(traces))
    a = tandem.analyze(files)
    assert records(a.iterations) == records(tandem.analyze(traces).iterations)


def test_bad_input_names_the_argument(traces, tmp_path):
    missing = str(tmp_path / "missing")
    with pytest.raises(tandem.UsageError, match="missing"):
        tandem.analyze(missing)
    with pytest.raises(ValueError, match="--baseline"):
        tandem.analyze(traces, baseline=missing)
    with pytest.raises(TypeError, match="traces"):
        tandem.analyze(42)
    with pytest.raises(tandem.UsageError, match="warmup"):
        tandem.analyze(traces, warmup=-1)
    with pytest.raises(TypeError, match="warmup"):
        tandem.analyze(traces, warmup="2")
    with pytest.raises(tandem.UsageError, match="comm-regex"):
        tandem.analyze(traces, comm_regex="(")
    with pytest.raises(TypeError, match="bogus"):
        tandem.analyze(traces, bogus=1)
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    with pytest.raises(tandem.UsageError, match="bad.json"):
        tandem.analyze(str(bad))
