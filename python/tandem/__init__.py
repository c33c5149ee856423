"""tandem from Python: traces and results as pandas DataFrames (docs/PYTHON.md).

    import tandem
    a = tandem.analyze("traces/", baseline="traces_compute_only/")
    a.iterations                  # a row per rank per iteration (tandem analyze's iterations.csv)
    a.get_comm_comp_overlap()     # HTA's per-rank number
    r = tandem.train(ranks=2, model="mlp:4x256", steps=20, out="runs/mlp")
    r.steps, r.iterations, r.summary, r.spans

The analysis is tandem's C++ (the _tandem extension beside this file): the same functions
`tandem analyze` and `tandem report` call, so the numbers are the CLI's. train and
characterize run the tandem executable (bin/tandem beside this file) as a child process.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from . import _tandem
from ._tandem import TandemRuntimeError, UsageError

__version__ = _tandem.__version__
__all__ = [
    "Analysis",
    "Results",
    "TandemRuntimeError",
    "UsageError",
    "analyze",
    "characterize",
    "load",
    "train",
]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------------------------------
# Plain data -> DataFrames


# Columns that say what a row is come first (summary.json's objects have sorted keys).
_KEY_COLUMNS = ("rank", "step", "point", "scenario", "collective", "name", "file", "device")


def _frame(rows: list[Mapping[str, Any]], columns: Iterable[str] | None = None) -> pd.DataFrame:
    """Records -> a DataFrame whose columns of numbers and None are float (None -> NaN)."""
    df = pd.DataFrame.from_records(rows, columns=list(columns) if columns is not None else None)
    first = [c for c in _KEY_COLUMNS if c in df.columns]
    df = df[first + [c for c in df.columns if c not in first]]
    for c in df.columns:
        if df[c].dtype == object:
            values = df[c].dropna()
            if len(values) == 0 or all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
            ):
                df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    return df


def _spans_frame(columns: Mapping[str, Any]) -> pd.DataFrame:
    """_tandem's span columns -> a DataFrame; categorical columns stay categorical."""
    data = {}
    for name, column in columns.items():
        if isinstance(column, dict):
            data[name] = pd.Categorical.from_codes(column["codes"], categories=column["categories"])
        else:
            data[name] = column
    df = pd.DataFrame(data)
    df.insert(df.columns.get_loc("end_ns") + 1, "dur_ns", df["end_ns"] - df["start_ns"])
    return df


def _summaries_frame(metrics: Mapping[str, Any]) -> pd.DataFrame:
    """{"key": {"median": .., "p10": ..}} (analysis/statistics.h's Summary) -> a row per key."""
    rows = []
    for key, s in metrics.items():
        if isinstance(s, Mapping):
            rows.append({"metric": key, **s})
    return _frame(rows).set_index("metric") if rows else pd.DataFrame()


def _waiting_frame(waiting: Mapping[str, Any] | None) -> pd.DataFrame | None:
    """summary.json's "waiting" (docs/METRICS.md, "Waiting explained") as a row per rank:
    blocked_ms = skew_ms + transfer_ms + other_ms per step, last_arrivals, late_by_ms."""
    if not waiting:
        return None
    return _frame(waiting["ranks"])


def _paths(value: Any, name: str) -> list[str]:
    """A path, or a list of them -> a list of strings; TypeError naming the argument."""
    if isinstance(value, (str, os.PathLike)):
        return [os.fspath(value)]
    if isinstance(value, (list, tuple)) and value and all(
        isinstance(v, (str, os.PathLike)) for v in value
    ):
        return [os.fspath(v) for v in value]
    raise TypeError(f"{name}: expected a path or a non-empty list of paths, got {value!r}")


