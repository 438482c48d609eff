"""Tests of the Python package: runs, errors, listings, and sweeps on the local runner and on a
local Ray cluster (records equal apart from host timing; resume runs only what is missing).

Kept small (tiny GUPS points): the whole file runs in well under two minutes on two cores.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import xlate

TINY = {"workload.params.table": "64M", "workload.params.updates": 2000}

# Two designs × two L2 TLBs (entries and ways together) of a tiny GUPS: four points; and one
# that fails at run time (a 256 MiB table in 64 MiB of simulated memory), recorded as failed.
GRID = """
designs = ["radix4", "ecpt"]
workloads = [{ name = "gups", params = { table = "64M" } }]
[set]
"workload.params.updates" = 2000
[[zip]]
"mmu.l2.entries" = [512, 1536]
"mmu.l2.ways" = [8, 12]
[[points]]
design = "radix4"
"workload.params.table" = "256M"
"os.memory" = "64M"
"""
POINTS, DONE = 5, 4

REPO = Path(__file__).resolve().parents[2]


def without_timing(rec: dict) -> dict:
    """A record without the fields that measure the host (xlate.TIMING_FIELDS)."""
    rec = copy.deepcopy(rec)
    for field in xlate.TIMING_FIELDS:
        top, key = field.split(".")
        if isinstance(rec.get(top), dict):
            rec[top].pop(key, None)
    return rec


def point_files(out: Path) -> dict:
    return {p.stem: p for p in sorted((out / "points").glob("*.json"))}


def read_records(out: Path) -> dict:
    return {k: json.loads(p.read_text()) for k, p in point_files(out).items()}


# ---------------------------------------------------------------------------------------------
# Runs


def test_run_has_metrics_with_units_and_is_deterministic():
    a = xlate.run("radix4", "gups", config=TINY)
    b = xlate.run("radix4", "gups", config=TINY)
    assert a["schema"] == "xlate.run.v1"
    assert a["design"] == "radix4" and a["workload"] == "gups"
    m = a["metrics"]
    for key in ("instructions", "cycles", "ipc", "l2_tlb_mpki", "walk_latency_avg", "translation_fraction"):
        assert key in m and key in a["units"], key
    assert a["units"]["l2_tlb_mpki"] == "misses/kinstr"
    assert m["accesses"] > 0 and m["cycles"] > 0
    assert a["config"]["workload"]["params"]["table"] == "64M"
    # Everything but host timing is identical between two runs.
    a.pop("host"), b.pop("host")
    assert a == b


def test_run_equals_the_cli(tmp_path):
    exe = os.environ.get("XLATE_BIN") or next(
        (str(p) for p in (REPO / "target" / "release" / "xlate", Path(shutil.which("xlate") or "/nonexistent")) if p.is_file()),
        None,
    )
    if exe is None:
        pytest.skip("no xlate binary (set XLATE_BIN or build target/release/xlate)")
    args = [exe, "run", "-q", "--design", "radix4", "--workload", "gups"]
    for k, v in TINY.items():
        args += ["--set", f"{k}={v}"]
    subprocess.run(args + ["--json", str(tmp_path / "cli.json")], capture_output=True, text=True, check=True)
    cli = json.loads((tmp_path / "cli.json").read_text())
    py = xlate.run("radix4", "gups", config=TINY)
    cli.pop("host"), py.pop("host")
    assert py == cli


def test_runs_release_the_gil():
    # While a run holds the GIL, this thread could not tick; released, it ticks every millisecond.
    # The run must last long enough for ticks to tell the two apart: 3 M updates take about half
    # a second here (300 000 once took 0.05 s, and then less as the simulator got faster).
    done = threading.Event()
    started = time.monotonic()

    def work():
        try:
            xlate.run("radix4", "gups", config={**TINY, "workload.params.updates": 3_000_000})
        finally:
            done.set()

    t = threading.Thread(target=work)
    t.start()
    ticks = 0
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    t.join()
    elapsed = time.monotonic() - started
    assert elapsed > 0.05
    assert ticks >= 10, (ticks, elapsed)


def test_config_error_names_the_key():
    with pytest.raises(xlate.ConfigError) as e:
        xlate.run("radix4", "gups", config={**TINY, "mmu.l2.entriez": 1024})
    assert "mmu.l2.entriez" in str(e.value)
    assert str(e.value).startswith("config key `mmu.l2.entriez`")
    assert e.value.key == "mmu.l2.entriez"
    assert isinstance(e.value, ValueError) and isinstance(e.value, xlate.XlateError)
    # A bad value of a good key names the key too.
    with pytest.raises(xlate.ConfigError, match="os.thp"):
        xlate.run("radix4", "gups", config={**TINY, "os.thp": "sometimes"})


def test_unknown_names():
    with pytest.raises(xlate.UnknownNameError) as e:
        xlate.run("radix9", "gups", config=TINY)
    assert e.value.what == "design" and "radix4" in e.value.known
    assert isinstance(e.value, xlate.ConfigError)
    with pytest.raises(xlate.ConfigError, match="workload"):
        xlate.run("radix4", "nosuchworkload")
    with pytest.raises(xlate.ConfigError, match="preset"):
        xlate.run("radix4", "gups", preset="nosuchpreset")


def test_other_errors_are_xlate_errors(tmp_path):
    bad = tmp_path / "missing.xlt"
    with pytest.raises(xlate.XlateError) as e:
        xlate.run("radix4", None, traces=[str(bad)])
    assert not isinstance(e.value, xlate.ConfigError)
    assert "missing.xlt" in str(e.value)


def test_nested_config_dict_is_flattened():
    flat = xlate.resolved_config("radix4", "gups", {"mmu.l2.entries": 1536, **TINY})
    nested = xlate.resolved_config(
        "radix4", "gups", {"mmu": {"l2": {"entries": 1536}}, "workload": {"params": {"table": "64M", "updates": 2000}}}
    )
    assert flat == nested
    assert "entries = 1536" in flat


def test_designs_workloads_presets():
    ds = xlate.designs()
    assert "radix4" in ds and "ecpt" in ds and len(ds) == len(set(ds))
    ws = xlate.workloads()
    assert "gups" in ws
    params = ws["gups"]["params"]
    assert "table" in params and "updates" in params
    assert params["table"]["default"] and params["table"]["help"]
    assert params["table"]["kind"] == "bytes" and params["updates"]["kind"] == "integer"
    assert ws["gups"]["description"]
    assert "zen3" in xlate.presets()


def test_compare_one_row_per_design():
    pd = pytest.importorskip("pandas")
    df = xlate.compare(["radix4", "radix4-thp"], "gups", config=TINY, jobs=2)
    assert isinstance(df, pd.DataFrame)
    assert list(df.index) == ["radix4", "radix4-thp"]
    assert {"l2_tlb_mpki", "cycles", "speedup", "workload"} <= set(df.columns)
    assert df.loc["radix4", "speedup"] == 1.0
    # Threads (GIL released) give the same numbers as a plain run.
    single = xlate.run("radix4-thp", "gups", config=TINY)["metrics"]
    assert df.loc["radix4-thp", "cycles"] == single["cycles"]


# ---------------------------------------------------------------------------------------------
# Sweeps


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweeps") / "local"
    grid = out.parent / "grid.toml"
    grid.write_text(GRID)
    df = xlate.sweep(str(grid), out, engine="local", jobs=2)
    return grid, out, df


def test_local_sweep_records_and_load(local_sweep):
    pd = pytest.importorskip("pandas")
    grid, out, df = local_sweep
    assert (out / "manifest.json").is_file() and (out / "grid.toml").is_file()
    recs = read_records(out)
    assert len(recs) == POINTS
    failed = [r for r in recs.values() if r["status"] == "failed"]
    assert len(failed) == 1 and "out of physical memory" in failed[0]["error"] and failed[0]["result"] is None
    for r in recs.values():
        assert r["record_schema"] == 1
        if r["status"] == "done":
            assert set(r["swept"]) >= {"mmu.l2.entries", "mmu.l2.ways"}
            assert "metrics" in r["result"] and "units" in r["result"]
    assert isinstance(df, pd.DataFrame) and len(df) == POINTS
    assert list(df["status"]).count("done") == DONE
    assert df.attrs["summary"]["ran"] == POINTS and df.attrs["summary"]["failed"] == 1
    assert {"id", "design", "workload", "preset", "status", "error", "mmu.l2.entries", "l2_tlb_mpki"} <= set(df.columns)
    assert sorted(df["design"].unique()) == ["ecpt", "radix4"]
    assert sorted(df["mmu.l2.entries"].dropna().unique()) == [512, 1536]
    assert df.attrs["units"]["l2_tlb_mpki"] == "misses/kinstr"
    # The same point as a plain run gives the same metrics.
    row = df[(df["design"] == "radix4") & (df["mmu.l2.entries"] == 512)].iloc[0]
    single = xlate.run("radix4", "gups", config={**TINY, "mmu.l2.entries": 512, "mmu.l2.ways": 8})["metrics"]
    assert row["cycles"] == single["cycles"] and row["l2_tlb_mpki"] == single["l2_tlb_mpki"]


def test_local_sweep_resume_reruns_only_the_missing_point(local_sweep):
    grid, out, _ = local_sweep
    files = point_files(out)
    before = {k: (p.stat().st_mtime_ns, p.read_text()) for k, p in files.items()}
    victim = sorted(files)[1]
    files[victim].unlink()
    df = xlate.sweep(str(grid), out, engine="local", jobs=2)
    assert len(df) == POINTS
    assert df.attrs["summary"]["ran"] == 1 and df.attrs["summary"]["skipped"] == POINTS - 1
    after = point_files(out)
    assert sorted(after) == sorted(before)
    for k, p in after.items():
        if k == victim:
            assert without_timing(json.loads(p.read_text())) == without_timing(json.loads(before[k][1]))
        else:
            assert p.stat().st_mtime_ns == before[k][0], f"{k} was rerun"


def test_report_of_a_sweep(local_sweep, tmp_path):
    _, out, _ = local_sweep
    page = xlate.report(out, tmp_path / "r.html")
    assert page == tmp_path / "r.html"
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "Speedup over radix4" in html and "<script" not in html
    assert html.count("<figure") == html.count("<svg") > 3
    assert "Failed points" in html
    assert xlate.report(out, baseline="ecpt") == out / "report.html"
    assert "Speedup over ecpt" in (out / "report.html").read_text()
    with pytest.raises(xlate.UnknownNameError, match="nosuch"):
        xlate.report(out, tmp_path / "x.html", baseline="nosuch")
    with pytest.raises(xlate.XlateError, match="no-such-dir"):
        xlate.report(tmp_path / "no-such-dir")


def test_grid_as_dict_and_bad_grid_key(tmp_path):
    grid = {
        "designs": ["radix4"],
        "workloads": [{"name": "gups", "params": {"table": "64M"}}],
        "set": {"workload.params.updates": 2000},
        "axes": {"mmu.l2.entriez": [1536]},
    }
    with pytest.raises(xlate.ConfigError, match="mmu.l2.entriez"):
        xlate.sweep(grid, tmp_path / "bad")
    grid["axes"] = {"mmu.l2.entries": [1536]}
    df = xlate.sweep(grid, tmp_path / "good")
    assert len(df) == 1 and df["status"].iloc[0] == "done"


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of two worker CPUs, started here and shut down after the tests. CI sets
    XLATE_REQUIRE_RAY=1: there a missing Ray fails instead of skipping."""
    try:
        import ray
    except ImportError:
        if os.environ.get("XLATE_REQUIRE_RAY") == "1":
            pytest.fail("XLATE_REQUIRE_RAY=1 but Ray is not installed")
        pytest.skip("Ray is not installed (pip install ray)")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def test_ray_sweep_equals_local_sweep_and_resumes(ray_cluster, local_sweep, tmp_path):
    grid, local_out, _ = local_sweep
    out = tmp_path / "ray"
    df = xlate.sweep(str(grid), out, engine="ray")
    assert len(df) == POINTS and list(df["status"]).count("done") == DONE
    assert df.attrs["summary"]["ran"] == POINTS
    local = read_records(local_out)
    remote = read_records(out)
    assert sorted(remote) == sorted(local)
    for k in local:
        assert without_timing(remote[k]) == without_timing(local[k]), k
    assert json.loads((out / "manifest.json").read_text()) == json.loads((local_out / "manifest.json").read_text())
    # Resume on Ray: only the deleted point runs again.
    files = point_files(out)
    mtimes = {k: p.stat().st_mtime_ns for k, p in files.items()}
    victim = sorted(files)[2]
    files[victim].unlink()
    df = xlate.sweep(str(grid), out, engine="ray")
    assert df.attrs["summary"]["ran"] == 1 and df.attrs["summary"]["skipped"] == POINTS - 1
    after = point_files(out)
    assert sorted(after) == sorted(files)
    for k, p in after.items():
        if k != victim:
            assert p.stat().st_mtime_ns == mtimes[k], f"{k} was rerun"
    assert without_timing(read_records(out)[victim]) == without_timing(local[victim])


def test_python_m_xlate_sweep(local_sweep, tmp_path):
    grid, local_out, _ = local_sweep
    out = tmp_path / "cli"
    shutil.copytree(local_out, out)
    r = subprocess.run(
        [sys.executable, "-m", "xlate", "sweep", str(grid), "--out", str(out), "-q"],
        capture_output=True,
        text=True,
    )
    # Nothing to run; exit status 1 as `xlate sweep`'s: a point is recorded failed.
    assert r.returncode == 1, r.stderr
    assert f"{DONE} done, 1 failed" in r.stdout
