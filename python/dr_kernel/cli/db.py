"""`dr-kernel db` and `dr-kernel report`: what the results store holds, in and out."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .common import UsageError


def cmd_db(args: argparse.Namespace) -> int:
    from .. import _core
    from ..store import open_store

    store = open_store(args.db, read_only=args.action != "import")  # stats and export only read.
    kernel_tuner = args.format == "kernel_tuner"
    if args.action == "import":
        if not args.files:
            raise UsageError("db import needs the recorded tables to import, e.g. dr-kernel db import sweep.jsonl")
        if kernel_tuner:
            from ..interchange import CacheFileError, import_kernel_tuner

            try:
                added = import_kernel_tuner(store, args.files)
            except CacheFileError as error:
                raise UsageError(f"{error}; nothing was imported") from None
        else:
            added = store.import_tables(_core.read_tables([str(f) for f in args.files]))
        print(f"imported {added} rows into {store.path} ({store.count()} in all)")
    elif args.action == "export":
        if len(args.files) != 1:
            raise UsageError("db export needs one output " + ("folder, e.g. dr-kernel db export --format kernel_tuner "
                                                              "caches/" if kernel_tuner else
                                                              "file, e.g. dr-kernel db export all.jsonl"))
        if kernel_tuner:
            from ..interchange import export_kernel_tuner

            if args.files[0].exists() and not args.files[0].is_dir():
                raise UsageError(f"{args.files[0]} is a file; Kernel Tuner keeps one cache file per problem: give a "
                                 "folder")
            written = export_kernel_tuner(store, args.files[0])
            print(f"exported {len(written)} problems as Kernel Tuner cache files into {args.files[0]}")
            return 0
        tables = store.export_tables()
        _core.write_tables(tables, str(args.files[0]))
        print(f"exported {sum(len(t) for t in tables)} rows of {len(tables)} problems to {args.files[0]}")
    else:
        problems = store.problems()
        print(f"{store.path}: {store.count()} measurements of {len(problems)} problems")
        for p in problems:
            shape = " ".join(f"{k}={v}" for k, v in p["shape"].items())
            print(f"  {p['family']} {shape} {p['dtype']} {p['device']}: {len(store.rows(p))} rows")
    return 0

def cmd_report(args: argparse.Namespace) -> int:
    """The best config the store holds for each problem, with how it was found."""
    from collections import Counter

    from ..store import open_store

    store = open_store(args.db, read_only=True)
    if args.html is not None:
        from ..report import html_report

        if args.html.is_dir():
            raise UsageError(f"--html {args.html} is a folder; give the page's file name, e.g. report.html")
        args.html.write_text(html_report(store))
        print(f"wrote {args.html}: {len(store.problems())} problems of {store.path}")
        return 0
    out = []
    for problem in store.problems():
        if args.family and problem["family"] != args.family:
            continue
        rows = store.rows(problem)
        statuses = Counter(m["status"] for _, m in rows)
        ok = [(m["ms"], c) for c, m in rows if m["status"] == "ok"]
        best_ms, best = min(ok, key=lambda t: t[0]) if ok else (None, None)
        out.append({"family": problem["family"], "shape": problem["shape"], "dtype": problem["dtype"],
                    "device": problem["device"], "measurements": len(rows), "statuses": dict(statuses),
                    "best_ms": best_ms, "best_config": best})
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{store.path}: {len(out)} problems")
    for r in out:
        shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
        best = f"{r['best_ms']:.4f} ms {json.dumps(r['best_config'])}" if r["best_config"] else "nothing ran"
        counts = ", ".join(f"{n} {s}" for s, n in sorted(r["statuses"].items()))
        print(f"  {r['family']} {shape} {r['dtype']} on {r['device'] or '?'}: {best} ({counts})")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("db", help="the results store: import or export recorded tables, or list what it holds")
    p.add_argument("action", choices=["stats", "import", "export"])
    p.add_argument("files", nargs="*", type=Path)
    p.add_argument("--format", choices=["table", "kernel_tuner"], default="table",
                   help="table: the recorded-table JSONL (docs/data-format.md); kernel_tuner: Kernel Tuner cache "
                        "files, one per problem (export writes a folder of them)")
    p.add_argument("--db", type=Path, help="the database file (default: $DR_KERNEL_DB or the per-user cache)")
    p.set_defaults(func=cmd_db)

    p = sub.add_parser("report", help="the best config the results store holds for each problem")
    p.add_argument("--db", type=Path, help="the database file (default: $DR_KERNEL_DB or the per-user cache)")
    p.add_argument("--family", help="only problems of this kernel family")
    p.add_argument("--json", action="store_true", help="print one JSON list")
    p.add_argument("--html", type=Path, metavar="OUT",
                   help="write one self-contained HTML page instead: problems, best configs, tuning curves, stored "
                        "winners, and search strategies replayed over the measured configs")
    p.set_defaults(func=cmd_report)
