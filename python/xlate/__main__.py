"""``python -m xlate``: sweeps from the command line, on local cores or on Ray.

    python -m xlate sweep GRID.toml --out DIR [--engine local|ray] [--address HEAD:6379] [--jobs N]
    python -m xlate load DIR [--csv F]

``sweep`` runs the points of GRID.toml that have no record in DIR yet (as ``xlate sweep``, whose
records and resume semantics it shares) and prints how many are done and failed; ``load`` prints
the records of DIR as a table (or writes them as CSV).
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from . import XlateError, load, sweep


def _counts(table) -> tuple:
    if isinstance(table, list):
        statuses = [r.get("status") for r in table]
    else:
        statuses = list(table["status"]) if "status" in table else []
    return statuses.count("done"), statuses.count("failed")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m xlate", description="xlate sweeps from Python (local cores or Ray)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("sweep", help="run a grid's pending points into a sweep directory")
    sp.add_argument("grid", help="grid file (TOML; docs/sweeps.md)")
    sp.add_argument("--out", required=True, help="sweep directory (created if needed; rerun to resume)")
    sp.add_argument("--engine", choices=["local", "ray"], default="local", help="local cores (default) or Ray tasks")
    sp.add_argument("--address", default=None, help="Ray cluster address (HEAD:6379, auto); default: a local Ray")
    sp.add_argument("--jobs", type=int, default=None, help="local: points at once (default all cores); ray: most tasks in flight")
    sp.add_argument("--force", action="store_true", help="take over a directory holding another sweep (shared records kept)")
    sp.add_argument("--quiet", "-q", action="store_true", help="no line per finished point")
    lp = sub.add_parser("load", help="print a sweep directory's records as a table")
    lp.add_argument("dir")
    lp.add_argument("--csv", default=None, help="write the table as CSV to this file instead")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "sweep":
            table = sweep(args.grid, args.out, engine=args.engine, address=args.address, jobs=args.jobs,
                          force=args.force, progress=not args.quiet)
            done, failed = _counts(table)
            print(f"xlate sweep: {done} done, {failed} failed; records in {args.out}/points")
            return 1 if failed else 0
        table = load(args.dir)
        if args.csv:
            if isinstance(table, list):
                raise XlateError("--csv needs pandas")
            table.to_csv(args.csv, index=False)
        elif isinstance(table, list):
            for row in table:
                print(row)
        else:
            import pandas as pd

            with pd.option_context("display.max_columns", 12, "display.width", 160):
                print(table)
        return 0
    except XlateError as e:
        print(f"xlate: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("xlate sweep: interrupted; finished points are recorded, rerun to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
