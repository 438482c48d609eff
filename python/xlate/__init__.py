"""xlate: simulate virtual-memory translation designs from Python.

The simulator itself is the Rust crate (the ``xlate`` command line); this package calls it
in-process through the native module ``xlate._xlate``. Every function takes the command line's
names and config keys and raises its errors::

    import xlate
    r = xlate.run("radix4", "gups", config={"workload.params.table": "1G"})
    r["metrics"]["l2_tlb_mpki"], r["units"]["l2_tlb_mpki"]

    df = xlate.compare(["radix4", "radix4-thp", "ecpt"], "gups")   # one row per design

    df = xlate.sweep("examples/sweep-tlb.toml", out="runs/tlb")       # all local cores
    df = xlate.sweep("examples/sweep-tlb.toml", out="runs/tlb", engine="ray", address="auto")
    df = xlate.load("runs/tlb")                                        # one row per record

Runs release the GIL, so threads can run several at once. Results are plain JSON-like
dictionaries (the schema of ``xlate run --json``, docs/results-schema.md); tables are pandas
DataFrames when pandas is installed and lists of dictionaries otherwise.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _xlate
from ._errors import ConfigError, TraceError, UnknownNameError, XlateError

if TYPE_CHECKING:  # pragma: no cover
    import pandas

__version__: str = _xlate.__version__

__all__ = [
    "run",
    "compare",
    "designs",
    "workloads",
    "presets",
    "resolved_config",
    "design_descriptions",
    "records",
    "load",
    "grid_toml",
    "sweep",
    "report",
    "XlateError",
    "ConfigError",
    "UnknownNameError",
    "TraceError",
]

#: A config dictionary: ``--set`` keys to values (``{"mmu.l2.entries": 2048}``); nested
#: dictionaries are flattened into dotted keys.
Config = Mapping[str, Any]

#: A table: a pandas DataFrame, or a list of row dictionaries without pandas.
Table = Union["pandas.DataFrame", List[Dict[str, Any]]]

#: Result fields that measure the host rather than the simulated machine: they differ between
#: two runs of the same point, everything else is identical.
TIMING_FIELDS: Tuple[str, ...] = ("result.host", "run.wall_s", "run.setup_s")


# ---------------------------------------------------------------------------------------------
# Config dictionaries as `--set` strings


def _toml_key(k: str) -> str:
    return k if k and all(c.isalnum() or c in "-_" for c in k) else json.dumps(k, ensure_ascii=False)


def _toml_value(v: Any, key: str) -> str:
    """``v`` as a TOML value (what follows ``=`` in ``--set key=value``)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, (str, os.PathLike)):
        return json.dumps(os.fspath(v), ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x, key) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{_toml_key(str(k))} = {_toml_value(x, key)}" for k, x in v.items()) + " }"
    if hasattr(v, "item") and callable(v.item):  # numpy scalars (values taken from a DataFrame)
        return _toml_value(v.item(), key)
    raise ConfigError(
        f"config key `{key}`: a value of type {type(v).__name__} cannot be a config value "
        "(use a number, string, bool, list or dict)",
        key=key,
    )


def _flatten(config: Config, prefix: str = "") -> Iterable[Tuple[str, Any]]:
    for k, v in config.items():
        if not isinstance(k, str):
            raise ConfigError(f"config key `{k!r}`: keys are strings such as \"mmu.l2.entries\"", key=str(k))
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            yield from _flatten(v, key + ".")
        else:
            yield key, v


def _sets(config: Optional[Config]) -> List[str]:
    """A config dictionary as the CLI's ``--set key=value`` strings, in order."""
    if config is None:
        return []
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict of config keys to values, not {type(config).__name__}")
    return [f"{k}={_toml_value(v, k)}" for k, v in _flatten(config)]


def _workload_arg(workload: Optional[str], traces: Optional[Sequence[Union[str, os.PathLike]]]) -> Optional[str]:
    if traces:
        if workload not in (None, "gups"):
            raise ConfigError(f"workload `{workload}` and traces: give one or the other", key="workload.name")
        return None
    return workload


# ---------------------------------------------------------------------------------------------
# Runs


