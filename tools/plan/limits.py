"""The service a release runs on: ``recipes/limits.yaml`` (or another file of its shape).

Two sections. ``limits``: GitHub's, each a ``value`` with its ``source`` (where the figure is
documented): jobs per matrix, job hours, job outputs (UTF-16 bytes), release assets, artifacts,
REST and content-creating requests, cache, runner disk, the account's concurrent jobs.
``policy``: the project's rules for draining the backlog, each a ``value`` with its ``reason``:
the priority order and the packages' ranking, how many times a failed cell is tried, the share of
the request limits the release's commands use, the disk kept back, the cron period, a pull
request's sample, each platform's parallel jobs, the kernel store's byte budget. The schedule (``tools.releasing.schedule``) cuts
the backlog into runs that keep every limit; the release's commands pace themselves by them.

Read strictly, like the runner file: every problem (an unknown or missing key, a figure of the
wrong type or out of range, a missing source or reason) names the file, the key, the rule and the
fix, all of them in one error. A fork with a paid plan or self-hosted runners edits a copy
(``--limits FILE``; in CI the repository variable ``CUWHEELS_LIMITS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tools import RECIPES_DIR
from tools.core.errors import PlanError
from tools.core.variant import PLATFORM_PART
from .schema import Problems, load_yaml

#: The limits file the plan reads when no other is named.
LIMITS_PATH = RECIPES_DIR / "limits.yaml"
LIMITS_SCHEMA = 1

#: Each limit's name and type: whole numbers (counts, bytes, hours).
LIMIT_FIELDS = {"jobs_per_matrix": int, "job_hours": (int, float), "job_output_bytes": int,
                "run_output_bytes": int, "assets_per_release": int, "asset_bytes": int,
                "artifacts_per_page": int, "artifacts_per_run": int,
                "rest_requests_per_hour": int, "content_requests_per_hour": int,
                "content_requests_per_minute": int, "cache_bytes": int,
                "disk_root_gib": (int, float), "disk_mnt_gib": (int, float),
                "concurrent_jobs": int}
#: The sort keys ``policy.order`` may name (tools.releasing.schedule sorts compile groups by them).
ORDER_KEYS = ("torch", "package", "cuda", "python", "platform")
POLICY_FIELDS = {"packages": list, "order": list, "tries": int, "rate_share": (int, float),
                 "disk_reserve_gib": (int, float), "cron_hours": (int, float),
                 "pull_request_cells": int, "max_parallel": dict, "kernel_store_bytes": int}


@dataclass(frozen=True)
class Limits:
    """GitHub's limits (see :data:`LIMIT_FIELDS`; bytes are bytes, hours hours) and the drain
    policy, read from :attr:`path`."""

    path: Path
    jobs_per_matrix: int
    job_hours: float
    job_output_bytes: int
    run_output_bytes: int
    assets_per_release: int
    asset_bytes: int
    artifacts_per_page: int
    artifacts_per_run: int
    rest_requests_per_hour: int
    content_requests_per_hour: int
    content_requests_per_minute: int
    cache_bytes: int
    disk_root_gib: float
    disk_mnt_gib: float
    concurrent_jobs: int
    packages: tuple[str, ...]
    order: tuple[str, ...]
    tries: int
    rate_share: float
    disk_reserve_gib: float
    cron_hours: float
    pull_request_cells: int
    max_parallel: dict[str, int]
    #: The kernel store's byte budget (``tools.releasing.kernelstore``: pruned to it).
    kernel_store_bytes: int

    @property
    def wheel_disk_bytes(self) -> int:
        """The bytes of wheels a run's release and publish jobs may hold: the larger of the
        runner's disks (they keep the wheels there) less the reserve."""
        return int((max(self.disk_root_gib, self.disk_mnt_gib) - self.disk_reserve_gib) * 2**30)

    def paced(self, per_hour: int) -> float:
        """Requests per hour the release's commands allow themselves of a limit of ``per_hour``."""
        return per_hour * self.rate_share


