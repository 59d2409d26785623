"""``python -m tools.release``: the commands a run of the draining release is made of.

- ``batch``: the plan job. The backlog (planned cells the ledger doesn't publish, less those
  given up on) is scheduled (``tools.releasing.schedule``) and its first run becomes this run's
  batch: the plan artifact (every job's full entry), the job's outputs (matrices of ids and
  runners, counts) and the step summary (the whole schedule, for people).
- ``entry``: a job's own entry from the plan artifact, as ``KEY=value`` lines for
  ``$GITHUB_ENV``.
- ``fetch-needed``: the published wheels a cell needs (torch_scatter's for torch_sparse), by
  the ledger's URL, each checked against its sha256.
- ``upload``: this run's release, through the paced, backed-off API (``tools.releasing.publish``).
- ``to-index``: the releases whose wheels the ledger lacks (``tag<TAB>file`` lines).
- ``artifacts``: this run's wheels, reports or a cell's shard caches, listed page by page and
  downloaded by id (``tools.releasing.artifacts``), the count checked against the plan.
- ``attempts``: the attempts file after this run (a failed cell's try counted, a built one
  dropped), from the run's build reports.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import urllib.request
from pathlib import Path

from tools import RECIPES_DIR, ROOT
from tools.core.errors import PlanError, cli
from tools.plan.limits import LIMITS_PATH, load_limits
from tools.plan.matrix import changed_only, plan, require_known, select
from tools.plan.recipe import load_all
from tools.plan.runners import load_runners
from tools.plan.table import TABLE_PATH, load_table
from tools.releasing.artifacts import fetch
from tools.releasing.backlog import fingerprints, load_attempts, record, write_attempts
from tools.releasing.batch import github_output_text, job_entry
from tools.releasing.ghapi import Api, ApiError
from tools.releasing.publish import releases_to_index, upload_release
from tools.releasing.schedule import as_markdown, drain, first_batch
from tools.sitegen.ledger import load_ledger, load_ledger_document

#: The fields of a job's entry that reach its steps' environment, and their names there, per
#: kind of job (the called workflows' names).
ENV_FIELDS = {
    "cell": {"id": "CELL_ID", "group": "GROUP", "shards": "SHARDS", "image": "IMAGE",
             "python": "CELL_PYTHON", "cuda": "CELL_CUDA", "ccache_prefix": "CCACHE_PREFIX",
             "budget_minutes": "BUDGET_MINUTES", "ccache_save_bytes": "CCACHE_SAVE_BYTES"},
    "shard": {"id": "SHARD_ID", "group": "GROUP", "shard": "SHARD", "of": "OF",
              "image": "IMAGE", "cuda": "CELL_CUDA", "cache_key": "CACHE_KEY",
              "budget_minutes": "BUDGET_MINUTES", "ccache_save_bytes": "CCACHE_SAVE_BYTES"}}


def _csv(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def _common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--recipes", type=Path, default=RECIPES_DIR)
    ap.add_argument("--table", type=Path, default=TABLE_PATH)
    ap.add_argument("--runners", type=Path)
    ap.add_argument("--limits", type=Path, default=LIMITS_PATH)


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.release``."""
    ap = argparse.ArgumentParser(prog="python -m tools.release", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("batch", help="this run's batch: the plan artifact, outputs, summary")
    _common(b)
    b.add_argument("--ledger", type=Path, default=ROOT / "index" / "ledger.json")
    b.add_argument("--attempts", type=Path)
    for name in ("package", "python", "cuda", "torch", "platform"):
        b.add_argument(f"--{name}", help=f"comma-separated {name} filter")
    b.add_argument("--changed-files", metavar="FILE",
                   help="a pull request: only recipes touched by these paths (- for stdin), at "
                        "most the policy's pull_request_cells, ledger ignored")
    b.add_argument("--plan-out", type=Path, required=True, help="the plan artifact to write")
    b.add_argument("--github-output", type=Path, help="append the outputs here")
    b.add_argument("--summary", type=Path, help="append the step summary here")
    e = sub.add_parser("entry", help="a job's entry as KEY=value lines for $GITHUB_ENV")
    e.add_argument("--plan", type=Path, required=True)
    e.add_argument("--id", required=True)
    f = sub.add_parser("fetch-needed", help="download the published wheels a cell needs")
    f.add_argument("--plan", type=Path, required=True)
    f.add_argument("--id", required=True)
    f.add_argument("--dir", type=Path, required=True)
    u = sub.add_parser("upload", help="this run's release, paced and backed off")
    u.add_argument("--limits", type=Path, default=LIMITS_PATH)
    u.add_argument("--repo", required=True)
    u.add_argument("--tag", required=True)
    u.add_argument("--target", required=True)
    u.add_argument("--dir", type=Path, required=True)
    u.add_argument("--notes", type=Path, required=True)
    t = sub.add_parser("to-index", help="the releases' wheels the ledger lacks")
    t.add_argument("--limits", type=Path, default=LIMITS_PATH)
    t.add_argument("--repo", required=True)
    t.add_argument("--ledger", type=Path, required=True)
    r = sub.add_parser("artifacts", help="this run's artifacts, listed page by page, by id")
    r.add_argument("--limits", type=Path, default=LIMITS_PATH)
    r.add_argument("--repo", required=True)
    r.add_argument("--run-id", required=True)
    r.add_argument("--plan", type=Path, required=True, help="this run's plan artifact")
    r.add_argument("--what", choices=("wheels", "reports", "shards"), required=True,
                   help="wheels: every cell's wheel, into --dir; reports: each cell's report, "
                        "into --dir/<cell>/; shards: the shard caches of cell --id, into "
                        "--dir/<shard>/")
    r.add_argument("--id", help="the cell whose shard caches --what shards downloads")
    r.add_argument("--dir", type=Path, required=True)
    a = sub.add_parser("attempts", help="the attempts file after this run")
    _common(a)
    a.add_argument("--attempts", type=Path, required=True, help="read (if there) and written")
    a.add_argument("--plan", type=Path, required=True, help="this run's plan artifact")
    a.add_argument("--reports", type=Path, required=True, help="<cell>/report.json of this run")
    a.add_argument("--report-url", default="", help="where this run's reports are (its page)")
    a.add_argument("--reports-out", type=Path,
                   help="write each attempted cell without a report there a report of its last "
                        "error (<dir>/<cell>/report.json), for the front page's what is missing")
    return ap


def _batch(args: argparse.Namespace) -> int:
    table = load_table(args.table)
    recipes = load_all(args.recipes, table)
    cells = plan(recipes, table)
    runners = load_runners(args.runners or args.recipes / "runners.yaml",
                           {r.package for r in recipes})
    limits = load_limits(args.limits)
    packages = _csv(args.package)
    entries, attempts = [], {}
    if not args.changed_files:
        entries = list(load_ledger(args.ledger).values())
        attempts = load_attempts(args.attempts)
    else:
        text = sys.stdin.read() if args.changed_files == "-" else Path(args.changed_files).read_text()
        packages = changed_only(packages, text.splitlines(), {c.package for c in cells})
        # a pull request builds its change, published or not: no ledger, no attempts
        print(f"changed recipes: {', '.join(packages) or 'none'}", file=sys.stderr)
    require_known(packages, cells)
    platforms = _csv(args.platform)
    unknown = sorted(set(platforms or ()) - set(table.platforms))
    if unknown:
        raise PlanError(f"unknown platform(s): {', '.join(unknown)}",
                        hint=f"known: {', '.join(table.platforms)} (recipes/table.yaml platforms:)")
    selected = select(cells, packages=packages, pythons=_csv(args.python), cudas=_csv(args.cuda),
                      torches=_csv(args.torch), default_torch_only=False,
                      platforms=platforms) if packages != [] else []
    if args.changed_files and len(selected) > limits.pull_request_cells:
        capped = (f"capped: {len(selected)} cells changed, a pull request builds the first "
                  f"{limits.pull_request_cells} (recipes/limits.yaml pull_request_cells)")
        print(f"::warning title=batch capped::{capped}" if args.github_output else capped,
              file=sys.stderr)
        selected = selected[:limits.pull_request_cells]
    found = drain(selected, cells, recipes, table, runners, limits, entries, attempts,
                  fingerprints(recipes, args.table, runners.path))
    batch = first_batch(found, cells, recipes, entries)
    document, outputs = batch.document(), batch.outputs()
    args.plan_out.write_text(json.dumps(document, indent=1))
    if args.github_output:
        with args.github_output.open("a") as out:
            out.write(github_output_text(outputs))
    summary = as_markdown(found)
    if args.summary:
        with args.summary.open("a") as out:
            out.write("## The backlog's schedule (this run is run 1)\n\n" + summary + "\n")
    print(summary)
    return 0


def _entry(args: argparse.Namespace) -> int:
    job = job_entry(json.loads(args.plan.read_text()), args.id)
    for key, name in ENV_FIELDS["shard" if "shard" in job else "cell"].items():
        if key not in job:
            continue
        value = job[key]
        text = " ".join(value) if isinstance(value, list) else str(value)
        if "\n" in text or "\r" in text:
            raise PlanError(f"{args.id}: {key} holds a line break", hint="a plan artifact bug")
        print(f"{name}={text}")
    return 0


def _fetch_needed(args: argparse.Namespace) -> int:
    job = job_entry(json.loads(args.plan.read_text()), args.id)
    args.dir.mkdir(parents=True, exist_ok=True)
    for need in job.get("needs_wheels", []):
        name = Path(need["file"]).name
        if name != need["file"] or not name.endswith(".whl"):
            raise PlanError(f"{args.id}: needed file {need['file']!r} is not a wheel's name")
        with urllib.request.urlopen(need["url"], timeout=600) as answer:
            data = answer.read()
        if hashlib.sha256(data).hexdigest() != need["sha256"]:
            raise PlanError(f"{name}: its bytes are not the ones the ledger publishes",
                            hint="the index's file changed: report it")
        (args.dir / name).write_bytes(data)
        print(f"{need['cell']}: {name}")
    return 0


def _api(limits_path: Path) -> Api:
    token = os.environ.get("GH_TOKEN") or os.environ.get("GITHUB_TOKEN")
    if not token:
        raise ApiError("no token: set GH_TOKEN", hint="the workflow passes github.token")
    return Api(os.environ.get("GITHUB_API_URL", "https://api.github.com"), token,
               load_limits(limits_path))


def _upload(args: argparse.Namespace) -> int:
    files = sorted(p for p in args.dir.iterdir()
                   if p.is_file() and p.name.endswith((".whl", ".whl.metadata")))
    api = _api(args.limits)
    done = upload_release(api, args.repo, args.tag, args.target, files, args.notes.read_text())
    print(f"{done.tag}: sent {done.sent}, {done.kept} already there; {api.made} requests, "
          f"{api.waited_s:.0f} s waited for the limits")
    return 0


def _to_index(args: argparse.Namespace) -> int:
    doc = load_ledger_document(args.ledger)
    indexed = set(doc.files) | set(doc.removed)
    for tag, wheels in releases_to_index(_api(args.limits), args.repo, indexed):
        for name in wheels:
            print(f"{tag}\t{name}")
    return 0


def _cell_ids(document: dict) -> list[str]:
    return [j["id"] for name, jobs in document.get("stages", {}).items()
            if name.startswith("cells") for j in jobs]


def _artifacts(args: argparse.Namespace) -> int:
    document = json.loads(args.plan.read_text())
    api = _api(args.limits)
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.what == "shards":
        if not args.id:
            raise PlanError("--what shards needs --id CELL", hint="the cell reading the caches")
        shards = job_entry(document, args.id).get("shards", [])
        found, missing = fetch(api, args.repo, args.run_id, list(shards), args.dir)
        for name in missing:
            print(f"{name}: no cache (the shard failed or was stopped): the build compiles its "
                  "units itself")
    elif args.what == "reports":
        cells = _cell_ids(document)
        found, missing = fetch(api, args.repo, args.run_id, [f"report-{c}" for c in cells],
                               args.dir)
        for name in found:  # <dir>/report-<cell>/report.json -> <dir>/<cell>/report.json
            (args.dir / name).rename(args.dir / name.removeprefix("report-"))
    else:
        cells = _cell_ids(document)
        found, missing = fetch(api, args.repo, args.run_id, [f"wheels-{c}" for c in cells],
                               args.dir, separate=False)
        wheels = list(args.dir.glob("*.whl"))
        if len(wheels) != len(found):
            raise PlanError(f"{len(found)} wheel artifacts held {len(wheels)} wheels",
                            hint="each cell's artifact holds its one wheel")
        for name in missing:
            print(f"{name.removeprefix('wheels-')}: no wheel (its build failed)")
    print(f"{args.what}: {len(found)} downloaded, {len(missing)} missing, "
          f"{api.made} requests")
    return 0


def _attempts(args: argparse.Namespace) -> int:
    table = load_table(args.table)
    recipes = load_all(args.recipes, table)
    cells = {c.id: c for c in plan(recipes, table)}
    runners = load_runners(args.runners or args.recipes / "runners.yaml",
                           {r.package for r in recipes})
    document = json.loads(args.plan.read_text())
    ran = _cell_ids(document)
    results: dict[str, str | None] = {}
    for cell in ran:
        report = args.reports / cell / "report.json"
        if not report.is_file():
            results[cell] = "no build report (the job failed before it wrote one, or was stopped)"
            continue
        try:
            error = json.loads(report.read_text()).get("error")
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            error = "its build report is not a JSON object"
        results[cell] = str(error) if error else None
    before = load_attempts(args.attempts)
    after = record(before, results, fingerprints(recipes, args.table, runners.path), cells,
                   {c: args.report_url for c, e in results.items() if e})
    write_attempts(args.attempts, after)
    limit = load_limits(args.limits).tries
    if args.reports_out:
        for cell, attempt in after.items():
            target = args.reports_out / cell / "report.json"
            if target.exists() or cell not in cells:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            state = "given up until its recipe, the table or the runner file changes" \
                if attempt.tries >= limit else "tried again by the next run"
            target.write_text(json.dumps({
                "cell": cell, "report": attempt.report,
                "error": f"{attempt.error} (failed {attempt.tries} run(s) in a row; {state})"}))
    failed = sum(1 for e in results.values() if e)
    print(f"{len(results)} cells ran, {failed} failed; {len(after)} cells with failed tries")
    return 0


@cli
def main(argv: list[str] | None = None) -> int:
    """Run one of the release's commands (see the module docstring)."""
    args = parser().parse_args(argv)
    return {"batch": _batch, "entry": _entry, "fetch-needed": _fetch_needed, "upload": _upload,
            "to-index": _to_index, "attempts": _attempts, "artifacts": _artifacts}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