def run(
    design: str,
    workload: Optional[str] = "gups",
    config: Optional[Config] = None,
    preset: Optional[str] = None,
    traces: Optional[Sequence[Union[str, os.PathLike]]] = None,
) -> Dict[str, Any]:
    """Runs one design on a built-in workload or on trace files.

    The same as ``xlate run --design DESIGN --workload WORKLOAD --preset PRESET --set K=V ...
    --json F``, and returns what that command writes to ``F``.

    Args:
        design: a design of :func:`designs`, or ``GUEST@HOST`` for a virtualized one.
        workload: a workload of :func:`workloads`; its parameters are config keys
            (``"workload.params.table": "1G"``). Ignored (must be left as is) with ``traces``.
        config: config keys to values, as ``--set`` takes them:
            ``{"mmu.l2.entries": 2048, "os.thp": "always", "workload.params.table": "64M"}``.
        preset: a machine preset of :func:`presets`.
        traces: trace files to run instead of the workload (one process each).

    Returns:
        The results (docs/results-schema.md): ``"metrics"`` (key to number), ``"units"`` (key to
        unit), ``"config"`` (the resolved configuration), ``"os"``, ``"mem"``, ``"driver"``, and
        ``"host"`` (wall time: the only part that differs between two runs of the same input).

    Raises:
        ConfigError: a key or value of ``config`` is wrong (the message names the key), or a
            design, workload or preset does not exist (:class:`UnknownNameError`).
        TraceError: a trace file is malformed.
        XlateError: anything else the simulator refuses (unreadable files, out of simulated
            memory, ...).
    """
    text = _xlate.run_json(
        design,
        _workload_arg(workload, traces),
        _sets(config),
        preset,
        [os.fspath(t) for t in (traces or [])],
    )
    return json.loads(text)


def _table(rows: List[Dict[str, Any]], index: Optional[str] = None) -> Table:
    try:
        import pandas as pd
    except ImportError:
        return rows
    df = pd.DataFrame(rows)
    if index is not None and index in df.columns:
        df = df.set_index(index)
    return df


def compare(
    designs: Sequence[str],
    workload: Optional[str] = "gups",
    config: Optional[Config] = None,
    preset: Optional[str] = None,
    traces: Optional[Sequence[Union[str, os.PathLike]]] = None,
    jobs: int = 1,
) -> Table:
    """Runs several designs on the same workload and tabulates their metrics.

    As ``xlate compare --designs A,B,C``: the first design is the baseline of the ``speedup``
    column (its cycles over each design's).

    Args:
        designs: the designs, baseline first.
        workload, config, preset, traces: as for :func:`run`, the same for every design.
        jobs: how many designs run at once (threads; each run releases the GIL). Each run
            holds its own simulated machine in memory.

    Returns:
        A DataFrame indexed by design with a ``workload`` column, one column per metric and
        ``speedup``; without pandas, a list of row dictionaries (``design`` among the keys).
    """
    designs = list(designs)
    if not designs:
        raise ValueError("compare: no designs given")
    if isinstance(designs[0], str) and len(designs) == 1 and "," in designs[0]:
        designs = [d.strip() for d in designs[0].split(",")]

    def one(d: str) -> Dict[str, Any]:
        return run(d, workload, config, preset, traces)

    if jobs > 1 and len(designs) > 1:
        with ThreadPoolExecutor(max_workers=min(jobs, len(designs))) as pool:
            results = list(pool.map(one, designs))
    else:
        results = [one(d) for d in designs]
    base = results[0]["metrics"]["cycles"]
    rows = []
    for r in results:
        row: Dict[str, Any] = {"design": r["design"], "workload": r["workload"]}
        row.update(r["metrics"])
        cycles = r["metrics"]["cycles"]
        row["speedup"] = base / cycles if cycles else float("nan")
        rows.append(row)
    return _table(rows, index="design")


def designs() -> List[str]:
    """The design names (``xlate designs``); any two of the nestable ones also combine as
    ``GUEST@HOST``."""
    return [name for name, _ in _xlate.designs()]


def design_descriptions() -> Dict[str, str]:
    """Design name to its one-line description."""
    return dict(_xlate.designs())


def workloads() -> Dict[str, Dict[str, Any]]:
    """The built-in workloads (``xlate workloads``).

    Returns:
        Name to ``{"description": str, "params": {param: {"kind": str, "default": str, "help":
        str}}}``, ``kind`` being how the workload reads the value (``bytes``, ``integer``,
        ``number``, ``bool`` or ``text``); a parameter is set with the config key
        ``workload.params.<param>``.
    """
    return {
        name: {
            "description": desc,
            "params": {p: {"kind": kind, "default": default, "help": help_} for p, kind, default, help_ in params},
        }
        for name, desc, params in _xlate.workloads()
    }


def presets() -> Dict[str, str]:
    """The machine presets (``xlate presets``): name to description."""
    return dict(_xlate.presets())


