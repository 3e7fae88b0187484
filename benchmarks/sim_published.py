"""Reproduce the published experiments over N seeds; write the JSON and the docs' table.

Run: python benchmarks/sim_published.py [--seeds 10] [--workers N]

What `seawall sim verify` does (the same runs, the same verdicts), written down: the document
goes to docs/figures/sim_published.json (every run's parameters, seeds, seawall's version, each
trial's figure and each verdict) and the table generated from it replaces the one between the
published-table markers in docs/simulator.md. tests/sim/test_sim_published.py checks that the
two agree and that the JSON's trials are what the simulator computes.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import time

from seawall.sim._published import TABLE_END, TABLE_START, published_table, refresh, verify

ROOT = pathlib.Path(__file__).resolve().parent.parent
JSON_PATH = ROOT / "docs" / "figures" / "sim_published.json"
DOC_PATH = ROOT / "docs" / "simulator.md"


def write_table(doc_path: pathlib.Path, table: str) -> None:
    text = doc_path.read_text(encoding="utf-8")
    start, end = text.index(TABLE_START), text.index(TABLE_END)
    doc_path.write_text(
        text[: start + len(TABLE_START)] + "\n" + table + "\n" + text[end:], encoding="utf-8"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--table-only",
        action="store_true",
        help="re-read the JSON, take the experiments' words and figures from the code, judge "
        "again and rewrite the table, without running (refused if a run changed)",
    )
    args = parser.parse_args()
    if args.table_only:
        doc = refresh(json.loads(JSON_PATH.read_text(encoding="utf-8")))
        JSON_PATH.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        write_table(DOC_PATH, published_table(doc))
        print(published_table(doc))
        return
    print(f"machine: {os.cpu_count()} cores, Python {platform.python_version()}", file=sys.stderr)
    t0 = time.perf_counter()
    doc = verify(
        seeds=args.seeds,
        workers=args.workers,
        progress=lambda what: print(f"running {what}", file=sys.stderr),
    )
    JSON_PATH.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    table = published_table(doc)
    write_table(DOC_PATH, table)
    print(table)
    print(f"{time.perf_counter() - t0:.1f} s; wrote {JSON_PATH} and {DOC_PATH}", file=sys.stderr)


if __name__ == "__main__":
    main()
