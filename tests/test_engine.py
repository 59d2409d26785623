"""Container engines: the real readiness questions asked of fake clients (shell scripts on PATH),
and the choice they drive. Nothing here depends on which engines this machine has."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.backends.engine import (
    Readiness,
    engine_answers,
    find_engine,
    first_ready,
    image_labels,
    qualified,
    readiness,
)
from tools.core.errors import ToolchainError
from tools.backends.machine import StartCheck

IMAGE = "pytorch/manylinux2_28-builder:cuda13.0"


def _client(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    client = bin_dir / name
    client.write_text("#!/bin/sh\n" + script)
    client.chmod(0o755)


def _engine(bin_dir: Path, name: str, *, info=True, local: str | None = None,
            pullable=False) -> None:
    """A client answering ``info``, ``image inspect`` (labels JSON ``local``, or absent) and
    ``manifest inspect`` (pullable or a registry error), logging its arguments."""
    _client(bin_dir, name, f"""echo "$@" >> {bin_dir}/{name}.calls
case "$1 $2" in
  "info "*) {'echo "host: arch: amd64"' if info else 'echo "Cannot connect to the daemon" >&2; exit 1'} ;;
  "image inspect") {f"echo '{local}'" if local is not None else 'echo "Error: no such image" >&2; exit 125'} ;;
  "manifest inspect") {'echo "{{}}"' if pullable else 'echo "Error: pinging container registry: no such host" >&2; exit 125'} ;;
  *) echo "unexpected: $@" >&2; exit 99 ;;
esac
""")


def test_engine_answers_reads_the_client(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    _engine(bin_dir, "docker", info=False)
    _engine(bin_dir, "podman")
    monkeypatch.setenv("PATH", str(bin_dir))
    assert engine_answers("docker") == (False, "`docker info` failed: Cannot connect to the "
                                               "daemon")
    assert engine_answers("podman") == (True, "podman answers")
    (bin_dir / "podman").unlink()
    assert engine_answers("podman") == (False, "podman is not installed")


def _starts(ok: bool, why: str = "podman starts containers as it is", wrapper=None):
    calls = []

    def start(engine, image):
        calls.append((engine, image))
        args = ("--runtime", str(wrapper)) if wrapper else ()
        return StartCheck(ok, args, why, wrapper)
    start.calls = calls
    return start


def test_local_image_is_started_and_its_labels_read(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    _engine(bin_dir, "podman", local='{"org.cuwheels.builder.stand-in":"true"}')
    monkeypatch.setenv("PATH", str(bin_dir))
    start = _starts(True)
    found = readiness("podman", "localhost/x:1", start=start)
    assert found.ok and found.local and found.runtime_args == ()
    assert found.labels == {"org.cuwheels.builder.stand-in": "true"}
    assert start.calls == [("podman", "localhost/x:1")]
    assert found.why == "localhost/x:1 is here and podman starts containers as it is"


def test_wrapper_is_handed_on_as_a_containers_conf(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    _engine(bin_dir, "podman", local="null")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    wrapper = tmp_path / "cache" / "cuwheels" / "runc-no-rlimits"
    found = readiness("podman", IMAGE, start=_starts(True, "through the wrapper", wrapper))
    assert found.ok and found.runtime_args == ("--runtime", str(wrapper))
    assert found.containers_conf is not None and str(wrapper) in found.containers_conf.read_text()
    assert found.labels == {}


def test_engine_that_answers_but_cannot_start_a_container(tmp_path, monkeypatch):
    """`info` answering is not enough: the runtime refusing rlimits stops every container."""
    bin_dir = tmp_path / "bin"
    _engine(bin_dir, "podman", local="{}")
    monkeypatch.setenv("PATH", str(bin_dir))
    why = "runc may not set rlimits here, and through the wrapper the container still fails"
    found = readiness("podman", IMAGE, start=_starts(False, why))
    assert not found.ok and found.local
    assert found.why == f"podman cannot start a container from {IMAGE}: {why}"


def test_absent_image_pullable_or_not(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", str(bin_dir))
    start = _starts(True)
    _engine(bin_dir, "podman", pullable=False)
    found = readiness("podman", IMAGE, start=start)
    assert not found.ok and not found.local
    assert found.why == (f"{IMAGE} is not here and cannot be pulled (Error: pinging container "
                         "registry: no such host)")
    # podman is asked with the registry named: it won't guess one for a short name
    assert f"manifest inspect docker.io/{IMAGE}" in (bin_dir / "podman.calls").read_text()
    _engine(bin_dir, "podman", pullable=True)
    found = readiness("podman", IMAGE, start=start)
    assert found.ok and not found.local and "can be pulled" in found.why
    assert start.calls == []   # nothing to start before the pull


@pytest.mark.parametrize("image,expected", [
    ("pytorch/manylinux2_28-builder:cuda13.0", "docker.io/pytorch/manylinux2_28-builder:cuda13.0"),
    ("localhost/cuwheels-builder:cuda13.0-bookworm", "localhost/cuwheels-builder:cuda13.0-bookworm"),
    ("ghcr.io/o/i:1", "ghcr.io/o/i:1"),
    ("registry:5000/i", "registry:5000/i"),
    ("debian", "docker.io/library/debian"),
])
def test_qualified(image, expected):
    assert qualified(image) == expected


def test_image_labels_absent_and_unlabelled(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", str(bin_dir))
    _engine(bin_dir, "docker")
    assert image_labels("docker", IMAGE) is None
    _engine(bin_dir, "docker", local="null")
    assert image_labels("docker", IMAGE) == {}
    # docker keeps labels under .Config
    assert "{{json .Config.Labels}}" in (bin_dir / "docker.calls").read_text()


def _ready(*engines: str):
    def probe(engine, image):
        if engine in engines:
            return Readiness(engine, image, True, f"{engine} can build", local=True)
        return Readiness(engine, image, False, f"{engine} is not installed")
    return probe


@pytest.mark.parametrize("named,ready,found", [
    (None, ("docker", "podman"), "docker"),     # docker first
    (None, ("podman",), "podman"),
    ("podman", ("docker", "podman"), "podman"),  # a named engine is the only one tried
    ("docker", ("podman",), None),
    (None, (), None),
])
def test_first_ready(named, ready, found):
    got, reasons = first_ready(named, IMAGE, _ready(*ready))
    assert (got.engine if got else None) == found
    if not found:
        assert reasons == [f"{e} is not installed" for e in ([named] if named else
                                                             ["docker", "podman"])]


def test_find_engine_says_what_each_said_and_what_to_do():
    assert find_engine(None, IMAGE, _ready("podman")).engine == "podman"
    with pytest.raises(ToolchainError) as info:
        find_engine(None, IMAGE, _ready())
    assert str(info.value).startswith(f"no container engine can build from {IMAGE} here "
                                      "(docker is not installed; podman is not installed)")
    for fix in ("--backend host", "--dry-run", "tools.localimage", "--image"):
        assert fix in info.value.hint
