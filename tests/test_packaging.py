"""The package builds into a wheel and an sdist that install in a fresh virtual environment."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import venv
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

SMOKE = """
import seawall, seawall.lowlevel, seawall.config, seawall.testing
calls = []
@seawall.retry(max_attempts=3, hooks=())
def flaky():
    calls.append(1)
    if len(calls) < 3:
        raise ConnectionError("transient")
    return "ok"
with seawall.testing.instant():
    assert flaky() == "ok"
assert len(calls) == 3
print(seawall.__version__)
"""


@pytest.mark.slow
def test_wheel_and_sdist_build_and_install(tmp_path: pathlib.Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    wheels = list(dist.glob("seawall-*.whl"))
    sdists = list(dist.glob("seawall-*.tar.gz"))
    assert len(wheels) == 1
    assert len(sdists) == 1
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
    # The demo page works offline: its assets ship inside the package.
    assert {f"seawall/web/static/{n}" for n in ("index.html", "app.js", "style.css")} <= names
    for artefact in (wheels[0], sdists[0]):
        env = tmp_path / f"venv-{artefact.suffix}"
        # A fresh environment without pip of its own (ensurepip costs seconds per environment):
        # this interpreter's pip installs into it (--python).
        venv.create(env, with_pip=False)
        python = env / "bin" / "python"
        # The core has no dependencies: nothing but the artefact is installed (the sdist
        # builds with hatchling, which pip fetches for its build environment).
        pip = [sys.executable, "-m", "pip", "--python", str(python)]
        subprocess.run(
            [*pip, "install", "--no-deps", "-q", str(artefact)],
            check=True,
            capture_output=True,
            text=True,
        )
        out = subprocess.run(
            [str(python), "-c", SMOKE], check=True, capture_output=True, text=True, cwd=tmp_path
        ).stdout
        from seawall import __version__

        assert out.strip() == __version__
