"""How far a catch-up of the twin has got (`--at`, `gpufleet sim run`): simulated time reached, speed in x real time
and the time left, on stderr only, so `-o json` on stdout stays clean.

On a terminal it is a bar redrawn in place; elsewhere (a log, CI) nothing unless asked for (`--progress`), then one
line every few seconds of wall time, which a log keeps readable. Commands that only sometimes run the twin import
this: rich.progress and the spec are imported when it runs."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import typer

from gpufleet.cli.output import err_console

LINE_EVERY_S = 10.0  # wall seconds between two plain lines
PROGRESS_OPT = typer.Option(
    None,
    "--progress/--no-progress",
    help="While the twin catches up: simulated time reached, speed and time left, on stderr (default: when stderr "
    "is a terminal).",
)


class CatchUp:
    """Simulated seconds done -> what to say about them: how far, how fast, how long still."""

    def __init__(self, total_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.total_s = total_s
        self.clock = clock
        self.started = clock()
        self.done_s = 0.0

    def update(self, done_s: float) -> None:
        self.done_s = done_s

    @property
    def speed(self) -> float | None:
        """Simulated seconds per wall second so far (None before any wall time has passed)."""
        wall = self.clock() - self.started
        return self.done_s / wall if wall > 0 and self.done_s > 0 else None

    def eta_s(self) -> float | None:
        speed = self.speed
        return None if speed is None else max(0.0, self.total_s - self.done_s) / speed

    def line(self) -> str:
        """`3h12m of 12h (27%), 512x real time, 1m3s left`."""
        share = 100.0 * self.done_s / self.total_s if self.total_s else 100.0
        speed, eta = self.speed, self.eta_s()
        pace = f"{speed:,.0f}x real time" if speed is not None else "starting"
        left = f", {_span(eta)} left" if eta is not None else ""
        done, total = _span(self.done_s), _span(self.total_s)
        return f"{done} of {total} ({share:.0f}%), {pace}{left}"


def _span(seconds: float) -> str:
    """Whole seconds as the spec writes durations: 1h2m3s, 0s."""
    from gpufleet.spec.base import format_duration

    return format_duration(round(seconds)) if seconds >= 0.5 else "0s"


def show_progress(asked: bool | None) -> bool:
    """On a terminal unless asked not to; elsewhere only when asked."""
    return err_console.is_terminal if asked is None else asked


@contextmanager
def catch_up(what: str, total_s: float, asked: bool | None = None) -> Iterator[Callable[[float], None]]:
    """A callback taking the simulated seconds done, showing them on stderr as `show_progress` decides: a bar on a
    terminal, a line every LINE_EVERY_S elsewhere (and a last one when done)."""
    state = CatchUp(total_s)
    if not show_progress(asked):
        yield state.update
        return
    if err_console.is_terminal:
        from rich.progress import BarColumn, Progress, TextColumn

        columns = (
            TextColumn("[bold]simulating[/bold] {task.description}"),
            BarColumn(),
            TextColumn("{task.fields[say]}"),
        )
        with Progress(*columns, console=err_console, transient=True) as bar:
            task = bar.add_task(what, total=max(total_s, 1.0), say="")

            def redraw(done_s: float) -> None:
                state.update(done_s)
                bar.update(task, completed=done_s, say=state.line())

            yield redraw
        return
    said = [state.started]

    def say(done_s: float) -> None:
        state.update(done_s)
        if state.clock() - said[0] >= LINE_EVERY_S:
            said[0] = state.clock()
            err_console.print(f"simulating {what}: {state.line()}", markup=False, highlight=False)

    yield say
    err_console.print(f"simulated {what}: {state.line()}", markup=False, highlight=False)
