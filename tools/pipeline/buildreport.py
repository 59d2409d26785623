"""The build report as a type: what ``<work>/<cell id>/report.json`` holds, written and read here.

Every backend fills one :class:`BuildReport` (``tools.pipeline.report.reporting`` adds the steps,
the time and the error however the build ends) and writes it with :meth:`BuildReport.to_json`;
the readers (the front page's "what is missing", the release's failed tries) read it back with
:func:`read_report`, which checks the schema version and the shape and names the file when
either is wrong. The JSON keeps the keys the workflows and readers have always used; ``schema``
says which version of this shape a file is. A file without ``schema`` is refused like any other
wrong version: reports are read back only by the run that wrote them (its own artifacts), never
from an older run, so there is no older shape to accept.

Open-ended parts (a step's details, the shard caches read, the per-unit cache results) are
:data:`JSON` values, not ``Any``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal, Union, get_args

from tools.core.errors import PlanError
from tools.pipeline.shardcache import ShardResult

#: A JSON value: what a report's open-ended parts may hold.
JSON = Union[str, int, float, bool, None, list["JSON"], dict[str, "JSON"]]
#: The version of the report's shape; a reader refuses any other.
SCHEMA_VERSION = 1

#: How a build ended: ``planned`` is a dry run's (nothing built).
Verdict = Literal["passed", "failed", "planned"]
#: How a step ended (``pending``: it never finished, e.g. the process was stopped).
StepStatus = Literal["pending", "ok", "failed"]
#: The backend that built the cell (None: no backend ran, as in a failed try's summary).
BackendName = Literal["host", "container"]


class ReportError(PlanError):
    """A build report that isn't one this code reads: not JSON, another schema version, or a
    field of the wrong shape."""


@dataclass
class Step:
    """One timed pipeline step in the report."""

    name: str
    seconds: float = 0.0
    status: StepStatus = "pending"
    detail: dict[str, JSON] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportedError:
    """The error that stopped a build: its kind (``compile``, ``toolchain`` ...) and message."""

    kind: str
    message: str

    def line(self) -> str:
        """``<kind> error: <message>``, as the command line prints it."""
        return f"{self.kind} error: {self.message}"


@dataclass
class ReportedCache:
    """What the compiler cache did for a build's compile (the container's, from its result)."""

    tool: str
    dir: str
    hits: int
    direct_hits: int
    preprocessed_hits: int
    misses: int
    #: Each unit's result sorted against the shard caches read (``shardcache.sort_results``).
    per_unit: dict[str, JSON] | None = None


@dataclass
class BuildReport:
    """A build's report (see the module docstring); fields left None are not written."""

    cell: str
    backend: BackendName | None
    verdict: Verdict = "failed"
    why: str = ""
    archs: list[str] = field(default_factory=list)
    label: str = ""
    #: The container's image, limits (``memory_gib``, ``cpus``) and workarounds.
    image: str | None = None
    limits: dict[str, int] | None = None
    workarounds: list[str] | None = None
    #: The wheels of the cells this one needs.
    needs: list[str] | None = None
    #: The published wheel (a passed build).
    wheel: str | None = None
    dry_run: bool | None = None
    #: The shell script that does what the container backend does.
    script: str | None = None
    engine: str | None = None
    plat: str | None = None
    #: What this machine adds (``tools.backends.machine.ImageFacts.report``).
    machine: dict[str, JSON] | None = None
    #: The shard caches offered to the build and which were read (``ShardUse.describe``).
    shards: dict[str, JSON] | None = None
    ccache: ReportedCache | None = None
    #: A kernel shard's outcome, when the build was a shard's.
    shard: ShardResult | None = None
    #: Where the report of the failed try is (a failed try's summary, ``tools.releasing``).
    report_url: str | None = None
    error: ReportedError | None = None
    steps: list[Step] = field(default_factory=list)
    seconds: float = 0.0
    schema: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, JSON]:
        """The report as ``report.json`` holds it (None fields left out)."""
        out: dict[str, JSON] = {"schema": self.schema}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "schema" or value is None:
                continue
            if f.name == "steps":
                value = [{"name": s.name, "seconds": s.seconds, "status": s.status,
                          "detail": s.detail} for s in value]
            elif f.name == "shard":
                value = value.to_json()
            elif f.name in ("ccache", "error"):
                value = {k.name: getattr(value, k.name) for k in fields(value)
                         if getattr(value, k.name) is not None}
            out[f.name] = value
        return out

    @classmethod
    def from_json(cls, data: object, *, where: str) -> BuildReport:
        """The report in ``data`` (``report.json`` read); ReportError naming ``where``, the
        field and the rule when it isn't this schema version's shape."""
        check = _Checker(where)
        if not isinstance(data, dict):
            raise check.fail("the file", "must be a JSON object (a build report)")
        if data.get("schema") != SCHEMA_VERSION:
            raise ReportError(f"{where}: schema {data.get('schema')!r}: this code reads build "
                              f"reports of schema {SCHEMA_VERSION}",
                              hint="read it with the version of the tools that wrote it, or "
                                   "build the cell again")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise check.fail(unknown[0], f"is not a field of a schema {SCHEMA_VERSION} report")
        return cls(
            cell=check.typed(data, "cell", str), backend=check.choice(data, "backend",
                                                                      BackendName, None),
            verdict=check.choice(data, "verdict", Verdict, "failed"),
            why=check.typed(data, "why", str, ""),
            archs=check.strings(data, "archs") or [], label=check.typed(data, "label", str, ""),
            image=check.typed(data, "image", str, None),
            limits=check.typed(data, "limits", dict, None),
            workarounds=check.strings(data, "workarounds"), needs=check.strings(data, "needs"),
            wheel=check.typed(data, "wheel", str, None),
            dry_run=check.typed(data, "dry_run", bool, None),
            script=check.typed(data, "script", str, None),
            engine=check.typed(data, "engine", str, None),
            plat=check.typed(data, "plat", str, None),
            machine=check.typed(data, "machine", dict, None),
            shards=check.typed(data, "shards", dict, None),
            ccache=check.record(data, "ccache", ReportedCache),
            shard=(ShardResult.from_json(data["shard"], where=f"{where}: shard")
                   if data.get("shard") is not None else None),
            report_url=check.typed(data, "report_url", str, None),
            error=check.record(data, "error", ReportedError),
            steps=[check.step(s, i) for i, s in enumerate(check.typed(data, "steps", list, []))],
            seconds=float(check.typed(data, "seconds", (int, float), 0.0)))