def _optional_regex(value: Any, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{name}: expected a regular expression (str), got {value!r}")


# ---------------------------------------------------------------------------------------
# tandem analyze


class Analysis:
    """What `tandem analyze` computes for a set of traces, as DataFrames (each built once,
    when first read). Times in the tables are nanoseconds (`_ns`) or milliseconds (`_ms`),
    as in summary.json, whose body `summary` is."""

    def __init__(self, native: Any, kernel_rows: int):
        self._native = native
        self._kernel_rows = kernel_rows
        self._cache: dict[str, Any] = {}

    def _cached(self, key: str, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def summary(self) -> dict:
        """summary.json's body as `tandem analyze --out` writes it (without the header)."""
        return self._cached("summary", self._native.summary)

    @property
    def iterations(self) -> pd.DataFrame:
        """A row per rank per measured iteration: t_comp_ns, t_comm_ns, t_ovl_ns (overlap),
        t_exposed_comm_ns, t_other_ns (idle), e2e_ns, compute_only_ns, hidden_share, ..."""
        return self._cached("iterations", lambda: _frame(self.summary["iterations"]))

    @property
    def steps(self) -> pd.DataFrame:
        """A row per measured iteration across ranks (e2e the slowest rank's, the rest means)."""
        return self._cached("steps", lambda: _frame(self.summary["steps"]))

    @property
    def ranks(self) -> pd.DataFrame:
        """HTA's whole-trace numbers per rank of a Kineto trace: hidden_share_pct (HTA's
        comp_comm_overlap_pctg), hidden_share_pct_all_steps, compute_ms, comm_ms,
        overlap_ms, idle_ms, kernels. Empty for tandem's own traces."""

        def make():
            rows = []
            for r in self.summary["ranks"]:
                row = {k: v for k, v in r.items() if k != "all_steps"}
                row.update({f"{k}_all_steps": v for k, v in r["all_steps"].items()})
                rows.append(row)
            return _frame(
                rows,
                None
                if rows
                else ["rank", "file", "device", "hidden_share_pct", "hidden_share_pct_all_steps"],
            )

        return self._cached("ranks", make)

    @property
    def waiting(self) -> pd.DataFrame | None:
        """The time blocked on collectives per rank and iteration, split at each
        collective's last arrival into skew_ms and transfer_ms (and other_ms), with how
        often each rank arrived last (last_arrivals) and by how much (late_by_ms);
        summary["waiting"] has the per-kind split and the clocks it was read from."""
        return self._cached("waiting", lambda: _waiting_frame(self.summary.get("waiting")))

    def get_comm_comp_overlap(self, include_last_profiler_step: bool = False) -> pd.DataFrame:
        """HTA's TraceAnalysis.get_comm_comp_overlap(): columns rank and
        comp_comm_overlap_pctg, computed as HTA computes it (docs/ANALYZE.md)."""
        column = "hidden_share_pct_all_steps" if include_last_profiler_step else "hidden_share_pct"
        df = self.ranks[["rank", column]].rename(columns={column: "comp_comm_overlap_pctg"})
        return df.reset_index(drop=True)

    @property
    def collectives(self) -> pd.DataFrame:
        """A row per collective, size, group size and dtype over the measured iterations:
        count, time_ns, hidden_ns, hidden_share, algbw_GBps, busbw_GBps."""
        return self._cached(
            "collectives",
            lambda: _frame(
                self.summary["collectives"],
                None
                if self.summary["collectives"]
                else ["collective", "bytes", "group_size", "dtype", "count", "time_ns"],
            ),
        )

    @property
    def spans(self) -> pd.DataFrame:
        """Every imported span (the merged trace.json): rank, lane (compute, comm, idle),
        kind, name, step (-1: in no iteration), start_ns, end_ns, dur_ns, bytes, and for
        a Kineto trace's communication the collective, group_size and dtype."""
        return self._cached("spans", lambda: _spans_frame(self._native.spans()))

    @property
    def baseline_spans(self) -> pd.DataFrame | None:
        def make():
            columns = self._native.baseline_spans()
            return None if columns is None else _spans_frame(columns)

        return self._cached("baseline_spans", make)

    @property
    def kernels(self) -> pd.DataFrame:
        """Per compute kernel name and rank over the measured iterations: count, total_ns,
        mean_ns, min_ns, max_ns (HTA's get_gpu_kernel_breakdown, per name)."""

        def make():
            s = self.spans
            measured = set(self.steps["step"]) if len(self.steps) else set()
            k = s[(s["lane"] == "compute") & s["step"].isin(measured)]
            g = k.groupby(["name", "rank"], observed=True)["dur_ns"]
            df = g.agg(count="count", total_ns="sum", mean_ns="mean", min_ns="min", max_ns="max")
            return df.reset_index().sort_values(["total_ns", "name"], ascending=[False, True],
                                                ignore_index=True)

        return self._cached("kernels", make)

    @property
    def slowdowns(self) -> pd.DataFrame | None:
        """With a baseline (Kineto traces): per kernel name, matched count, alone_ns
        (baseline), overlapped_ns (run), slowdown = overlapped / alone - 1, under_comm_ns,
        most time added first; None without a baseline."""

        def make():
            k = self.summary["kernel_slowdown"]
            if k is None:
                return None
            rows = [{key: v for key, v in row.items() if key != "collectives"} for row in k["kernels"]]
            return _frame(
                rows,
                None if rows else ["name", "count", "alone_ns", "overlapped_ns", "slowdown",
                                   "under_comm_ns"],
            )

        return self._cached("slowdowns", make)

    @property
    def slowdown_collectives(self) -> pd.DataFrame | None:
        """The collectives that ran over each slowed kernel: name, collective, bytes,
        overlap_ns (a row per kernel and collective); None without a baseline."""

        def make():
            k = self.summary["kernel_slowdown"]
            if k is None:
                return None
            rows = [
                {"name": row["name"], **c} for row in k["kernels"] for c in row["collectives"]
            ]
            return _frame(rows, None if rows else ["name", "collective", "bytes", "overlap_ns"])

        return self._cached("slowdown_collectives", make)

    @property
    def metrics(self) -> pd.DataFrame:
        """The metrics table `tandem characterize` prints, a row per metric (median, p10,
        p90, mean, ...); rows a profile cannot give are NaN."""
        return self._cached("metrics", lambda: _summaries_frame(self.summary["metrics"]))

    @property
    def hidden_share(self) -> float:
        """Σ T_ovl / Σ T_comm over the measured iterations (NaN where nothing communicated)."""
        v = self.summary["hidden_share"]
        return math.nan if v is None else float(v)

    def __str__(self) -> str:
        return self._native.text(20, self._kernel_rows)

    def __repr__(self) -> str:
        s = self.summary
        return (
            f"<tandem.Analysis: {len(s['inputs'])} file(s), {s['measured_iterations']} "
            f"measured iteration(s), hidden share {self.hidden_share:.3f}"
            f"{', with baseline' if self._native.has_baseline else ''}>"
        )


def analyze(
    traces,
    baseline=None,
    *,
    warmup: int = 0,
    comm_regex: str | None = None,
    memory_regex: str | None = None,
    compute_regex: str | None = None,
    kernels: int = 10,
) -> Analysis:
    """`tandem analyze TRACES [--baseline B] [--warmup N] [--comm-regex R] ...` in-process.

    traces, baseline: a trace file or directory (*.json, *.json.gz), or a list of them.
    The keyword arguments are the CLI's flags; `kernels` is the rows of slowed kernels
    str(analysis) prints. Bad input raises tandem.UsageError (a ValueError) with the CLI's
    message, or TypeError naming the argument."""
    inputs = _paths(traces, "traces")
    base = [] if baseline is None else _paths(baseline, "baseline")
    for name, value in (("warmup", warmup), ("kernels", kernels)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise TypeError(f"{name}: expected an integer, got {value!r}")
        if not 0 <= value <= 1_000_000:
            raise UsageError(f"{name}: {value} is not in [0, 1000000]")
    native = _tandem.analyze(
        inputs,
        base,
        int(warmup),
        _optional_regex(comm_regex, "comm_regex"),
        _optional_regex(memory_regex, "memory_regex"),
        _optional_regex(compute_regex, "compute_regex"),
    )
    return Analysis(native, int(kernels))


# ---------------------------------------------------------------------------------------
# Results directories


class Results:
    """A results directory written by `tandem train`, `characterize`, `analyze` or `tune`
    (`--out DIR`), read as `tandem report` reads it (docs/REPORT.md)."""

    def __init__(self, path: str, log: str | None = None):
        self.path = os.fspath(path)
        loaded = _tandem.load_results(self.path)
        self.command: str = loaded["command"]
        self.summary: dict = loaded["summary"]
        self._points = loaded["points"]
        self.log = log  # the CLI's output, when train/characterize ran it
        self._cache: dict[str, Any] = {}

    def _cached(self, key: str, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def _csv(self, name: str) -> pd.DataFrame | None:
        p = os.path.join(self.path, name)
        # steps.csv's param_hash is 16 hex digits: text, not a number.
        return pd.read_csv(p, dtype={"param_hash": str}) if os.path.exists(p) else None

    @property
    def steps(self) -> pd.DataFrame | None:
        """train: steps.csv (a row per rank per step: loss, start_ns, end_ns, step_ms, ...);
        analyze: the measured steps across ranks; characterize: None (see iterations)."""

        def make():
            if self.command == "train":
                return self._csv("steps.csv")
            if self.command == "analyze":
                return _frame(self.summary["steps"])
            return None

        return self._cached("steps", make)

    @property
    def iterations(self) -> pd.DataFrame | None:
        """characterize: iterations.csv (a row per point, scenario and step); analyze:
        iterations.csv (a row per rank per iteration); train: the same per-rank metrics
        computed from trace.json as `tandem analyze DIR/trace.json` computes them."""

        def make():
            if self.command in ("characterize", "analyze"):
                return self._csv("iterations.csv")
            if self.command == "train":
                trace = os.path.join(self.path, "trace.json")
                if not os.path.exists(trace):
                    return None  # --no-timeline
                return analyze(trace).iterations
            return None

        return self._cached("iterations", make)

    @property
    def points(self) -> pd.DataFrame | None:
        """characterize (and tune): a row per configuration: id, label, its parameters."""

        def make():
            if not self._points:
                return None
            rows = []
            for p in self._points:
                params = p["result"].get("params") or {}
                rows.append({"id": p["id"], "label": p["label"], **params})
            return pd.DataFrame(rows)

        return self._cached("points", make)

    def waiting(self, point: str | None = None) -> pd.DataFrame | None:
        """Waiting explained, a row per rank (skew_ms, transfer_ms, other_ms per step,
        last_arrivals, late_by_ms): a train or analyze run's, or a characterize point's
        overlapped scenario's (default: the first point); None where nothing communicated."""
        if self._points:
            return _waiting_frame(self._point(point)["result"].get("waiting"))
        return _waiting_frame(self.summary.get("waiting"))

    def metrics(self, point: str | None = None) -> pd.DataFrame:
        """The metrics table (median, p10, p90, mean per metric) of a characterize point
        (default: the first), or of an analyze run."""
        if self.command == "analyze":
            return _summaries_frame(self.summary["metrics"])
        if not self._points:
            raise UsageError(f"{self.path}: a {self.command} run has no metrics table")
        chosen = self._point(point)
        return _summaries_frame(chosen["result"].get("metrics", {}))

    def _point(self, point: str | None):
        if point is None:
            return self._points[0]
        for p in self._points:
            if p["id"] == point:
                return p
        ids = ", ".join(p["id"] for p in self._points)
        raise UsageError(f"point: {point!r} is not a point of {self.path} ({ids})")

    @property
    def spans(self) -> pd.DataFrame | None:
        """DIR/trace.json's spans (characterize: the first point's overlapped scenario):
        rank, lane, kind, name, step, tag, micro, start_ns, end_ns, dur_ns, bytes, ...;
        None when the run wrote no trace."""

        def make():
            columns = _tandem.read_trace(os.path.join(self.path, "trace.json"))
            return None if columns is None else _spans_frame(columns)

        return self._cached("spans", make)

    def point_spans(self, point: str | None = None, scenario: str = "overlapped") -> pd.DataFrame:
        """characterize: the spans of one point's scenario (points/<id>/<scenario>.trace.json)."""
        chosen = self._point(point) if self._points else None
        if chosen is None:
            raise UsageError(f"{self.path}: a {self.command} run has no points")
        path = os.path.join(self.path, "points", chosen["id"], f"{scenario}.trace.json")
        columns = _tandem.read_trace(path)
        if columns is None:
            raise UsageError(f"scenario: {path} does not exist")
        return _spans_frame(columns)

    def __repr__(self) -> str:
        return f"<tandem.Results {self.command} {self.path!r}>"


def load(results_dir) -> Results:
    """A results directory (`--out DIR` of train, characterize, analyze, tune)."""
    if not isinstance(results_dir, (str, os.PathLike)):
        raise TypeError(f"results_dir: expected a path, got {results_dir!r}")
    return Results(os.fspath(results_dir))


# ---------------------------------------------------------------------------------------
# Running train and characterize


def _executable() -> str:
    """The tandem CLI: $TANDEM_EXECUTABLE, else bin/tandem beside this package (the
    build's), else `tandem` on PATH."""
    for candidate in (
        os.environ.get("TANDEM_EXECUTABLE"),
        os.path.join(_PACKAGE_DIR, "bin", "tandem"),
        shutil.which("tandem"),
    ):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise TandemRuntimeError(
        "no tandem executable: set TANDEM_EXECUTABLE or build the tandem target beside "
        f"{_PACKAGE_DIR}"
    )


def _flag_arguments(kwargs: Mapping[str, Any]) -> list[str]:
    """Keyword arguments -> CLI flags: bucket_mb=25 -> --bucket-mb 25, verify=True -> --verify
    (False and None: left out), sweep=[a, b] -> --sweep a --sweep b."""
    args: list[str] = []
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (str, int, float, os.PathLike, np.number)):
                raise TypeError(f"{flag}: expected a string, a number or a list of them, got {v!r}")
            if isinstance(v, float) and not math.isfinite(v):
                raise UsageError(f"{flag}: {v} is not a finite number")
            args += [flag, os.fspath(v) if isinstance(v, os.PathLike) else str(v)]
    return args


def _run(command: str, kwargs: dict, echo: bool) -> Results:
    out = kwargs.pop("out", None)
    temporary = out is None
    if temporary:
        # The results need a directory; a fresh one that the caller may keep (r.path).
        out = os.path.join(tempfile.mkdtemp(prefix=f"tandem-{command}-"), "results")
    argv = [_executable(), command, *_flag_arguments(kwargs), "--out", os.fspath(out)]
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if echo:
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
    if done.returncode != 0:
        if temporary:
            shutil.rmtree(os.path.dirname(out), ignore_errors=True)
        lines = [l for l in done.stderr.splitlines() if l.strip()]
        message = lines[-1] if lines else f"exit code {done.returncode}"
        for prefix in ("tandem: error: ", "tandem: failed: "):
            message = message.removeprefix(prefix)
        # The CLI's exit code 2 is a user error (a flag, a value, a file), 1 a failure.
        error = UsageError if done.returncode == 2 else TandemRuntimeError
        raise error(f"tandem {command}: {message}")
    return Results(out, log=done.stdout)


def train(*, echo: bool = False, **flags) -> Results:
    """`tandem train` with flags as keyword arguments (ranks=2, model="mlp:4x256",
    bucket_mb=25, verify=True, out="runs/x", force=True); returns load(out) (a fresh
    temporary directory when out is not given). echo=True prints the CLI's output; it
    is kept as Results.log. A bad flag or value raises tandem.UsageError naming the flag."""
    return _run("train", dict(flags), echo)


def characterize(*, echo: bool = False, **flags) -> Results:
    """`tandem characterize` with flags as keyword arguments (model=..., ranks=2,
    sweep=["strategy=bucketed,sequential"], out=...), as train."""
    return _run("characterize", dict(flags), echo)
