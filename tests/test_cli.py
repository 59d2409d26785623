"""The command line as one thing: every command listed by ``python -m tools``, short help with
every option explained, one option name per concept (old spellings still accepted, hidden)."""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import ROOT
from tools.core.errors import PlanError
from tools.devtools.commandline import commands, help_text, parser_of, subparsers
from tools.plan.cells import plan
from tools.plan.recipes.model import load_all
from tools.plan.table import load_table

TIMEOUT = 120
#: Markup that belongs in module docstrings, not in what --help prints.
MARKUP = re.compile(r"``|:(?:func|data|class|meth|mod|attr|exc):`")
#: Spellings replaced by one name per concept; each still works, hidden from --help.
#: What each concept's option takes, the same in every command.
METAVARS = {"--site": "DIR", "--wheels": "DIR", "--ledger": "FILE", "--interpreter": "PATH"}
RENAMED = [  # (command, subcommand or None, old argv, new argv, dest)
    ("index", None, ["--wheels-dir", "w", "--output-dir", "s", "--base-url", "u"],
     ["--wheels", "w", "--site", "s", "--base-url", "u"], ("wheels", "site")),
    ("serve", None, ["--site", "s", "--files", "w"], ["--site", "s", "--wheels", "w"], ("wheels",)),
    ("ledger", "hold-back", ["hold-back", "--ledger", "l", "--wheels-dir", "w", "--to", "h"],
     ["hold-back", "--ledger", "l", "--wheels", "w", "--to", "h"], ("wheels",)),
    ("build", None, ["c", "--out", "w", "--python", "/p"], ["c", "--wheels", "w", "--interpreter", "/p"],
     ("wheels", "interpreter")),
    ("shard", "release", ["release", "g", "--shards", "2", "--out", "w"],
     ["release", "g", "--shards", "2", "--wheels", "w"], ("wheels",)),
    ("kernelcheck", None, ["t", "--python", "/p"], ["t", "--interpreter", "/p"], ("interpreter",)),
    ("localimage", None, ["--cuda", "13.0", "--pythons", "3.12"], ["--cuda", "13.0", "--python", "3.12"],
     ("python",)),
    ("incontainer", "finish", ["finish", "w", "d", "--cell-file", "c", "--archs", "90", "--build-python", "/p"],
     ["finish", "w", "d", "--cell-file", "c", "--archs", "90", "--interpreter", "/p"], ("interpreter",)),
]


def _parsers():
    """(where, parser) for every command and every subcommand."""
    for name in commands():
        top = parser_of(name)
        yield name, top
        for sub_name, sub in subparsers(top):
            yield f"{name} {sub_name}", sub


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT, env=_env())


def _env() -> dict[str, str]:
    import os
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_python_m_tools_lists_every_command():
    plain, helped = _run("-m", "tools"), _run("-m", "tools", "--help")
    assert plain.returncode == helped.returncode == 0, plain.stderr
    assert plain.stdout == helped.stdout
    # found here independently of the listing's own discovery: every tools/*.py is a command
    expected = {p.stem for p in (ROOT / "tools").glob("*.py")} - {"__init__", "__main__"}
    expected |= {"selector", "devtools.docpages"}
    listed = {m.group(1) for m in re.finditer(r"^  (\S+)  +\S", plain.stdout, re.M)}
    assert listed == expected
    for name in expected:
        line = next(x for x in plain.stdout.splitlines() if x.startswith(f"  {name} "))
        assert line.split(None, 1)[1] == parser_of(name).description
    wrong = _run("-m", "tools", "matrix")
    assert wrong.returncode == 2 and "python -m tools.COMMAND" in wrong.stderr


