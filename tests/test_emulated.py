"""tools.devtools.emulated: what an emulated image gets in place of the host's /proc/cpuinfo."""

from __future__ import annotations

from tools.devtools.emulated import (CPUINFO, MACHINE_LABEL, cpuinfo_file, emulated_machine,
                                     emulation_volumes)


def test_the_cpuinfo_is_an_aarch64_kernels():
    cores = CPUINFO.strip().split("\n\n")
    assert len(cores) == 2
    assert all("CPU implementer\t: 0x41" in c and "CPU architecture: 8" in c for c in cores)
    assert "Features\t: fp asimd" in cores[0]


def test_the_cpuinfo_file_is_written_once_and_repaired(tmp_path):
    path = cpuinfo_file("aarch64", tmp_path)
    assert path.read_text() == CPUINFO
    path.write_text("processor : 0\nvendor_id : GenuineIntel\n")
    assert cpuinfo_file("aarch64", tmp_path).read_text() == CPUINFO


def test_an_image_of_another_machine_is_emulated():
    arm = {MACHINE_LABEL: "aarch64"}
    assert emulated_machine(arm, host="x86_64") == "aarch64"
    assert emulated_machine(arm, host="aarch64") is None          # an arm64 runner: native
    assert emulated_machine({}, host="x86_64") is None             # the table's images


def test_only_an_emulated_image_gets_the_cpuinfo_mount(tmp_path):
    arm = {MACHINE_LABEL: "aarch64"}
    (volume,) = emulation_volumes(arm, host="x86_64", cache=tmp_path)
    source, target, mode = volume.rsplit(":", 2)
    assert (target, mode) == ("/proc/cpuinfo", "ro")
    assert open(source).read() == CPUINFO
    assert emulation_volumes(arm, host="aarch64", cache=tmp_path) == ()
    assert emulation_volumes({}, host="x86_64", cache=tmp_path) == ()
    # a machine with nothing to stand in for gets nothing rather than a wrong file
    assert emulation_volumes({MACHINE_LABEL: "riscv64"}, host="x86_64", cache=tmp_path) == ()
