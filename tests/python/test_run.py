"""tandem.train and tandem.characterize: keyword arguments as the CLI's flags."""

import os

import pytest

import tandem


def test_train_keywords(tmp_path):
    out = tmp_path / "run"
    r = tandem.train(ranks=2, model="mlp:2x32", batch=4, steps=3, warmup=1, strategy="bucketed",
                     bucket_mb=1, verify=True, quiet=True, out=out)
    assert r.command == "train" and r.path == str(out)
    argv = r.summary["argv"]
    for flag in ("--ranks", "--bucket-mb", "--verify", "--quiet"):
        assert flag in argv
    assert "--no-timeline" not in argv
    assert argv[argv.index("--bucket-mb") + 1] == "1"
    assert len(r.steps) == 3 * 2
    assert r.summary["config"]["strategy"] == "bucketed"
    # --force replaces the results; without it the directory is refused (the CLI's rule).
    with pytest.raises(tandem.UsageError, match="--out"):
        tandem.train(ranks=1, model="mlp:2x32", batch=4, steps=2, quiet=True, out=out)
    r = tandem.train(ranks=1, model="mlp:2x32", batch=4, steps=2, quiet=True, out=out, force=True)
    assert len(r.steps) == 2


def test_train_without_out_uses_a_fresh_directory():
    r = tandem.train(ranks=1, model="mlp:2x32", batch=4, steps=2, quiet=True, no_timeline=True)
    assert os.path.isdir(r.path) and len(r.steps) == 2
    assert r.spans is None and r.iterations is None
    assert r.log  # the CLI's summary


def test_characterize_keywords(tmp_path):
    r = tandem.characterize(synthetic="compute=2ms,comm=1ms,chunks=2", ranks=2,
                            sweep=["chunks=1,2"], out=tmp_path / "c")
    assert r.command == "characterize"
    assert r.points["id"].tolist() == [p["id"] for p in r.summary["points"]]
    assert len(r.points) == 2
    it = r.iterations
    assert set(it["scenario"]) == {"compute-only", "comm-only", "sequential", "overlapped"}
    assert "hidden_share" in r.metrics().index
    spans = r.point_spans(r.points["id"][1], "sequential")
    assert {"compute", "comm"} <= set(spans["lane"])


def test_bad_keywords_name_the_flag(tmp_path):
    with pytest.raises(tandem.UsageError, match="--rankz"):
        tandem.train(rankz=2, out=tmp_path / "a")
    with pytest.raises(tandem.UsageError, match="--ranks"):
        tandem.train(ranks=0, out=tmp_path / "b")
    with pytest.raises(tandem.UsageError, match="--bucket-mb"):
        tandem.train(bucket_mb="lots", out=tmp_path / "c")
    with pytest.raises(TypeError, match="--model"):
        tandem.train(model={"mlp": 2})
    with pytest.raises(tandem.UsageError, match="--lr"):
        tandem.train(lr=float("nan"))
    with pytest.raises(tandem.UsageError, match="--sweep"):
        tandem.characterize(synthetic="compute=2ms,comm=1ms", sweep=["nokey"], out=tmp_path / "d")
    assert not (tmp_path / "a").exists()