def test_every_option_has_help():
    missing = []
    for where, parser in _parsers():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.help is argparse.SUPPRESS:
                continue
            if isinstance(action, argparse._SubParsersAction):
                named = {a.dest for a in action._choices_actions if a.help}
                missing += [f"{where} {n} (subcommand)" for n in action.choices if n not in named
                            and not any(action.choices[n] is action.choices[m] for m in named)]
                continue
            if not (action.help or "").strip():
                missing.append(f"{where} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


def test_help_is_short_and_plain():
    """One-line descriptions, no docstring markup in what --help prints."""
    found = []
    for where, parser in _parsers():
        description = parser.description or ""
        if where in commands() and (not description or "\n" in description or len(description) > 140):
            found.append(f"{where}: description {description!r}")
        text = help_text(parser)
        if MARKUP.search(text):
            found.append(f"{where}: {MARKUP.search(text).group(0)!r} in --help")
        if len(text.splitlines()) > 80:
            found.append(f"{where}: --help is {len(text.splitlines())} lines")
    assert found == []


def test_one_name_per_concept():
    """The site is --site, the wheels --wheels, a Python version --python, an interpreter's path
    --interpreter: no command shows another spelling."""
    banned = {"--output-dir", "--wheels-dir", "--files", "--pythons", "--build-python", "--site-dir"}
    shown = []
    for where, parser in _parsers():
        for action in parser._actions:
            if action.help is argparse.SUPPRESS:
                continue
            shown += [f"{where} {o}" for o in action.option_strings if o in banned]
            if "--python" in action.option_strings:
                assert action.type is not Path, f"{where}: --python is a version; a path is --interpreter"
            for flag, metavar in METAVARS.items():
                if flag in action.option_strings and action.metavar != metavar:
                    shown.append(f"{where} {flag} {action.metavar} (not {metavar})")
    assert shown == []


@pytest.mark.parametrize("command, sub, old, new, dests", RENAMED, ids=[r[0] for r in RENAMED])
def test_old_spellings_still_work_but_are_hidden(command, sub, old, new, dests):
    parser = parser_of(command)
    got_old, got_new = parser.parse_args(old), parser.parse_args(new)
    for dest in dests:
        assert getattr(got_old, dest) == getattr(got_new, dest) is not None
    shown = help_text(dict(subparsers(parser))[sub] if sub else parser)
    for flag in old:
        if flag.startswith("--") and flag not in new:
            assert flag not in shown.split()


def test_index_with_the_old_spellings_runs(tmp_path):
    (tmp_path / "w").mkdir()
    proc = _run("-m", "tools.index", "--wheels-dir", str(tmp_path / "w"), "--output-dir",
                str(tmp_path / "s"), "--base-url", "https://files.example/v1", "--init-ledger")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "s" / "simple" / "index.html").is_file()
    assert (tmp_path / "s-ledger.json").is_file()


def test_index_without_ledger_never_writes_into_the_repository(tmp_path):
    """No --ledger: the ledger goes beside the site (``<site>-ledger.json``), run from anywhere;
    the repository's index/ledger.json (which only seeds a first deployment) is untouched, and
    every file the run leaves beside the site (the lock files) is git-ignored."""
    repo_ledger = ROOT / "index" / "ledger.json"
    before = (hashlib.sha256(repo_ledger.read_bytes()).hexdigest(), repo_ledger.stat().st_mtime_ns)
    work = tmp_path / "checkout"
    (work / "wheelhouse").mkdir(parents=True)
    shutil.copy(ROOT / ".gitignore", work / ".gitignore")
    subprocess.run(["git", "init", "-q", str(work)], check=True, timeout=TIMEOUT)
    proc = _run("-m", "tools.index", "--wheels", "wheelhouse", "--site", "site",
                "--base-url", "https://files.example/v1", "--init-ledger", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert (work / "site-ledger.json").is_file() and (work / ".site-ledger.json.lock").exists()
    assert (work / ".site.lock").exists()
    after = (hashlib.sha256(repo_ledger.read_bytes()).hexdigest(), repo_ledger.stat().st_mtime_ns)
    assert after == before
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=work,
                            capture_output=True, text=True, check=True, timeout=TIMEOUT).stdout
    assert status.splitlines() == ["?? .gitignore"]


def test_the_lock_files_are_ignored_wherever_the_ledger_is():
    """A hand run with --ledger index/ledger.json (or a site anywhere) leaves .<name>.lock there."""
    from tools.sitegen.ledger_file import lock_path
    from tools.sitegen.swap import side_path
    paths = [lock_path(ROOT / "index" / "ledger.json"), lock_path(ROOT / "site-ledger.json"),
             side_path(ROOT / "site", "lock"), side_path(ROOT / "docs" / "preview", "lock")]
    proc = subprocess.run(["git", "check-ignore", "--no-index", *map(str, paths)], cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == len(paths), proc.stdout


def test_matrix_refuses_a_cuda_version_the_plan_lacks_naming_those_it_has():
    table = load_table()
    cudas = sorted({c.cuda for c in plan(load_all(ROOT / "recipes", table), table)},
                   key=lambda v: tuple(map(int, v.split("."))))
    assert "12.7" not in cudas
    proc = _run("-m", "tools.matrix", "--cuda", "12.7")
    assert proc.returncode == PlanError.exit_code != 0 and proc.stdout == ""
    assert "unknown CUDA version(s): 12.7" in proc.stderr
    assert ", ".join(cudas) in proc.stderr
