"""The `seawall` command: subcommands, JSON, plots, the demo, bad arguments and Ctrl-C."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from seawall.cli import build_parser, main
from seawall.sim import SCENARIOS, Scenario, register_scenario


@pytest.mark.volume
def test_sim_amplify_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "amplify", "--requests", "100", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    per_request = {r["strategy"]: r["per_request"] for r in data["rows"]}
    # By default the SRE book's example: 4 attempts at each of 3 layers.
    assert per_request["naive"] == 64.0
    assert per_request["one_layer"] == 4.0


def test_sim_occ_table_and_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    png = tmp_path / "occ.png"
    argv = ["sim", "occ", "--clients", "5", "10", "--trials", "2", "--workers", "1"]
    assert main([*argv, "--plot", str(png)]) == 0
    out = capsys.readouterr()
    assert "write calls" in out.out and "no_backoff" in out.out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "plot written" in out.err


def test_sim_storm_prints_trace_and_histogram(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "storm", "--clients", "10", "--outage", "0.3"]) == 0
    out = capsys.readouterr().out
    assert "success" in out
    assert "time (s)    none" in out  # the histogram header


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sim", "occ", "--clients", "-3"], "--clients: must be a whole number >= 1"),
        (["sim", "storm", "--clients", "0"], "--clients: must be a whole number >= 1"),
        (["sim", "sweep", "--p", "1.5"], "--p: must be a probability in [0, 1]"),
        (["sim", "sweep", "--p", "-0.1"], "--p: must be a probability in [0, 1]"),
        (["sim", "occ", "--trials", "many"], "--trials: must be a whole number >= 1"),
        (["sim", "nope"], "invalid choice: 'nope'"),
        (["sim", "occ", "--algorithms", "fast"], "must be one of"),
        (["sim", "occ", "--base", "1", "--cap", "0.5", "--trials", "1"], "cap must be >= base"),
        (["sim", "metastable", "--spike-start", "30", "--spike-end", "10"], "spike_end"),
        (["sim", "fleet", "--min-per-second", "1e300"], "min_per_second must be"),
        (["sim"], "required"),
        ([], "required"),
    ],
)
def test_bad_arguments_exit_non_zero_with_a_clear_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


HUGE = str(10**22)


def _integer_options(
    parser: argparse.ArgumentParser, prefix: list[str]
) -> list[tuple[list[str], str]]:
    """Every option of the command, at any depth, that takes a whole number: (command, option)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _integer_options(sub, [*prefix, name])
        elif action.option_strings and callable(action.type):
            try:
                sample = action.type("5")
            except (argparse.ArgumentTypeError, TypeError, ValueError):
                continue
            if isinstance(sample, int):
                found.append((prefix, action.option_strings[-1]))
    return found


INTEGER_OPTIONS = _integer_options(build_parser(), [])


def test_every_integer_option_is_found() -> None:
    options = {(" ".join(command), option) for command, option in INTEGER_OPTIONS}
    for expected in [
        ("sim storm", "--workers"),
        ("sim storm", "--seeds"),
        ("sim storm", "--clients"),
        ("sim", "--workers"),
        ("sim occ", "--clients"),
        ("sim fleet", "--processes"),
        ("sim verify", "--seeds"),
        ("demo", "--workers"),
    ]:
        assert expected in options


