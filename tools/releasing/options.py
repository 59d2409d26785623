"""The options of ``python -m tools.release``'s subcommands, as data: each subcommand's flags and
argparse keywords, what it does, and the help of the options that mean the same everywhere.
"""

from __future__ import annotations

from pathlib import Path

from tools import RECIPES_DIR, ROOT
from tools.plan.limits import LIMITS_PATH
from tools.plan.table import TABLE_PATH
from .kernelstore import STORE_TAG, shard_arg

#: Each command's options: (flags, argparse keywords); "src" adds the plan's source files.
COMMANDS = {
    "batch": ["src", ("--ledger", {"type": Path, "default": ROOT / "index" / "ledger.json",
                                 "metavar": "FILE"}),
              ("--attempts", {"type": Path}),
              ("--pending", {"type": Path, "help": "tag<TAB>wheel lines of complete releases "
                             "the ledger lacks yet (what to-index prints): counted published"}),
              *((f"--{n}", {"help": f"comma-separated {n} filter"})
                for n in ("package", "python", "cuda", "torch", "platform")),
              ("--changed-files", {"metavar": "FILE", "help": "a pull request's changed paths "
                                   "(- for stdin): its recipes, capped, published or not"}),
              ("--kernel-store", {"type": Path, "metavar": "FILE"}),
              ("--plan-out", {"type": Path, "required": True}),
              ("--github-output", {"type": Path}), ("--summary", {"type": Path})],
    "entry": [("--plan", {"type": Path, "required": True}), ("--id", {"required": True})],
    "fetch-needed": [("--plan", {"type": Path, "required": True}), ("--id", {"required": True}),
                     ("--dir", {"type": Path, "required": True})],
    "artifacts": [("--limits", {"type": Path, "default": LIMITS_PATH}),
                  ("--repo", {"required": True}), ("--run-id", {"required": True}),
                  ("--plan", {"type": Path, "required": True}),
                  ("--what", {"choices": ("wheels", "reports", "shards"), "required": True}),
                  ("--id", {"help": "the cell job whose shard caches to download"}),
                  ("--dir", {"type": Path, "required": True})],
    "upload": [("--limits", {"type": Path, "default": LIMITS_PATH}),
               ("--repo", {"required": True}), ("--tag", {"required": True}),
               ("--target", {"required": True}), ("--dir", {"type": Path, "required": True}),
               ("--notes", {"type": Path, "required": True})],
    "site": [("--limits", {"type": Path, "default": LIMITS_PATH}),
             ("--repo", {"required": True}), ("--dir", {"type": Path, "required": True}),
             ("--repo-ledger", {"type": Path, "default": ROOT / "index" / "ledger.json"}),
             ("--github-output", {"type": Path})],
    "to-index": [("--limits", {"type": Path, "default": LIMITS_PATH}),
                 ("--repo", {"required": True}), ("--ledger", {"type": Path, "required": True, "metavar": "FILE"})],
    "kernels": ["src", ("action", {"choices": ("list", "pull", "push", "prune")}),
                ("--repo", {"required": True}), ("--tag", {"default": STORE_TAG, "help": "the store's release tag"}),
                ("--out", {"type": Path, "metavar": "FILE"}), ("--key", {}),
                ("--shard", {"type": shard_arg, "metavar": "K/N"}),
                ("--dir", {"type": Path, "help": "pull: where the shard caches go; push: a "
                           "shard cache, or a folder of them (or, with --run-id, scratch)"}),
                ("--run-id", {"help": "push: this run's shard caches, from its artifacts"}),
                ("--plan", {"type": Path, "help": "the run's plan artifact: push its shards "
                            "(--run-id); prune: keep room for them"})],
    "attempts": ["src", ("--attempts", {"type": Path, "required": True}),
                 ("--plan", {"type": Path, "required": True}),
                 ("--reports", {"type": Path, "required": True}), ("--report-url", {"default": ""}),
                 ("--reports-out", {"type": Path})],
}
#: What each subcommand does, and the help of the options that share one meaning everywhere.
ABOUT = {"batch": "choose this run's batch; write the plan artifact, outputs and summary",
         "entry": "a job's entry of the plan, as $GITHUB_ENV lines",
         "fetch-needed": "download the published wheels a cell needs",
         "artifacts": "download this run's wheels, reports or shard caches",
         "upload": "upload the run's wheels to its release, paced and backed off",
         "site": "read the live site's address, ledger and failed tries",
         "to-index": "print the released wheels the ledger lacks (tag<TAB>wheel)",
         "kernels": "the kernel store: list, pull, push or prune finished shard caches",
         "attempts": "write the failed tries after the run"}
HELP = {"--recipes": "recipes directory", "--table": "compatibility table",
        "--runners": "runners file (default: runners.yaml in --recipes)",
        "--limits": "GitHub's limits and the drain policy", "--ledger": "the ledger: what is published",
        "--attempts": "the failed tries per cell (attempts.json)",
        "--plan-out": "where the plan artifact goes", "--plan": "the plan artifact (JSON)",
        "--github-output": "append the step's outputs here ($GITHUB_OUTPUT)",
        "--summary": "write the summary for people here", "--id": "a job id of the plan (fetch-needed: a cell id)",
        "--dir": "the directory to write into (or, for upload, to send)",
        "--repo": "owner/name of the GitHub repository", "--run-id": "the workflow run's id",
        "--what": "which artifacts", "--tag": "the release's tag",
        "--target": "the commit the release's tag points at", "--notes": "release notes (FILE)",
        "--repo-ledger": "the committed ledger, for a site that has none yet",
        "--reports": "the cells' build reports (<DIR>/<cell>/report.json)",
        "--report-url": "where the run's reports can be read, for the front page",
        "--reports-out": "write a report for each failed cell that has none here",
        "--kernel-store": "the kernel store's listing (kernels list --out): no shards for what "
                          "it covers",
        "action": "list the entries, pull a key's, push shard caches, or prune the store",
        "--out": "list: write the listing (JSON) here", "--key": "pull: the group key",
        "--shard": "pull: only this shard of the key (into its own cache)"}
SOURCES = [("--recipes", {"type": Path, "default": RECIPES_DIR}),
           ("--table", {"type": Path, "default": TABLE_PATH}), ("--runners", {"type": Path}),
           ("--limits", {"type": Path, "default": LIMITS_PATH})]
