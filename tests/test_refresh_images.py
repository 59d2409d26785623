"""``python -m tools.refresh --images`` (tools.upstream.images): each builder image's /opt/python
listed by a container engine and written into the table's ``images:`` with its digest.

The engine is a real executable: a script standing in for docker that answers ``run`` with a
listing per image and ``image inspect`` with a digest, and fails for an image it "can't pull", as
docker does (exit 125); where podman and the project's local stand-in builder image
(``python -m tools.localimage``, which CI builds) are here, that image is listed for real.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tools import ROOT
from tools.plan.table import parse_table
from tools.upstream.images import list_image, propose_images, pythons_of

DIGEST = "sha256:" + "ab" * 32
LISTINGS = {
    "pytorch/manylinux2_28-builder:cuda13.0": "cp310-cp310\ncp311-cp311\ncp312-cp312\n"
                                              "cp313-cp313\ncp314-cp314\ncp314-cp314t\n"
                                              "pp311-pypy311_pp73\n",
}


def _engine(tmp_path: Path) -> Path:
    """A docker stand-in: ``run ... IMAGE -1 /opt/python`` prints that image's listing, or fails
    as an unpullable image does; ``image inspect`` prints the digest."""
    script = tmp_path / "fake-docker"
    script.write_text(f"""#!{sys.executable}
import json, sys
listings = json.loads({json.dumps(json.dumps(LISTINGS))})
args = sys.argv[1:]
if args[:2] == ["image", "inspect"]:
    print({DIGEST!r})
    sys.exit(0)
if "ls" not in args:          # the machine's start check (`run ... IMAGE true`)
    sys.exit(0)
image = args[args.index("ls") + 1]
if image not in listings:
    print(f"Unable to find image '{{image}}' locally", file=sys.stderr)
    print("docker: Error response from daemon: pull access denied", file=sys.stderr)
    sys.exit(125)
print(listings[image], end="")
""")
    script.chmod(0o755)
    return script


def _table(tmp_path: Path) -> Path:
    text = (ROOT / "recipes" / "table.yaml").read_text()
    path = tmp_path / "table.yaml"
    path.write_text(text)
    return path


def test_a_listing_becomes_cell_pythons():
    assert pythons_of("cp39-cp39\ncp314-cp314t\ncp314-cp314\ncp313-cp313t\npp310-pypy310_pp73\n"
                      "cp315-cp314\n") == ["3.9", "3.13t", "3.14", "3.14t"]


def test_the_table_gets_each_readable_image_and_keeps_the_others(tmp_path):
    table = _table(tmp_path)
    proposal = propose_images(table, str(_engine(tmp_path)), "2026-11-29")
    read = {it.image: it for it in proposal.listings}
    assert read["pytorch/manylinux2_28-builder:cuda13.0"].pythons == \
        ("3.10", "3.11", "3.12", "3.13", "3.14", "3.14t")
    assert read["pytorch/manylinux2_28-builder:cuda13.2"].error.endswith(
        "failed (exit 125): docker: Error response from daemon: pull access denied")
    new = yaml.safe_load(proposal.new)["images"]
    old = yaml.safe_load(proposal.old)["images"]
    assert new["pytorch/manylinux2_28-builder:cuda13.0"] == {
        "pythons": ["3.10", "3.11", "3.12", "3.13", "3.14", "3.14t"],
        "source": f"`{_engine(tmp_path)} run pytorch/manylinux2_28-builder:cuda13.0@{DIGEST} "
                  "ls -1 /opt/python` on 2026-11-29",
        "digest": DIGEST}
    assert {k: v for k, v in new.items() if k != "pytorch/manylinux2_28-builder:cuda13.0"} == \
        {k: v for k, v in old.items() if k != "pytorch/manylinux2_28-builder:cuda13.0"}
    # only that entry's lines change: comments and the rest of the file are kept
    changed = [line for line in proposal.new.splitlines() if line not in proposal.old.splitlines()]
    assert len(changed) == 3 and all(line.startswith("    ") for line in changed), changed
    assert proposal.old.splitlines()[0] == proposal.new.splitlines()[0]
    # and the new table still loads
    assert parse_table(yaml.safe_load(proposal.new), table).images[
        "pytorch/manylinux2_28-builder:cuda13.0"].digest == DIGEST
    assert "- pytorch/manylinux2_28-builder:cuda13.0: 3.10, 3.11, 3.12, 3.13, 3.14, 3.14t (sha256:" \
        in proposal.summary()


def test_the_command_writes_or_prints_a_diff(tmp_path):
    table = _table(tmp_path)
    engine = str(_engine(tmp_path))
    base = [sys.executable, "-m", "tools.refresh", "--images", "--engine", engine, "--table",
            str(table), "--date", "2026-11-29"]
    proc = subprocess.run(base, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("--- a/table.yaml\n+++ b/table.yaml\n")
    assert '+    pythons: ["3.10", "3.11", "3.12", "3.13", "3.14", "3.14t"]' in proc.stdout
    assert table.read_text() == (ROOT / "recipes" / "table.yaml").read_text()   # not written
    proc = subprocess.run([*base, "--write"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "wrote 1 file(s)" in proc.stderr, proc.stderr
    assert f'digest: "{DIGEST}"' in table.read_text()


def test_no_image_read_is_a_toolchain_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tools.refresh", "--images", "--engine",
                           str(tmp_path / "no-engine"), "--table", str(_table(tmp_path))],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 7, proc.stderr     # tools.core.exitcodes.TOOLCHAIN
    assert "no builder image could be listed" in proc.stderr
    assert "did not run: [Errno 2]" in proc.stderr


def test_a_real_engine_lists_the_local_builder_image():
    """With podman and the local stand-in image (CI builds it), its /opt/python for real."""
    podman = shutil.which("podman")
    if podman is None:
        pytest.skip("podman is not installed here (scripts/ci_podman.sh installs it)")
    images = subprocess.run([podman, "images", "--format", "{{.Repository}}:{{.Tag}}"],
                            capture_output=True, text=True, timeout=120)
    local = [i for i in images.stdout.split() if i.startswith("localhost/cuwheels-builder:")]
    if images.returncode != 0 or not local:
        pytest.skip("no local builder image (python -m tools.localimage builds one)")
    listing = list_image(podman, local[0])     # started as this machine starts containers
    assert not listing.error, listing.error
    # the stand-in always links the interpreter cibuildwheel probes the container with
    from tools.devtools.standin_image import HELPER_PYTHON
    assert HELPER_PYTHON in listing.pythons, listing
