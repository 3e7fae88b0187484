"""Reproduce the published experiments over N seeds; write the JSON and the docs' table.

Run: python benchmarks/sim_published.py [--seeds 10] [--workers N]

Writes docs/figures/sim_published.json (every run's parameters, seeds, seawall's version and
each trial's figure) and replaces the table between the published-table markers in
docs/simulator.md with the one generated from that JSON. tests/sim/test_sim_published.py checks
that the two agree and that the JSON's trials are what the simulator computes.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import time

from seawall.sim._published import TABLE_END, TABLE_START, published_table, run_published

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
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, Python {platform.python_version()}", file=sys.stderr)
    t0 = time.perf_counter()
    doc = run_published(
        range(args.seeds),
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