class _Checker:
    """The field checks of :meth:`BuildReport.from_json`, each error naming the file."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, name: str, rule: str) -> ReportError:
        return ReportError(f"{self.where}: {name} {rule}",
                           hint="the file was not written by this version of the tools' "
                                "build report code: build the cell again")

    def typed(self, data: dict, name: str, kind, default=...):
        if name not in data or data[name] is None:
            if default is ...:
                raise self.fail(name, "is missing")
            return default
        value = data[name]
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise self.fail(name, f"must be {getattr(kind, '__name__', 'a number')}, not "
                                  f"{type(value).__name__}")
        return value

    def choice(self, data: dict, name: str, literal, default):
        value = data.get(name, default)
        allowed = get_args(literal)
        if value is not default and value not in allowed:
            raise self.fail(name, f"is {value!r}: one of {', '.join(allowed)}")
        return value

    def strings(self, data: dict, name: str) -> list[str] | None:
        value = self.typed(data, name, list, None)
        if value is not None and not all(isinstance(v, str) for v in value):
            raise self.fail(name, "must be a list of strings")
        return value

    def record(self, data: dict, name: str, cls):
        value = self.typed(data, name, dict, None)
        if value is None:
            return None
        try:
            return cls(**value)
        except TypeError as exc:
            raise self.fail(name, f"has the wrong fields ({exc})") from None

    def step(self, raw: object, index: int) -> Step:
        name = f"steps[{index}]"
        if not isinstance(raw, dict) or set(raw) != {"name", "seconds", "status", "detail"}:
            raise self.fail(name, "must be an object with name, seconds, status and detail")
        return Step(self.typed(raw, "name", str), float(self.typed(raw, "seconds", (int, float))),
                    self.choice(raw, "status", StepStatus, "pending"),
                    self.typed(raw, "detail", dict))


def write_report(path: Path, report: BuildReport) -> None:
    """Write the build report JSON atomically (a value JSON has no form for, a path, is
    written as its text)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_text(json.dumps(report.to_json(), indent=2, default=str) + "\n")
    os.replace(tmp, path)


def read_report(path: Path) -> BuildReport:
    """The build report in ``path``; ReportError naming the file when it is missing, not JSON
    or not a report of this schema version."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportError(f"{path}: no build report there",
                          hint="the build failed before it wrote one, or was stopped") from None
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path}: not a JSON build report ({exc})",
                          hint="build the cell again") from None
    return BuildReport.from_json(data, where=str(path))
