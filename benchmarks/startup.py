"""Start-up: importing a retry library and making the first decorated call, side by side.

Each contender runs in a fresh interpreter: import the library, decorate a function, call it
once; the time is measured inside the process (from before the import to after the call), so
the interpreter's own start is left out. The contenders are interleaved (A B C ... A B C ...)
over several rounds and each row shows the best time and its ratio to seawall's. Bytecode is
cached for every contender, as after an install (a cache directory of this run's own), and a
first round that writes the cache is not counted. With ``--no-bytecode-cache`` nothing new is
cached (``PYTHONDONTWRITEBYTECODE``): a source checkout on the path is compiled on every run,
while installed peers keep the bytecode their installer wrote; what a first-time user of a
checkout meets.

Usage: python benchmarks/startup.py [--rounds 15] [--no-bytecode-cache]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
import tempfile

BODY = {
    "seawall": "import seawall\n@seawall.retry()\ndef f(): return 1\n",
    "tenacity": "import tenacity\n@tenacity.retry()\ndef f(): return 1\n",
    "stamina": "import stamina\n@stamina.retry(on=ConnectionError)\ndef f(): return 1\n",
    "backoff": "import backoff\n@backoff.on_exception(backoff.expo, ConnectionError)\n"
    "def f(): return 1\n",
}
TIMED = "import time\nt = time.perf_counter()\n{body}f()\nprint(time.perf_counter() - t)\n"


def run_once(name: str, env: dict[str, str]) -> float:
    code = TIMED.format(body=BODY[name])
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-bytecode-cache", action="store_true")
    args = parser.parse_args()
    names = [n for n in BODY if n == "seawall" or importlib.util.find_spec(n) is not None]
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ)
        if args.no_bytecode_cache:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            env["PYTHONPYCACHEPREFIX"] = cache
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        for name in names:  # writes the bytecode cache; not counted
            run_once(name, env)
        best = {name: float("inf") for name in names}
        for _ in range(args.rounds):
            for name in names:
                best[name] = min(best[name], run_once(name, env))
    versions = ", ".join(f"{n} {importlib.metadata.version(n)}" for n in names)
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs; {versions}")
    cached = "no new bytecode cached" if args.no_bytecode_cache else "bytecode cached"
    print(f"best of {args.rounds} rounds ({cached}): import, decorate, first call")
    for name in names:
        ratio = best[name] / best["seawall"]
        print(f"  {name:<9} {best[name] * 1e3:7.1f} ms  {ratio:5.2f} x seawall")


if __name__ == "__main__":
    main()
