"""``python -m tools.release``: the commands a run of the draining release is made of.

Each subcommand is one step of the release workflow (``--help`` lists them); the logic is
``tools.releasing``'s, this module parses and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.core.errors import cli
from tools.core.errors import PlanError
from tools.releasing import kernelstore as store
from tools.releasing.options import ABOUT, COMMANDS, HELP, SOURCES
from tools.releasing.publish import ledger_tags, releases_to_index, upload_release
from tools.releasing.steps import (Sources, api_from_env, choose_batch, count_attempts,
                                   download_artifacts, fetch_needed, job_env, planned_keys,
                                   read_site, write_batch)
from tools.sitegen.ledger_file import load_ledger_document

def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.release``."""
    ap = argparse.ArgumentParser(prog="python -m tools.release", description="The commands a run "
                                 "of the draining release is made of (the workflows run them).")
    sub = ap.add_subparsers(dest="command", required=True)
    for name, options in COMMANDS.items():
        p = sub.add_parser(name, help=ABOUT[name], description=ABOUT[name])
        for flag, kw in (o for opt in options for o in (SOURCES if opt == "src" else [opt])):
            p.add_argument(flag, **{"help": HELP.get(flag), **kw})
    return ap


def _csv(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def _run(a: argparse.Namespace) -> list[str]:
    """The command's work; the lines it prints."""
    if a.command in ("batch", "attempts", "kernels"):
        src = Sources(a.recipes, a.table, a.runners, a.limits)
    if a.command == "batch":
        changed = None
        if a.changed_files:
            text = sys.stdin.read() if a.changed_files == "-" else Path(a.changed_files).read_text()
            changed = text.splitlines()
        pending = [line.split("\t", 1)[-1] for line in a.pending.read_text().splitlines()
                   if line.strip()] if a.pending else []
        batch, schedule = choose_batch(
            src, ledger=a.ledger, attempts=a.attempts, changed=changed, pending=pending,
            filters={n: _csv(getattr(a, n)) for n in ("package", "python", "cuda", "torch",
                                                      "platform")},
            say=lambda line: print(f"::warning title=batch capped::{line}" if a.github_output
                                   and line.startswith("capped") else line, file=sys.stderr),
            kernel_store=a.kernel_store)
        return [write_batch(batch, schedule, plan_out=a.plan_out, github_output=a.github_output,
                            summary=a.summary, pending=len(pending))]
    if a.command == "attempts":
        return [count_attempts(src, attempts=a.attempts, document=json.loads(a.plan.read_text()),
                               reports=a.reports, report_url=a.report_url,
                               reports_out=a.reports_out)]
    if a.command == "entry":
        return job_env(json.loads(a.plan.read_text()), a.id)
    if a.command == "fetch-needed":
        return fetch_needed(json.loads(a.plan.read_text()), a.id, a.dir)
    api = api_from_env(a.limits)
    if a.command == "kernels":
        return _kernels(a, api, src)
    if a.command == "site":
        return read_site(api, a.repo, a.dir, a.repo_ledger, a.github_output)
    if a.command == "artifacts":
        return download_artifacts(api, a.repo, a.run_id, json.loads(a.plan.read_text()), a.what,
                                  a.dir, a.id)
    if a.command == "upload":
        files = sorted(p for p in a.dir.iterdir()
                       if p.is_file() and p.name.endswith((".whl", ".whl.metadata")))
        done = upload_release(api, a.repo, a.tag, a.target, files, a.notes.read_text())
        return [f"{done.tag}: sent {done.sent}, {done.kept} already there; {api.made} "
                f"requests, {api.waited_s:.0f} s waited for the limits"]
    doc = load_ledger_document(a.ledger)
    return [f"{tag}\t{name}" for tag, wheels in
            releases_to_index(api, a.repo, set(doc.files) | set(doc.removed), ledger_tags(doc))
            for name in wheels]


def _kernels(a: argparse.Namespace, api, src: Sources) -> list[str]:
    """``kernels ACTION``: the kernel store (``tools.releasing.kernelstore``)."""
    wants = {"pull": ("key", "dir"), "push": ("dir",) + (("plan",) if a.run_id else ())}
    missing = [f"--{n.replace('_', '-')}" for n in wants.get(a.action, ()) if not getattr(a, n)]
    if missing:
        raise PlanError(f"kernels {a.action} needs {' and '.join(missing)}",
                        hint="python -m tools.release kernels --help")
    if a.action == "pull":
        return store.pull(api, a.repo, a.key, a.dir, a.tag, a.shard)
    if a.action == "push" and a.run_id:
        return store.push_run(api, a.repo, a.run_id, json.loads(a.plan.read_text()), a.dir,
                              a.tag)
    if a.action == "push":
        return [store.push(api, a.repo, cache, a.tag) for cache in store.shard_caches(a.dir)]
    if a.action == "prune":
        shards = [j for name, jobs in json.loads(a.plan.read_text())["stages"].items()
                  if name.startswith("shards") for j in jobs] if a.plan else []
        return store.prune(api, a.repo, planned_keys(src), len(shards), a.tag)
    listing = store.list_store(api, a.repo, a.tag)
    if a.out:
        a.out.write_text(json.dumps(listing.to_json(a.repo, a.tag), indent=1))
    return [f"{e.name}\t{e.bytes}\t{e.created}" for e in listing.entries] + [
        f"kernel store {a.repo} {a.tag}: {len(listing.entries)} entries, "
        f"{sum(e.bytes for e in listing.entries)} bytes, {len(listing.strays)} stray assets"]


@cli
def main(argv: list[str] | None = None) -> int:
    """Run one of the release's commands (see the module docstring)."""
    lines = _run(parser().parse_args(argv))
    # "\n", not Windows' "\r\n": `entry`'s lines go into $GITHUB_ENV, where a "\r" would end
    # up in the value (CELL_ID="...\r") on a Windows runner
    if hasattr(sys.stdout, "reconfigure"):  # a captured stdout (tests) has no line ends to set
        sys.stdout.reconfigure(newline="\n")
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
