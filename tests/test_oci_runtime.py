"""tools.oci_runtime: runtime command lines, rlimit stripping, the wrapper, the start check."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tools.backends.machine import StartCheck, runtime_conf as containers_conf
from tools.devtools.rlimit_runtime import (
    RuntimeFiles,
    install_wrapper,
    is_rlimit_failure,
    parse_runtime_args,
    check_starts,
    strip_bundle_rlimits,
    strip_process_rlimits,
    strip_rlimits,
)

RLIMITS = [{"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1048576},
           {"type": "RLIMIT_NPROC", "hard": 4194304, "soft": 4194304}]

#: The shape of what podman writes for `runc create` (abridged, real keys).
BUNDLE_CONFIG = {
    "ociVersion": "1.0.2-dev",
    "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["true"],
                "env": ["PATH=/usr/bin:/bin", "container=podman"], "cwd": "/",
                "capabilities": {"bounding": ["CAP_CHOWN"]}, "rlimits": RLIMITS,
                "oomScoreAdj": 0},
    "root": {"path": "/var/lib/containers/storage/overlay/abc/merged"},
    "hostname": "f00",
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
    "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}]},
}
#: What `podman exec` hands `runc exec --process FILE`.
PROCESS_JSON = {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["echo", "hi"],
                "env": ["PATH=/usr/bin:/bin"], "cwd": "/", "rlimits": RLIMITS,
                "capabilities": {"bounding": ["CAP_CHOWN"]}}


@pytest.mark.parametrize("argv, bundle, process", [
    (["--root", "/run/runc", "--log", "/x/log.json", "--log-format", "json", "create",
      "--bundle", "/b/one", "--pid-file", "/b/pid", "ctr"], "/b/one", None),
    (["create", "-b", "/b/two", "ctr"], "/b/two", None),
    (["create", "--bundle=/b/three", "ctr"], "/b/three", None),
    (["run", "-b=/b/four", "ctr"], "/b/four", None),
    (["--systemd-cgroup", "exec", "--detach", "--process", "/tmp/p.json", "ctr"], None,
     "/tmp/p.json"),
    (["exec", "-p", "/tmp/q.json", "ctr"], None, "/tmp/q.json"),
    (["exec", "--process=/tmp/r.json", "ctr"], None, "/tmp/r.json"),
    (["start", "ctr"], None, None),
    (["delete", "--force", "ctr"], None, None),
    # After `--` comes the command run inside the container: its -p is not ours.
    (["exec", "ctr", "--", "ps", "-p", "1"], None, None),
    # A flag with its value missing at the end is no value.
    (["create", "--bundle"], None, None),
])
def test_parse_runtime_args_every_form(argv, bundle, process):
    files = parse_runtime_args(argv)
    assert files == RuntimeFiles(bundle=Path(bundle) if bundle else None,
                                 process=Path(process) if process else None)


def test_strip_bundle_rlimits_removes_only_process_rlimits(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(BUNDLE_CONFIG, indent=2))
    config.chmod(0o600)
    assert strip_bundle_rlimits(config) is True
    after = json.loads(config.read_text())
    expected = json.loads(json.dumps(BUNDLE_CONFIG))
    del expected["process"]["rlimits"]
    assert after == expected
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    # A second pass finds nothing and leaves the file untouched.
    before = config.read_bytes()
    assert strip_bundle_rlimits(config) is False
    assert config.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_strip_process_rlimits(tmp_path):
    process = tmp_path / "exec-process-123"
    process.write_text(json.dumps(PROCESS_JSON))
    assert strip_process_rlimits(process) is True
    after = json.loads(process.read_text())
    assert "rlimits" not in after
    assert after["args"] == ["echo", "hi"] and after["cwd"] == "/"


def test_files_that_are_not_configs_are_left_alone(tmp_path):
    missing = tmp_path / "nothing.json"
    assert strip_process_rlimits(missing) is False
    assert not missing.exists()
    text = tmp_path / "text"
    text.write_text("not json {")
    assert strip_process_rlimits(text) is False
    assert text.read_text() == "not json {"
    array = tmp_path / "array.json"
    array.write_text("[1, 2]")
    assert strip_bundle_rlimits(array) is False


def test_strip_rlimits_follows_the_command_line(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps(BUNDLE_CONFIG))
    files = strip_rlimits(["--root", "/run/runc", "create", "--bundle", str(bundle), "ctr"])
    assert files.bundle == bundle
    assert "rlimits" not in json.loads((bundle / "config.json").read_text())["process"]


def test_installed_wrapper_strips_then_execs_the_runtime(tmp_path):
    """The wrapper is run as the engine runs it: a fake runtime records what it was given and
    what the config held when it started."""
    record = tmp_path / "record.json"
    runtime = tmp_path / "fake-runc"
    runtime.write_text(f"#!{sys.executable}\n"
                       "import json, sys\n"
                       "args = sys.argv[1:]\n"
                       "path = args[args.index('--process') + 1]\n"
                       f"json.dump({{'args': args, 'seen': json.load(open(path))}}, "
                       f"open({str(record)!r}, 'w'))\n")
    runtime.chmod(0o755)
    wrapper = install_wrapper(str(runtime), tmp_path / "cache" / "runc-no-rlimits")
    assert os.access(wrapper, os.X_OK)
    process = tmp_path / "p.json"
    process.write_text(json.dumps(PROCESS_JSON))
    argv = ["--root", "/run/runc", "exec", "--process", str(process), "--detach", "ctr"]
    # PYTHONPATH must not matter: the engine starts the wrapper with its own environment.
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": "/nonexistent"}
    proc = subprocess.run([str(wrapper), *argv], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(record.read_text())
    assert got["args"] == argv
    assert "rlimits" not in got["seen"] and got["seen"]["args"] == ["echo", "hi"]


def test_install_wrapper_rewrites_only_when_changed(tmp_path):
    dest = tmp_path / "runc-no-rlimits"
    install_wrapper("/usr/bin/runc", dest)
    first = dest.stat().st_mtime_ns
    install_wrapper("/usr/bin/runc", dest)
    assert dest.stat().st_mtime_ns == first
    install_wrapper("/usr/bin/crun", dest)
    assert "'/usr/bin/crun'" in dest.read_text()


def test_the_wrapper_and_its_conf_go_to_the_cache_directory(tmp_path, monkeypatch):
    """Without a destination: cuwheels' cache directory (tools.core.paths), which follows
    XDG_CACHE_HOME."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    wrapper = install_wrapper("/usr/bin/runc")
    assert wrapper == tmp_path / "xdg" / "cuwheels" / "runc-no-rlimits"
    assert containers_conf(wrapper) == tmp_path / "xdg" / "cuwheels" / "containers.conf"


