"""The container's result file: written by the in-container commands, read back by the host through one type."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools import ROOT
from tools.backends.result import (RESULT_FILE, RESULT_SCHEMA, ContainerResult, read_result,
                                   write_result)
from tools.core.errors import ToolchainError
from tools.pipeline import shardcache
from tools.pipeline.buildreport import ReportedCache
from tools.pipeline.shardcache import ShardResult


def _shard(**fields) -> ShardResult:
    return ShardResult(**{"shard": "g-shard1", "group": "g", "key": "k", "index": 1, "count": 2,
                          "units": ["csrc/a.cu"], "archs": ["90"], **fields})


def test_a_result_reads_back_as_written_and_the_second_command_adds_to_it(tmp_path):
    """``ccache stats`` and a shard's ``shard-result`` each write their part; neither loses the
    other's."""
    assert read_result(tmp_path) is None    # nothing handed back (the container died first)
    stats = ReportedCache("ccache 4.10", "/cuwheels-ccache", 2, 1, 1, 1)
    write_result(tmp_path, ContainerResult(ccache=stats, units={"../../a.cu": "hit"}))
    done = _shard(verdict="passed", complete=True, seconds={"(all units)": 4.0})
    path = write_result(tmp_path, ContainerResult(shard=done))
    assert path == tmp_path / RESULT_FILE and not list(tmp_path.glob("*.part"))
    back = read_result(tmp_path)
    assert back == ContainerResult(ccache=stats, units={"../../a.cu": "hit"}, shard=done)
    assert json.loads(path.read_text())["schema"] == RESULT_SCHEMA


@pytest.mark.parametrize("data, message", [
    ({"schema": RESULT_SCHEMA + 1, "ccache": None, "units": None, "shard": None},
     f"schema {RESULT_SCHEMA + 1}: this code reads container results of schema {RESULT_SCHEMA}"),
    ({"schema": RESULT_SCHEMA, "ccache": None}, "must be an object with schema, ccache"),
    ({"schema": RESULT_SCHEMA, "ccache": {"hits": 1}, "units": None, "shard": None},
     "ccache has the wrong fields"),
    ({"schema": RESULT_SCHEMA, "ccache": None, "units": {"a.cu": 1}, "shard": None},
     "units must map each unit to its result"),
    ({"schema": RESULT_SCHEMA, "ccache": None, "units": None, "shard": {"shard": "s"}},
     "shard: a shard record lacks"),
])
def test_a_result_of_another_schema_or_shape_is_refused_naming_the_file(tmp_path, data,
                                                                        message):
    (tmp_path / RESULT_FILE).write_text(json.dumps(data))
    with pytest.raises(ToolchainError) as raised:
        read_result(tmp_path)
    assert str(raised.value).startswith(f"{tmp_path / RESULT_FILE}: ")
    assert message in str(raised.value)


def test_the_in_container_command_hands_a_shards_record_back(tmp_path):
    """What the stand-in ninja runs once the shard's units are built: ``python -m
    tools.incontainer shard-result``, from a copy of the tools as staged (here: this one)."""
    shardcache.write_record(tmp_path, _shard(verdict="passed", complete=True))
    proc = subprocess.run([sys.executable, "-m", "tools.incontainer", "shard-result",
                           str(tmp_path / "shard.json"), "--result-dir", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"result: {tmp_path / 'out' / RESULT_FILE}"
    assert read_result(tmp_path / "out").shard == shardcache.read_record(tmp_path)
    # no record (the stand-in stopped before writing one): refused, naming the file
    proc = subprocess.run([sys.executable, "-m", "tools.incontainer", "shard-result",
                           str(tmp_path / "none.json"), "--result-dir", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == ToolchainError.exit_code
    assert f"{tmp_path / 'none.json'}: no shard record to hand back" in proc.stderr
