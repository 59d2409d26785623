"""One table of exit statuses (tools.core.exitcodes), no number with two meanings."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections import Counter

from tools import ROOT
from tools.core import errors, exitcodes
from tools.kernels.check import EXIT_NOT_RUN
from tools.selector import cli as selector_cli
from tools.selector.fetch import IndexReadError

TOOLS = ROOT / "tools"


def _all_error_classes() -> list[type]:
    """Every CuwheelsError subclass the tools define (each module of tools imported)."""
    for path in sorted(TOOLS.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        if rel.name == "__main__" or "actstandins" in rel.parts:
            continue
        importlib.import_module(".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts))
    found, todo = [], [errors.CuwheelsError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found


def test_no_two_meanings_share_a_code():
    counts = Counter(e.code for e in exitcodes.TABLE)
    assert [c for c, n in counts.items() if n > 1] == []
    names = Counter(e.name for e in exitcodes.TABLE)
    assert [n for n, k in names.items() if k > 1] == []
    assert all(e.meaning and 0 <= e.code <= 255 for e in exitcodes.TABLE)


def test_every_error_class_has_a_code_of_the_table():
    codes = {e.code for e in exitcodes.TABLE}
    classes = _all_error_classes()
    assert len(classes) > 10
    by_code: dict[int, set[str]] = {}
    for cls in classes:
        assert cls.exit_code in codes, f"{cls.__module__}.{cls.__name__}: {cls.exit_code} is not in the table"
        if cls.__dict__.get("exit_code") is not None:
            by_code.setdefault(cls.exit_code, set()).add(cls.__name__)
    # one class per code, except the base class's generic 1
    shared = {code: names for code, names in by_code.items() if len(names) > 1}
    assert shared == {}, shared


def test_no_code_is_written_as_a_bare_number_outside_the_table():
    """``exit_code = 12`` in a module would bypass the table; the selector keeps its own public
    0/1/3, which the next test holds to the table."""
    bare = []
    for path in sorted(TOOLS.rglob("*.py")):
        if path.parent.name == "selector" or path.name == "exitcodes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, int) and not isinstance(node.value.value, bool):
                targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
                targets += [t.attr for t in node.targets if isinstance(t, ast.Attribute)]
                if any(t == "exit_code" or t.startswith("EXIT_") for t in targets):
                    bare.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert bare == []


def test_the_public_codes_keep_their_numbers():
    assert (selector_cli.EXIT_FITS, selector_cli.EXIT_NO_FIT, selector_cli.EXIT_INDEX) == (
        exitcodes.OK, exitcodes.FAILED, exitcodes.INDEX_UNREADABLE) == (0, 1, 3)
    assert IndexReadError.exit_code == exitcodes.INDEX_UNREADABLE
    assert EXIT_NOT_RUN == exitcodes.KERNEL_NOT_RUN


def test_argparse_usage_error_is_the_tables_usage_code():
    proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--no-such-option"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == exitcodes.USAGE == 2
    assert "unrecognized arguments: --no-such-option" in proc.stderr
    assert exitcodes.meaning(2).startswith("the command line is wrong")


def test_a_table_error_exits_with_its_own_code_not_usages(tmp_path):
    bad = tmp_path / "table.yaml"
    bad.write_text("cuda: [\n")
    proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--table", str(bad)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == exitcodes.TABLE_ERROR != exitcodes.USAGE, proc.stderr
    assert str(bad) in proc.stderr
