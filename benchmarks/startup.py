"""Start-up: importing a retry library and making the first decorated call, side by side.

Each contender runs in a fresh interpreter: import the library, decorate a function, call it
once; the time is measured inside the process (from before the import to after the call), so
the interpreter's own start is left out. Two times are taken: the processor time the process
spent (``time.process_time``), which other work on a shared machine barely moves, and the
elapsed time, which it does; the ratios are of processor time. The contenders are interleaved over several rounds
(A B C ..., then B C ... A: each round starts one further on, so that none always runs first),
each round's times are shown as ratios to seawall's time in that round, and each row gives the
median time and the median of its per-round ratios (a noisy round moves every contender of it
alike, so the ratio is steadier than the times). Bytecode is
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
import statistics
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
TIMED = (
    "import time\nt, c = time.perf_counter(), time.process_time()\n{body}f()\n"
    "print(time.process_time() - c, time.perf_counter() - t)\n"
)


def run_once(name: str, env: dict[str, str]) -> tuple[float, float]:
    """Processor and elapsed seconds of one fresh interpreter's import, decoration and call."""
    code = TIMED.format(body=BODY[name])
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    cpu, elapsed = out.stdout.split()
    return float(cpu), float(elapsed)


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
        rounds: list[dict[str, tuple[float, float]]] = []
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            rounds.append({name: run_once(name, env) for name in order})
    versions = ", ".join(f"{n} {importlib.metadata.version(n)}" for n in names)
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs; {versions}")
    cached = "no new bytecode cached" if args.no_bytecode_cache else "bytecode cached"
    print(f"{args.rounds} interleaved rounds ({cached}): import, decorate, first call")
    peers = [n for n in names if n != "seawall"]
    print("each round: seawall's processor time, and each peer's as a ratio to it")
    print("  round  seawall ms  " + "  ".join(f"{n:>9}" for n in peers))
    for r, times in enumerate(rounds, 1):
        ratios = "  ".join(f"{times[n][0] / times['seawall'][0]:8.2f}x" for n in peers)
        print(f"  {r:>5}  {times['seawall'][0] * 1e3:10.1f}  {ratios}")
    print("median over the rounds (processor time; elapsed time beside it):")
    for name in names:
        cpu = statistics.median(times[name][0] for times in rounds)
        ratio = statistics.median(times[name][0] / times["seawall"][0] for times in rounds)
        elapsed = statistics.median(times[name][1] for times in rounds)
        print(
            f"  {name:<9} {cpu * 1e3:7.1f} ms  {ratio:5.2f} x seawall   elapsed {elapsed * 1e3:7.1f} ms"
        )


if __name__ == "__main__":
    main()
