"""Progress of long work (an engine's start, `harness upgrade`, `harness matrix`): the stage it is in, and for how long.

    with progress("waiting for the engine") as stage:
        ...                      # stage.say(msg): say msg, and show it as the stage from now on
        stage.detail("/health 503")

On a terminal (stderr is a tty) a rich status line shows the stage and its elapsed seconds, refreshed every second and
gone when the work ends. Anywhere else (a pipe, a log file, pytest) plain lines, at most one every `every` seconds of a
stage and none for a stage shorter than that: "  ... waiting for the engine (35 s)"; never a terminal escape (the text
is shown through harness.shown). Nested progress (a matrix cell that launches an engine that waits) is one display:
the innermost stage under the outer ones, from one ticker thread per thread of work.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from harness.shown import shown

__all__ = ["EVERY_S", "Progress", "Stage", "progress"]

EVERY_S = 10.0  # plain lines: one per this many seconds of a stage
_REFRESH_S = 1.0  # the ticker's period (the terminal line's elapsed seconds)
_clock: Callable[[], float] = time.monotonic  # one seam for the tests' clock
_local = threading.local()


def _to_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _terminal() -> bool:
    """True when stderr is a real terminal (not FORCE_COLOR into a pipe, not TERM=dumb, not HARNESS_PROGRESS=plain)."""
    if os.environ.get("HARNESS_PROGRESS") == "plain" or os.environ.get("TERM") == "dumb":
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else (text[: room - 1] + "…" if room > 1 else "")


class Stage:
    """One level of the work in progress: a label (what it is doing), when that began, and a detail (its last state)."""

    def __init__(self, root: Progress, label: str, say: Callable[[str], None]) -> None:
        self._root, self._say = root, say
        self.label, self.began, self.doing, self.note = shown(label), _clock(), "", ""

    def say(self, msg: str) -> None:
        """Say `msg` (a line of the work's own output) and show it as what this stage is doing from now on."""
        self._say(msg)
        self._root.now_doing(self, msg)

    def tick(self) -> None:
        """Refresh the display now (the ticker thread does it every second)."""
        self._root.tick()

    def shown_as(self) -> str:
        return f"{self.label}: {self.doing}" if self.doing and self.label else self.label or self.doing

    def detail(self, text: object) -> None:
        """The stage's last state, shown after its elapsed time (e.g. why the engine is not ready yet)."""
        self.note = shown(text)


class Progress:
    """The stages of one thread's work and their display: a rich status on a terminal, else plain lines."""

    def __init__(
        self, say: Callable[[str], None], *, every: float = EVERY_S, live: bool | None = None, enabled: bool = True
    ) -> None:
        self._say, self.every, self.enabled = say, every, enabled
        self.stages: list[Stage] = []
        self._lock = threading.RLock()
        self._last_said = _clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._status: Any = None
        if enabled and (live if live is not None else _terminal()):
            from rich.console import Console

            self._status = Console(stderr=True).status("", spinner="dots")

    def push(self, label: str, say: Callable[[str], None] | None = None) -> Stage:
        with self._lock:
            stage = Stage(self, label, say or self._say)
            self.stages.append(stage)
            self._last_said = stage.began
            return stage

    def pop(self, stage: Stage) -> None:
        with self._lock:
            if stage in self.stages:
                self.stages.remove(stage)
            self._last_said = _clock()  # the outer stage's next line comes a full period after the inner one ended

    def now_doing(self, stage: Stage, msg: str) -> None:
        """The stage's work moved on to `msg` (its elapsed seconds count from now). A leading `[name]` that the label
        begins with too is left out: "[0.11.0] cell 1 of 3: launching", not "...: [0.11.0] launching"."""
        text = msg.strip()
        head = stage.label.split(" ", 1)[0]
        if head.startswith("[") and head.endswith("]") and text.startswith(head):
            text = text[len(head) :].strip()
        with self._lock:
            stage.doing, stage.began, stage.note = shown(text), _clock(), ""
            self._last_said = stage.began

    def line(self, width: int | None = None) -> str:
        """`  ... outer / inner (N s)` (N: the innermost stage's seconds), with the innermost stage's detail. With a
        width (a terminal's), the detail and then the outer stages are cut first: the elapsed seconds always show."""
        with self._lock:
            if not self.stages:
                return ""
            inner = self.stages[-1]
            labels = " / ".join(s.shown_as() for s in self.stages if s.shown_as())
            seconds = f"{_clock() - inner.began:.0f} s"
            note = f"; {inner.note}" if inner.note else ""
            if width is None:
                return f"  ... {labels} ({seconds}{note})"
            room = max(width - len(seconds) - 10, 10)
            note = note if len(labels) + len(note) <= room else _cut(note, max(room - len(labels), 0))
            labels = labels if len(labels) <= room else "…" + labels[len(labels) - room + 1 :]
            return f"... {labels} ({seconds}{note})"

    def tick(self) -> None:
        """Refresh the display: the terminal line always, a plain line when a period of the stage has passed."""
        with self._lock:
            text = self.line() if self.enabled else ""
            if not text:
                return
            if self._status is not None:
                from rich.text import Text

                # literal text (no markup), cut to one line of the terminal: a wrapped status line would scroll
                self._status.update(Text(self.line(self._status.console.width - 3)))
                return
            now = _clock()
            if now - self._last_said >= self.every:
                self._last_said = now
                self._say(text)

    def start(self) -> None:
        if self._status is not None:
            self.tick()  # the stage from the first frame, not a bare spinner for a second
            self._status.start()
        self._thread = threading.Thread(target=self._run, name="harness-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._status is not None:
            self._status.stop()

    def _run(self) -> None:
        while not self._stop.wait(_REFRESH_S):
            try:
                self.tick()
            except (OSError, ValueError):  # stderr closed or gone: the work goes on without a display
                return


@contextlib.contextmanager
def progress(
    label: str,
    *,
    say: Callable[[str], None] | None = None,
    every: float = EVERY_S,
    enabled: bool = True,
    live: bool | None = None,
) -> Iterator[Stage]:
    """Show `label` and its elapsed time while the block runs. `say` prints a line (default: stderr); inside another
    progress of this thread the stage nests under it. enabled=False (a quiet launch): no display at all (stage.say()
    still says its line)."""
    root: Progress | None = getattr(_local, "root", None)
    if not enabled:
        yield Progress(say or _to_stderr, enabled=False).push(label)
        return
    if root is not None:
        stage = root.push(label, say)
        try:
            yield stage
        finally:
            root.pop(stage)
        return
    root = Progress(say or _to_stderr, every=every, live=live)
    _local.root = root
    stage = root.push(label)
    root.start()
    try:
        yield stage
    finally:
        root.stop()
        _local.root = None
