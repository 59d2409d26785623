"""Progress and the build report, shared by the orchestrator, both backends and the finish step.

A build is a list of timed steps: each prints when it starts and how it ended (with the time
since the build began), and lands in the report with its status and details. (The last step of
every backend, the move into the wheelhouse, is tools.pipeline.wheelhouse.publish.) The report
itself is a :class:`tools.pipeline.buildreport.BuildReport`; :func:`reporting` writes it however
the build ends.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from tools.core.errors import CuwheelsError
from tools.pipeline.buildreport import JSON, BuildReport, ReportedError, Step, write_report

__all__ = ["Progress", "Step", "reporting", "reporting_json", "write_report"]


class Progress:
    """Prints which step runs and for how long, and collects the report's steps."""

    def __init__(self, cell_id: str, names: list[str], stream=sys.stderr):
        self.cell_id, self.names, self.stream = cell_id, names, stream
        self.steps: list[Step] = []
        self.start = time.monotonic()

    def _elapsed(self) -> str:
        s = int(time.monotonic() - self.start)
        return f"{s // 60}m{s % 60:02d}s"

    def say(self, text: str) -> None:
        """One line of progress, prefixed with the cell and the total time so far."""
        print(f"[{self.cell_id} {self._elapsed()}] {text}", file=self.stream, flush=True)

    def run(self, name: str, func, *args, **kwargs):
        """Run one step, timing it; a failure is recorded and re-raised."""
        step = Step(name)
        self.steps.append(step)
        index = self.names.index(name) + 1 if name in self.names else len(self.steps)
        self.say(f"step {index}/{len(self.names)}: {name} ...")
        t0 = time.monotonic()
        try:
            result = func(step, *args, **kwargs)
        except BaseException as exc:
            step.seconds = round(time.monotonic() - t0, 2)
            step.status = "failed"
            step.detail.setdefault("error", str(exc))
            self.say(f"step {index}/{len(self.names)}: {name} FAILED after {step.seconds:.0f}s")
            raise
        step.seconds = round(time.monotonic() - t0, 2)
        step.status = "ok"
        self.say(f"step {index}/{len(self.names)}: {name} ok ({step.seconds:.1f}s)")
        return result


@contextmanager
def reporting(path: Path, report: BuildReport, progress: Progress) -> Iterator[None]:
    """Write the build report to ``path`` however the build ends: the steps with their times and
    details, and the error (kind and message) when one stopped it."""
    try:
        yield
    except CuwheelsError as exc:
        report.error = ReportedError(exc.kind, str(exc))
        raise
    finally:
        report.steps = list(progress.steps)
        report.seconds = round(time.monotonic() - progress.start, 1)
        write_report(path, report)
        progress.say(f"report: {path}")


@contextmanager
def reporting_json(path: Path, data: dict[str, JSON], progress: Progress) -> Iterator[None]:
    """:func:`reporting` for a report that is not a build report (the probe's ``probe.json``,
    ``tools.probing.probe_build``): ``data`` gets the steps, the time and the error."""
    try:
        yield
    except CuwheelsError as exc:
        data["error"] = {"kind": exc.kind, "message": str(exc)}
        raise
    finally:
        data["steps"] = [asdict(s) for s in progress.steps]
        data["seconds"] = round(time.monotonic() - progress.start, 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
        tmp.replace(path)
        progress.say(f"report: {path}")