def test_containers_conf_names_the_wrapper(tmp_path):
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in Python >= 3.11")
    conf = containers_conf(tmp_path / "w", tmp_path / "containers.conf")
    data = tomllib.loads(conf.read_text())
    assert data["engine"]["runtime"] == "cuwheels-runc"
    assert data["engine"]["runtimes"]["cuwheels-runc"] == [str(tmp_path / "w")]


RUNC_ERROR = ("Error: runc: runc create failed: unable to start container process: error during "
              "container init: error setting rlimits for ready process: error setting rlimit "
              "type 7: operation not permitted: OCI permission denied")
CRUN_ERROR = ("Error: crun: setrlimit `RLIMIT_NOFILE`: Operation not permitted: "
              "OCI permission denied")


def test_is_rlimit_failure():
    assert is_rlimit_failure(RUNC_ERROR)
    assert is_rlimit_failure(CRUN_ERROR)
    assert not is_rlimit_failure("Error: localhost/x: image not known")
    assert not is_rlimit_failure("mount: operation not permitted")


class FakeEngine:
    """Answers engine command lines from a table of (predicate, result); records each call."""

    def __init__(self, *, plain: tuple[int, str], wrapped: tuple[int, str] = (0, ""),
                 runtime: str = "/usr/bin/runc"):
        self.plain, self.wrapped, self.runtime = plain, wrapped, runtime
        self.calls: list[list[str]] = []

    def __call__(self, argv):
        argv = list(argv)
        self.calls.append(argv)
        if argv[1:2] == ["info"]:
            return subprocess.CompletedProcess(argv, 0, self.runtime + "\n", "")
        code, err = self.wrapped if "--runtime" in argv else self.plain
        return subprocess.CompletedProcess(argv, code, "", err)


def test_probe_plain_success_installs_nothing():
    engine = FakeEngine(plain=(0, ""))
    installed = []
    result = check_starts("podman", "img", run=engine, install=installed.append)
    assert tuple(result) == (True, (), "podman starts containers as it is")
    assert installed == []
    assert engine.calls == [["podman", "run", "--rm", "--pull=never", "--network=none", "img",
                             "true"]]


def test_probe_falls_back_to_the_wrapper_only_for_rlimits(tmp_path):
    engine = FakeEngine(plain=(126, RUNC_ERROR), wrapped=(0, ""))
    wrapper = tmp_path / "runc-no-rlimits"
    installed = []

    def install(runtime):
        installed.append(runtime)
        return wrapper

    ok, args, why = check_starts("podman", "img", run=engine, install=install)
    assert ok and args == ("--runtime", str(wrapper))
    assert installed == ["/usr/bin/runc"]
    assert "rlimit" in why and str(wrapper) in why
    assert engine.calls[-1][:3] == ["podman", "--runtime", str(wrapper)]
    assert engine.calls[-1][3:] == engine.calls[0][1:]


def test_probe_reports_other_failures_without_the_wrapper():
    engine = FakeEngine(plain=(125, "Error: img: image not known"))
    result = check_starts("podman", "img", run=engine, install=lambda r: pytest.fail("installed"))
    assert not result.ok and result.runtime_args == ()
    assert "image not known" in result.why and "exit 125" in result.why
    assert len(engine.calls) == 1


def test_probe_wrapped_failure_is_reported():
    engine = FakeEngine(plain=(126, CRUN_ERROR), wrapped=(126, "Error: something else"))
    result = check_starts("podman", "img", run=engine, install=lambda r: Path("/w"))
    assert result == StartCheck(False, (), result.why)
    assert "something else" in result.why and "/w" in result.why


def test_probe_docker_cannot_use_the_wrapper():
    engine = FakeEngine(plain=(126, CRUN_ERROR))
    result = check_starts("docker", "img", run=engine, install=lambda r: pytest.fail("installed"))
    assert not result.ok and "only podman" in result.why
