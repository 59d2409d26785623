"""The Makefile as people read it: ``make help`` lists every target with its one line."""

from __future__ import annotations

import re
import subprocess

from tools import ROOT


def test_every_target_has_its_line_and_make_help_lists_it():
    text = (ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", text, re.M).group(1).split()
    described = dict(re.findall(r"^## ([a-z-]+): (.+)$", text, re.M))
    assert set(phony) == set(described), "each .PHONY target wants a `## target: what it does` line"
    for target in phony:
        # the line sits right above its target
        assert re.search(rf"^## {target}: .+\n(?:[A-Z_]+ \?=.*\n)*{target}:", text, re.M), target
    # make is what runs this suite (`make test`, the README's test command): it is there.
    proc = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    listed = {line.split()[0]: line.split(None, 1)[1] for line in proc.stdout.splitlines()}
    assert listed == described