def _section(p: Problems, raw: object, name: str, fields: dict, note: str) -> dict:
    """The values of one section, each ``{value, <note>}`` checked for its type and note."""
    got = p.mapping(raw, name, dict.fromkeys(fields, dict))
    values: dict = {}
    for key, kind in fields.items():
        item = (got or {}).get(key)
        if item is None:
            continue
        where = f"{name}.{key}"
        entry = p.entry(item, where, {"value": kind, note: str})
        if entry is None:
            continue
        if note == "source" and len(entry[note].strip()) < 8:
            p.add(f"{where}.source", "says nowhere the figure comes from",
                  "name the page or report the figure is read from")
        else:
            p.reason(entry[note], f"{where}.{note}")
        values[key] = entry["value"]
    return values


def parse_limits(raw: object, path: Path) -> Limits:
    """The limits file's data (``raw``, read from ``path``) as :class:`Limits`; PlanError listing
    every problem."""
    p = Problems(path, PlanError)
    top = p.entry(raw, "", {"schema": int, "limits": dict, "policy": dict})
    if top is None:
        p.raise_if_any()
        raise PlanError(f"{path}: not a limits file")
    if top["schema"] != LIMITS_SCHEMA:
        p.add("schema", f"must be {LIMITS_SCHEMA}",
              f"this checkout reads limits files of schema {LIMITS_SCHEMA}")
    limits = _section(p, top["limits"], "limits", LIMIT_FIELDS, "source")
    policy = _section(p, top["policy"], "policy", POLICY_FIELDS, "reason")
    for key, value in limits.items():
        if value <= 0:
            p.add(f"limits.{key}.value", f"{value} is not a limit", "a figure above 0")
    if "packages" in policy:
        names = p.strings(policy["packages"], "policy.packages.value")
        if names is not None and len(set(names)) != len(names):
            p.add("policy.packages.value", "names a recipe twice", "list each recipe once")
    if "order" in policy:
        order = p.strings(policy["order"], "policy.order.value") or ()
        wrong = [k for k in order if k not in ORDER_KEYS]
        if wrong or sorted(order) != sorted(set(order)):
            p.add("policy.order.value", f"{order!r} is not an order of the sort keys",
                  f"list each of {', '.join(ORDER_KEYS)} at most once")
    for key in ("tries", "pull_request_cells", "kernel_store_bytes"):
        if key in policy and policy[key] < 1:
            p.add(f"policy.{key}.value", f"{policy[key]} is less than 1", "at least 1")
    if "rate_share" in policy and not 0 < policy["rate_share"] <= 1:
        p.add("policy.rate_share.value", f"{policy['rate_share']} is not a share",
              "a number above 0, at most 1")
    if "cron_hours" in policy and policy["cron_hours"] <= 0:
        p.add("policy.cron_hours.value", "must be more than 0")
    disk = max(limits.get("disk_root_gib", 0), limits.get("disk_mnt_gib", 0))
    if "disk_reserve_gib" in policy and not 0 <= policy["disk_reserve_gib"] < disk:
        p.add("policy.disk_reserve_gib.value", f"{policy['disk_reserve_gib']} GiB leaves no room "
              f"for wheels on the {disk} GiB disk", "keep back less than the larger disk")
    parallel = policy.get("max_parallel") or {}
    for name, jobs in parallel.items():
        if name not in PLATFORM_PART:
            p.add(f"policy.max_parallel.value.{name}", "is not a wheel platform",
                  f"use one of: {', '.join(PLATFORM_PART)}")
        elif p.typed(jobs, f"policy.max_parallel.value.{name}", int) and jobs < 1:
            p.add(f"policy.max_parallel.value.{name}", "must be at least 1")
    p.raise_if_any()
    return Limits(path=path, **limits, packages=tuple(policy["packages"]),
                  order=tuple(policy["order"]), tries=policy["tries"],
                  rate_share=float(policy["rate_share"]),
                  disk_reserve_gib=float(policy["disk_reserve_gib"]),
                  cron_hours=float(policy["cron_hours"]),
                  pull_request_cells=policy["pull_request_cells"], max_parallel=dict(parallel),
                  kernel_store_bytes=policy["kernel_store_bytes"])


def load_limits(path: Path = LIMITS_PATH) -> Limits:
    """Read and check a limits file (:func:`parse_limits`)."""
    return parse_limits(load_yaml(path, PlanError), path)
