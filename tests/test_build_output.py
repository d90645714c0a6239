"""What an image build shows of its steps' output: the last lines on a terminal, redrawn
under the running step and cleared when the next begins; nothing more off a terminal;
everything with --verbose. The engine is faked here; the real one in
tests/test_image_cli.py."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest

from git_iterare import ui
from git_iterare.sandbox import image


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _screen(written: str) -> list[str]:
    """What a terminal shows after ``written``: lines, with the cursor-up-and-clear
    sequence the window uses (``ESC [ n F`` then ``ESC [ J``) applied."""
    import re

    lines: list[str] = []
    for piece in re.split(r"(\x1b\[\d+F\x1b\[J)", written):
        moved = re.fullmatch(r"\x1b\[(\d+)F\x1b\[J", piece)
        if moved:
            del lines[len(lines) - int(moved.group(1)):]
        else:
            lines += piece.splitlines()
    return lines


def test_a_steps_last_lines_show_on_a_terminal_and_go_with_the_next_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm")
    ui.reset()
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    progress = ui.progress  # what every command prints with (on stderr)
    progress("Step 2/3: RUN apt-get install -y make")
    for n in range(1, 10):
        progress.output(f"Unpacking part {n} \x1b[31m...")
    assert _screen(terminal.getvalue()) == [
        "Step 2/3: RUN apt-get install -y make",
        *[f"  Unpacking part {n} ^[[31m..." for n in range(4, 10)]]
    progress("Step 3/3: LABEL x=y")
    assert _screen(terminal.getvalue()) == [
        "Step 2/3: RUN apt-get install -y make", "Step 3/3: LABEL x=y"]
    # A warning in the middle of a step clears the window first, so nothing overwrites it.
    progress.output("more")
    ui.warn("careful")
    progress.output("after")
    assert _screen(terminal.getvalue())[-2:] == ["warning: careful", "  after"]
    progress.clear()


def test_off_a_terminal_the_output_is_not_shown() -> None:
    piped = io.StringIO()
    progress = ui.Progress(piped)
    progress("Step 1/1: RUN make")
    progress.output("compiling")
    assert piped.getvalue() == "Step 1/1: RUN make\n"


class _FakeApi:
    def build(self, **kwargs: Any) -> Iterator[dict[str, str]]:
        yield {"stream": "Step 1/2 : FROM base\n"}
        yield {"stream": " ---> 1234\n"}
        yield {"stream": "Step 2/2 : RUN apt-get install -y make\n"}
        yield {"stream": " ---> Running in abcd\n"}
        yield {"stream": "Reading package lists...\nSetting up make\n"}
        yield {"stream": "Successfully built 5678\n"}


class _FakeClient:
    api = _FakeApi()

    class images:  # the docker SDK's attribute
        @staticmethod
        def get(name: str) -> Any:
            return type("Image", (), {"id": "sha256:5678"})()


class _Recorder:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.output_lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def output(self, line: str) -> None:
        self.output_lines.append(line)


@pytest.mark.parametrize("verbose", [False, True])
def test_the_build_sends_each_steps_output(monkeypatch: pytest.MonkeyPatch,
                                           verbose: bool) -> None:
    from git_iterare import proc

    monkeypatch.setattr(image, "client", lambda: _FakeClient())
    monkeypatch.setattr(proc, "VERBOSE", verbose)
    seen = _Recorder()
    assert image._stream_build({}, "t", seen) == "sha256:5678"
    steps = ["Step 1/2: FROM base", "Step 2/2: RUN apt-get install -y make"]
    if verbose:  # everything, as progress lines
        assert seen.lines == [steps[0], "   ---> 1234", steps[1], "   ---> Running in abcd",
                              "  Reading package lists...", "  Setting up make",
                              "  Successfully built 5678"]
        assert seen.output_lines == []
    else:  # the steps, and what they printed (the builder's own lines left out)
        assert (seen.lines, seen.output_lines) == (
            steps, ["Reading package lists...", "Setting up make"])
    plain: list[str] = []  # a progress without a window gets the steps alone
    monkeypatch.setattr(proc, "VERBOSE", False)
    image._stream_build({}, "t", plain.append)
    assert plain == steps
