"""One experiment of the page, run in a child process: ``python -m seawall.web._worker NAME
SEED SECONDS`` prints its JSON data on stdout.

The server kills the process when the run is no longer wanted; SECONDS is a second guard, for a
server that died before it could: the process ends itself once they have passed.
"""

from __future__ import annotations

import json
import signal
import sys


def main(argv: list[str]) -> int:
    name, seed, seconds = argv
    if hasattr(signal, "alarm"):
        signal.alarm(int(seconds) + 1)
    from seawall.web._adapter import run_experiment

    data = run_experiment(name, int(seed))
    sys.stdout.write(json.dumps(data, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