def resolved_config(
    design: str,
    workload: Optional[str] = "gups",
    config: Optional[Config] = None,
    preset: Optional[str] = None,
) -> str:
    """The fully resolved configuration of a run as TOML (``xlate run --print-config``), without
    running it; raises what :func:`run` would for a bad key."""
    return _xlate.resolve_config(design, workload, _sets(config), preset)


# ---------------------------------------------------------------------------------------------
# Sweeps


def _read_json(path: Path) -> Optional[Dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _manifest(root: Path) -> Dict[str, Any]:
    m = _read_json(root / "manifest.json")
    return m if isinstance(m, dict) else {}


def records(dir: Union[str, os.PathLike]) -> List[Dict[str, Any]]:
    """The point records of a sweep directory as dictionaries (``DIR/points/<id>.json``), in
    grid order: those of the points of its manifest (a directory that ``force`` gave to another
    grid keeps records of the old points; they are not listed). Without a manifest, every record,
    by id. Unreadable records are left out (the sweep runs those points again)."""
    root = Path(dir)
    points = root / "points"
    if not points.is_dir():
        raise XlateError(f"{root}: is not a sweep directory (no points/ folder)", kind="io", path=str(root))
    found: Dict[str, Dict[str, Any]] = {}
    for p in sorted(points.glob("*.json")):
        rec = _read_json(p)
        if isinstance(rec, dict) and rec.get("id") == p.stem:
            found[p.stem] = rec
    manifest = _manifest(root)
    if "points" not in manifest:
        return [found[k] for k in sorted(found)]
    ids = [p.get("id") for p in manifest["points"] if isinstance(p, dict)]
    return [found[i] for i in ids if i in found]


def load(dir: Union[str, os.PathLike], pending: bool = False) -> Table:
    """One row per point record of a sweep directory (``xlate sweep --out DIR``, or
    :func:`sweep`), in grid order.

    Columns: ``id``, ``design``, ``workload``, ``preset``, ``status`` (``"done"`` or
    ``"failed"``), ``error``, then every swept key (``"mmu.l2.entries"``, ...), then every metric
    (``"l2_tlb_mpki"``, ...; empty for a failed point) — the columns of
    ``xlate sweep --export DIR --csv F``, without the units in the metric names: they are in
    ``df.attrs["units"]``.

    Args:
        dir: the sweep directory.
        pending: also a row (status ``"pending"``, no metrics) for each point of the grid that
            has no record yet, as the CSV export has.
    """
    root = Path(dir)
    recs = {r["id"]: r for r in records(root)}
    manifest = _manifest(root)
    swept_keys: List[str] = list(manifest.get("swept_keys", []))
    entries: List[Dict[str, Any]] = [p for p in manifest.get("points", []) if isinstance(p, dict)] or list(recs.values())
    for e in entries:
        for k in e.get("swept") or {}:
            if k not in swept_keys:
                swept_keys.append(k)
    units: Dict[str, str] = {}
    rows = []
    for entry in entries:
        r: Optional[Dict[str, Any]] = recs.get(entry.get("id", ""))
        if r is None and not pending:
            continue
        src = r if r is not None else entry
        row: Dict[str, Any] = {k: src.get(k) for k in ("id", "design", "workload", "preset")}
        row["status"] = r.get("status") if r is not None else "pending"
        row["error"] = r.get("error") if r is not None else None
        swept = src.get("swept") or {}
        for k in swept_keys:
            row[k] = swept.get(k)
        result = (r or {}).get("result") or {}
        for k, v in (result.get("metrics") or {}).items():
            if k not in row:
                row[k] = v
        units.update(result.get("units") or {})
        rows.append(row)
    table = _table(rows)
    if not isinstance(table, list):
        if not rows:
            import pandas as pd

            table = pd.DataFrame(columns=["id", "design", "workload", "preset", "status", "error"] + swept_keys)
        table.attrs["units"] = units
    return table


def grid_toml(grid: Mapping[str, Any]) -> str:
    """A grid given as a dict, as the TOML text of a grid file: ``designs``, ``workloads``,
    ``presets`` (and any other plain key) as values, ``set`` and ``axes`` as tables, ``zip`` and
    ``points`` as arrays of tables; config keys are quoted, so ``"mmu.l2.entries"`` stays one key
    (nested dicts are flattened into dotted keys first)."""
    head: List[str] = []
    tables: List[str] = []
    for key, value in grid.items():
        if key in ("set", "axes") and isinstance(value, Mapping):
            tables.append(f"[{key}]")
            tables.extend(f"{json.dumps(k)} = {_toml_value(v, k)}" for k, v in _flatten(value))
        elif key in ("zip", "points") and isinstance(value, (list, tuple)) and all(isinstance(t, Mapping) for t in value):
            for t in value:
                tables.append(f"[[{key}]]")
                for k, v in t.items():
                    # A point's `workload` may be a { name, params } table: kept whole.
                    if isinstance(v, Mapping) and k not in ("workload",):
                        tables.extend(f"{json.dumps(fk)} = {_toml_value(fv, fk)}" for fk, fv in _flatten(v, k + "."))
                    else:
                        tables.append(f"{json.dumps(k)} = {_toml_value(v, k)}")
        else:
            head.append(f"{_toml_key(key)} = {_toml_value(value, key)}")
    return "\n".join(head + tables) + "\n"


def _grid_source(grid: Union[str, os.PathLike, Mapping[str, Any]]) -> Tuple[str, str, Optional[str]]:
    """(TOML text, name, path or None) of a grid given as a file, as TOML text or as a dict."""
    if isinstance(grid, Mapping):
        return grid_toml(grid), "<dict>", None
    if isinstance(grid, os.PathLike) or (isinstance(grid, str) and "\n" not in grid and "=" not in grid):
        path = os.fspath(grid)
        try:
            with open(path, encoding="utf-8") as f:
                return f.read(), path, path
        except OSError as e:
            raise XlateError(f"grid {path}: {e.strerror or e}", kind="io", path=path) from None
    if isinstance(grid, str):
        return grid, "<text>", None
    raise TypeError(f"grid must be a file name, TOML text or a dict, not {type(grid).__name__}")


def _say(progress: bool, msg: str) -> None:
    if progress:
        print(msg, file=sys.stderr, flush=True)


def sweep(
    grid: Union[str, os.PathLike, Mapping[str, Any]],
    out: Union[str, os.PathLike],
    engine: str = "local",
    address: Optional[str] = None,
    jobs: Optional[int] = None,
    force: bool = False,
    retry_failed: bool = False,
    progress: bool = False,
) -> Table:
    """Runs every point of a grid that has no record in ``out`` yet, then loads ``out``.

    The grid is the TOML of ``xlate sweep`` (docs/sweeps.md): ``designs``, ``workloads``,
    ``presets``, ``[set]``, ``[axes]``, ``[[zip]]``, ``[[points]]``. Each finished point is
    written at once to ``out/points/<id>.json``, so an interrupted sweep loses only the points in
    flight, and running it again runs only the points without a record (a failed point has one:
    delete it to run it again).

    Args:
        grid: a grid file name, the TOML text of a grid, or the grid as a dict
            (``{"designs": [...], "axes": {"mmu.l2.entries": [512, 1024]}}``).
        out: the sweep directory (created if needed).
        engine: ``"local"``: the simulator's own runner, points in parallel on ``jobs`` cores
            (default all). ``"ray"``: each pending point is a Ray task (one CPU each) that runs
            the point on whichever node Ray picks and returns its record, which this process
            writes into ``out`` (workers need the ``xlate`` package, not ``out``: no shared
            filesystem is needed). The records are those of the local runner.
        address: with ``engine="ray"``, the cluster to connect to (``"HEAD:6379"``, ``"auto"``);
            used only if Ray is not initialized yet. None starts a local Ray.
        jobs: with ``engine="local"``, points at once (default: every core). With ``"ray"``,
            the most tasks in flight at once (default: no limit; Ray schedules by free CPUs).
        force: make ``out`` this grid's directory even if it holds another sweep (records of
            points in both are kept) or is not empty.
        retry_failed: run the points recorded as failed again.
        progress: print a line per finished point on stderr.

    Returns:
        :func:`load` of ``out``. With pandas, ``df.attrs["summary"]`` holds what this call did:
        ``points``, ``done``, ``failed``, ``pending``, ``ran``, ``skipped``.

    Raises:
        ConfigError: the grid is wrong (a bad key names the key). A point that fails while
            running does not raise: it is recorded as failed with its error.
        XlateError: ``out`` cannot be used (holds another sweep, unwritable, ...).
        KeyboardInterrupt: Ctrl-C; the points that finished are recorded (run again to resume).
    """
    text, name, path = _grid_source(grid)
    out_s = os.fspath(out)
    if engine == "local":
        summary = json.loads(
            _xlate.sweep_local(text, name, path, out_s, int(jobs or 0), bool(force), bool(retry_failed), bool(progress))
        )
    elif engine == "ray":
        summary = _sweep_ray(text, name, path, out_s, address, jobs, force, retry_failed, progress)
    else:
        raise ValueError(f"engine must be \"local\" or \"ray\", not {engine!r}")
    table = load(out_s)
    if not isinstance(table, list):
        table.attrs["summary"] = summary
    return table


def report(
    dir: Union[str, os.PathLike], out: Optional[Union[str, os.PathLike]] = None, baseline: Optional[str] = None
) -> Path:
    """Writes the HTML report of a sweep (or ``xlate reproduce --out``) directory, as
    ``xlate report DIR`` does: one self-contained page of SVG plots with their tables
    (docs/sweeps.md, "Report").

    Args:
        dir: the sweep directory.
        out: the HTML file (default ``dir/report.html``).
        baseline: the design speedups are relative to (default: the sweep's first design).

    Returns:
        The path of the page written.

    Raises:
        UnknownNameError: ``baseline`` is not a design of the directory's finished points.
        XlateError: ``dir`` is not a sweep directory, or ``out`` cannot be written.
    """
    path = _xlate.report(os.fspath(dir), None if out is None else os.fspath(out), baseline)
    return Path(path)


def _ray_point(point_json: str) -> str:
    """A Ray task: runs one manifest point and returns its record as JSON text."""
    from xlate import _xlate as native

    return native.run_point(point_json)


def _sweep_ray(
    text: str,
    name: str,
    path: Optional[str],
    out: str,
    address: Optional[str],
    jobs: Optional[int],
    force: bool,
    retry_failed: bool,
    progress: bool,
) -> Dict[str, Any]:
    try:
        import ray
    except ImportError:
        raise XlateError("engine=\"ray\" needs Ray: pip install ray") from None
    # The grid is expanded and the directory prepared first: a bad grid fails before Ray starts.
    pending: List[Dict[str, Any]] = json.loads(_xlate.sweep_prepare(text, name, path, out, bool(force), bool(retry_failed)))
    manifest = _manifest(Path(out))
    total = len(manifest.get("points", []))
    keys = list(manifest.get("swept_keys", []))
    _say(progress, f"xlate sweep: {total} points, {total - len(pending)} already recorded, {len(pending)} to run as Ray tasks, records in {out}")
    writer = _xlate.RecordWriter(out)
    ran = 0
    lost: List[Tuple[Dict[str, Any], BaseException]] = []
    started = False
    if pending and not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=progress)
        started = True
    try:
        task = ray.remote(num_cpus=1, max_retries=1)(_ray_point)
        limit = max(1, jobs) if jobs else len(pending)
        queue = list(pending)
        in_flight: Dict[Any, Dict[str, Any]] = {}
        t0 = time.monotonic()
        try:
            while queue or in_flight:
                while queue and len(in_flight) < limit:
                    p = queue.pop(0)
                    in_flight[task.remote(json.dumps(p))] = p
                ready, _ = ray.wait(list(in_flight), num_returns=1)
                for ref in ready:
                    p = in_flight.pop(ref)
                    try:
                        record = ray.get(ref)
                    except Exception as e:  # the task raised, or its worker died
                        lost.append((p, e))
                        _say(progress, f"xlate sweep: {_describe(p, keys)}: no record ({type(e).__name__}: {e})")
                        continue
                    status = writer.write(p["id"], record)
                    ran += 1
                    _say(progress, f"[{ran}/{len(pending)}] {_describe(p, keys)} {status} ({time.monotonic() - t0:.1f} s)")
        except KeyboardInterrupt:
            for ref in in_flight:
                ray.cancel(ref, force=True)
            raise
    finally:
        if started:
            ray.shutdown()
    if lost:
        warnings.warn(
            f"xlate sweep: {len(lost)} point(s) got no record because their Ray task failed "
            f"(first: {_describe(lost[0][0], keys)}: {lost[0][1]}); run the sweep again to retry them",
            RuntimeWarning,
            stacklevel=3,
        )
    statuses = [r.get("status") for r in records(out)]  # the manifest's points
    return {
        "points": total,
        "done": statuses.count("done"),
        "failed": statuses.count("failed"),
        "pending": total - len(statuses),
        "ran": ran,
        "skipped": total - len(pending),
        "interrupted": False,
    }


def _describe(p: Mapping[str, Any], keys: Sequence[str] = ()) -> str:
    """A point in one line, as the local runner names it: design, workload, preset, then the
    swept values in grid order (``keys``: the manifest's ``swept_keys``)."""
    s = f"{p.get('design')} {p.get('workload')}"
    if p.get("preset"):
        s += f" preset={p['preset']}"
    swept = p.get("swept") or {}
    for k in list(keys) + sorted(k for k in swept if k not in keys):
        if k in swept:
            v = swept[k]
            s += f" {k}={v if isinstance(v, str) else json.dumps(v)}"
    return s
