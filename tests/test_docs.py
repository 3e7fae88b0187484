"""Every Python example in README.md and docs/*.md runs, and prints what it says it prints.

One convention for every page: a line ``print(x)  # -> 42`` (or a comment line ``# -> 42``
below it) states the line the example prints at that point. The test runs each fenced
``python`` block on its own, in a fresh namespace and a temporary working directory, and
compares everything the block printed with those lines, in order: an example that prints
something it does not state fails too. Top-level ``await`` is allowed (the block then runs on
an event loop of its own).

A block that cannot run says why, in the Markdown, right before it:
``<!-- not run: needs a live server at example.com -->``. Those are skipped with that reason;
there is no other way for a block to be left out.

The other checks of the docs against the code (the TOML and YAML files of the config page
describe the same policies; the metric table lists every metric) are here too.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import dataclasses
import inspect
import io
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

FENCE = re.compile(r"^```([\w-]*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
NOT_RUN = re.compile(r"<!--\s*not run:(.*)-->\Z", re.S)
EXPECTED = "# -> "


@dataclasses.dataclass(frozen=True)
class Example:
    page: str  # relative to the repository root
    line: int  # of the opening fence
    code: str
    not_run: str | None  # the reason given in the Markdown, or None: the block runs

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def not_run_reason(before: str) -> str | None:
    """The reason of a ``<!-- not run: ... -->`` comment that ends *before*, if there is one."""
    before = before.rstrip()
    if not before.endswith("-->"):
        return None
    match = NOT_RUN.match(before, before.rfind("<!--"))
    return match.group(1).strip() if match else None


def examples(text: str, page: str) -> list[Example]:
    """The ``python`` blocks of one page, with the reason given for any that does not run."""
    return [
        Example(
            page=page,
            line=text.count("\n", 0, fence.start()) + 1,
            code=fence.group(2),
            not_run=not_run_reason(text[: fence.start()]),
        )
        for fence in FENCE.finditer(text)
        if fence.group(1) == "python"
    ]


def page_examples(path: pathlib.Path) -> list[Example]:
    return examples(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())


EXAMPLES = [example for path in PAGES for example in page_examples(path)]
# The simulator page runs whole scenarios: tests/sim traces the same lines (see `volume`).
VOLUME_PAGES = {"docs/simulator.md"}


def expected_output(code: str) -> list[str]:
    return [line.split(EXPECTED, 1)[1].rstrip() for line in code.splitlines() if EXPECTED in line]


def run_example(example: Example) -> list[str]:
    """Run one block as a script; return the lines it printed."""
    code = compile(
        example.code,
        example.id,
        "exec",
        flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
        dont_inherit=True,
    )
    namespace = {"__name__": "__doc_example__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if code.co_flags & inspect.CO_COROUTINE:
            asyncio.run(eval(code, namespace))  # a block with top-level await
        else:
            exec(code, namespace)
    return [line.rstrip() for line in out.getvalue().splitlines()]


@pytest.mark.parametrize(
    "example",
    [
        pytest.param(e, id=e.id, marks=[pytest.mark.volume] if e.page in VOLUME_PAGES else [])
        for e in EXAMPLES
    ],
)
def test_example_prints_what_it_says(
    example: Example, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if example.not_run is not None:
        pytest.skip(f"not run: {example.not_run}")
    monkeypatch.chdir(tmp_path)  # files an example writes land in a temporary directory
    assert run_example(example) == expected_output(example.code)


def test_every_page_is_collected() -> None:
    pages_with_python = {
        path.relative_to(ROOT).as_posix()
        for path in PAGES
        if "```python" in path.read_text(encoding="utf-8")
    }
    assert {e.page for e in EXAMPLES} == pages_with_python
    assert "README.md" in pages_with_python
    # Every fence that opens a Python block was parsed as one (none swallowed by a bad fence).
    count = sum(p.read_text(encoding="utf-8").count("```python\n") for p in PAGES)
    assert len(EXAMPLES) == count


def test_a_block_is_left_out_only_by_the_note_right_before_it() -> None:
    text = """
<!-- not run: needs a live server at example.com -->

```python
print("skipped")
```

<!-- a comment that is not a note -->
```python
print("run")  # -> run
```

```python
print("run too")  # -> run too
```
"""
    first, second, third = examples(text, "page.md")
    assert first.not_run == "needs a live server at example.com"
    assert (second.not_run, third.not_run) == (None, None)
    assert (first.line, second.line, third.line) == (4, 9, 13)
    assert expected_output(second.code) == ["run"]


def test_every_not_run_note_gives_a_reason_and_comes_right_before_a_python_block() -> None:
    """A note whose block moved away would hide nothing, and stay there unnoticed."""
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for note in re.finditer(r"<!--\s*not run:", text):
            end = text.index("-->", note.end())
            assert text[note.end() : end].strip(), f"{path.name}: a not-run note without a reason"
            after = text[end + 3 :].lstrip()
            assert after.startswith("```python\n"), f"{path.name}: a note with no block after it"


def test_a_block_that_does_not_run_states_no_output() -> None:
    # Unless the note names the test that runs it elsewhere (with a server this collector does
    # not start), and that test reads the page.
    for example in EXAMPLES:
        if example.not_run is None:
            continue
        elsewhere = re.search(r"tests/[\w/]+\.py", example.not_run)
        if elsewhere is None:
            assert not expected_output(example.code), example.id
        else:
            runner = ROOT / elsewhere.group(0)
            assert runner.is_file(), example.id
            assert pathlib.PurePath(example.page).name in runner.read_text(encoding="utf-8")


# -- the docs' other claims about the code --------------------------------------------------------


def test_config_page_toml_and_yaml_describe_the_same_policies(tmp_path: pathlib.Path) -> None:
    import seawall.config

    text = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    (toml,) = re.findall(r"```toml\n(.*?)```", text, re.S)
    (yaml,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    (tmp_path / "p.toml").write_text(toml)
    (tmp_path / "p.yaml").write_text(yaml)
    routes = seawall.config.load_config(tmp_path / "p.toml")
    assert routes == seawall.config.load_config(tmp_path / "p.yaml")
    assert routes["users"].num_retries == 3
    assert routes["users"].back_off.cap == 0.25
    assert routes["search"].enabled is False


def test_observability_page_lists_every_metric_with_its_labels() -> None:
    from seawall.instrumentation import METRICS

    text = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    for metric in METRICS:
        row = next(line for line in text.splitlines() if f"| `{metric.prometheus_name}` |" in line)
        assert metric.kind in row
        for label in metric.labels:
            assert f"`{label}`" in row
