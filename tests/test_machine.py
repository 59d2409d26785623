"""tools.backends.machine: the one hook for a machine's workarounds, and the plain machine that
needs none."""

from __future__ import annotations

import subprocess

import pytest

from tools.backends import machine
from tools.backends.machine import (HOOK_VARIABLE, SANDBOX_HOOK, ImageFacts, PlainMachine,
                                    current_machine)
from tools.core.errors import ToolchainError
from tools.devtools.sandbox import MACHINE, SandboxMachine

RLIMIT_ERROR = ("Error: runc: runc create failed: unable to start container process: error "
                "setting rlimit type 7: operation not permitted: OCI permission denied")


def _answers(code: int, stderr: str = ""):
    calls = []

    def run(argv):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, code, "", stderr)
    run.calls = calls
    return run


def test_without_the_variable_the_machine_is_plain():
    assert isinstance(current_machine({}), PlainMachine)
    assert isinstance(current_machine({HOOK_VARIABLE: "  "}), PlainMachine)


def test_the_variable_names_the_hook():
    assert current_machine({HOOK_VARIABLE: SANDBOX_HOOK}) is MACHINE
    assert isinstance(current_machine({HOOK_VARIABLE: "tools.devtools.sandbox"}), SandboxMachine)


@pytest.mark.parametrize("spec", ["tools.devtools.nowhere:MACHINE", "tools.devtools.sandbox:NOPE"])
def test_a_hook_that_is_not_there_is_named(spec):
    with pytest.raises(ToolchainError, match=f"{HOOK_VARIABLE}={spec}") as info:
        current_machine({HOOK_VARIABLE: spec})
    assert SANDBOX_HOOK in info.value.hint


def test_the_plain_machine_starts_containers_as_they_are():
    run = _answers(0)
    found = PlainMachine().start("docker", "img", run=run)
    assert found.ok and found.runtime_args == () and found.wrapper is None
    assert run.calls == [["docker", "run", "--rm", "--pull=never", "--network=none", "img", "true"]]


def test_the_plain_machine_names_the_hook_when_the_runtime_refuses_rlimits():
    found = PlainMachine().start("podman", "img", run=_answers(126, RLIMIT_ERROR))
    assert not found.ok and "exit 126" in found.why
    assert f"{HOOK_VARIABLE}={SANDBOX_HOOK}" in found.why
    other = PlainMachine().start("podman", "img", run=_answers(125, "no such image"))
    assert not other.ok and HOOK_VARIABLE not in other.why


def test_the_plain_machine_reads_no_label():
    """A stand-in's labels change nothing on a machine without the hook: a maintainer's build on
    a real runner never reads them."""
    labels = {"org.cuwheels.builder.stand-in": "true", "org.cuwheels.builder.machine": "aarch64",
              "org.cuwheels.builder.tools-python": "/usr/bin/python3"}
    assert PlainMachine().image_facts("manylinux_2_28_x86_64", labels) == ImageFacts()


def test_the_sandbox_reads_a_stand_ins_labels():
    labels = {"org.cuwheels.builder.stand-in": "true",
              "org.cuwheels.builder.manylinux": "manylinux_2_36"}
    facts = MACHINE.image_facts("manylinux_2_28_x86_64", labels)
    assert facts.plat == "auto" and "wheels up to manylinux_2_36" in facts.note
    assert "not manylinux_2_28_x86_64" in facts.note
    assert MACHINE.image_facts("manylinux_2_28_x86_64", {}) == ImageFacts()


def test_runtime_conf_names_the_wrapper(tmp_path):
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in Python >= 3.11")
    conf = machine.runtime_conf(tmp_path / "w", tmp_path / "containers.conf")
    data = tomllib.loads(conf.read_text())
    assert data["engine"]["runtimes"]["cuwheels-runc"] == [str(tmp_path / "w")]