@pytest.mark.parametrize(
    ("command", "option"), INTEGER_OPTIONS, ids=[" ".join(c) + o for c, o in INTEGER_OPTIONS]
)
def test_a_huge_integer_is_refused_naming_the_option_and_its_bound(
    command: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Refused while the arguments are read: nothing runs, no pool of 10**22 processes (and
    # --help, read after it, stops the command if the value were accepted).
    with pytest.raises(SystemExit) as exc:
        main([*command, option, HUGE, "--help"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: must be a whole number >= " in err, err
    assert " and <= " in err and "Traceback" not in err
    bound = int(err.split(" and <= ")[1].split(",")[0].replace("_", ""))
    assert bound < 10**22
    # The bound itself is accepted by the option.
    assert not _refused([*command, option, str(bound), "--help"], capsys)


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> bool:
    with pytest.raises(SystemExit) as exc:
        main(argv)  # --help: parsed, then printed, never run
    capsys.readouterr()
    return exc.value.code != 0


def test_a_grid_of_too_many_trials_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sim", "storm", "--grid", "clients=" + ",".join(map(str, range(1, 101)))]
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--seeds", "100000"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--grid: 100 cells x 100000 seeds" in err and "at most" in err


def test_every_scenario_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("storm", "occ", "amplify", "sweep", "metastable"):
        with pytest.raises(SystemExit) as exc:
            main(["sim", name, "--help"])
        assert exc.value.code == 0
        out = capsys.readouterr().out
        assert f"usage: seawall sim {name}" in out
        assert "--seed" in out and "--json" in out


@pytest.fixture
def extra_scenario() -> list[str]:
    """A scenario registered through the extension point (tests/conftest.py removes it)."""
    calls: list[str] = []

    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--boom", action="store_true")

    def run(args: argparse.Namespace, progress: Any) -> dict[str, int]:
        calls.append("run")
        if args.boom:
            raise KeyboardInterrupt  # what Ctrl-C raises in the main thread
        return {"answer": 42}

    def render(result: Any, console: Any) -> None:
        console.print(f"answer is {result['answer']}")

    register_scenario(
        Scenario(
            name="extra",
            summary="a test scenario",
            add_arguments=add_arguments,
            run=run,
            demo=lambda seed, workers, progress: {"answer": seed},
            render=render,
        )
    )
    return calls


def test_a_registered_scenario_becomes_a_subcommand(
    extra_scenario: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", "extra"]) == 0
    assert "answer is 42" in capsys.readouterr().out
    assert main(["sim", "extra", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["answer"] == 42
    assert data["run"]["scenario"] == "extra" and data["run"]["parameters"] == {"boom": False}
    assert "--plot" not in build_parser().format_help()  # no plot for this one
    with pytest.raises(ValueError, match="already registered"):
        register_scenario(SCENARIOS["extra"])


def test_ctrl_c_exits_130_without_a_traceback(
    extra_scenario: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", "extra", "--boom"]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err
    assert "Traceback" not in err


# Ctrl-C while the command is still importing what it needs (a terminal's SIGINT a moment after
# Enter): a real SIGINT, sent by the process to itself as the import of `module` begins.
CTRL_C_DURING_IMPORT = """
import os, signal, sys

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlC())
from seawall.cli import main
sys.exit(main({argv!r}))
"""


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("matplotlib", ["sim", "storm", "--json"]),
        ("seawall.sim", ["sim", "storm", "--json"]),
        ("seawall.saga._cli", ["saga", "list", "--store", "sqlite:///unused.db"]),
    ],
)
def test_ctrl_c_while_starting_exits_130_without_a_traceback(module: str, argv: list[str]) -> None:
    code = CTRL_C_DURING_IMPORT.format(module=module, argv=argv)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr == "\nseawall: interrupted\n"


@pytest.mark.slow  # every scenario, with plots
def test_demo_writes_plots_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "report"
    assert main(["demo", "--out", str(out_dir), "--workers", "2"]) == 0
    printed = capsys.readouterr().out
    assert str(out_dir) in printed
    for name in ("storm", "occ", "sweep", "metastable"):
        assert (out_dir / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((out_dir / "summary.json").read_text())
    assert set(summary["scenarios"]) >= {"storm", "occ", "amplify", "sweep", "metastable"}
    amplify = summary["scenarios"]["amplify"]["result"]["rows"]
    assert [r["per_request"] for r in amplify][:2] == [64.0, 4.0]  # the SRE book's example
    meta = {s["strategy"]: s for s in summary["scenarios"]["metastable"]["result"]["series"]}
    assert meta["naive"]["recovered_at"][0] is None
    assert meta["budget"]["recovered_at"][0] is not None
    assert (out_dir / "occ.md").read_text().startswith("| N |")
    # The saga's log: a step retrying, then a permanent failure compensated.
    assert "attemptCount" in printed and "nextRetryAt" in printed and "lastError" in printed
    run = summary["saga"]["run"]
    assert run["status"] == "COMPENSATED"
    assert [s["status"] for s in run["steps"]] == ["COMPENSATED", "COMPENSATED", "FAILED"]
    assert run["steps"][1]["attemptCount"] == 3
