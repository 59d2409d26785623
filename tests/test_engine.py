"""Container engine detection: the real probe against fake clients, and the choice it drives."""

from __future__ import annotations

import pytest

from tools.engine import engine_answers, find_engine, first_answering
from tools.errors import ToolchainError


def _client(bin_dir, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    client = bin_dir / name
    client.write_text("#!/bin/sh\n" + script)
    client.chmod(0o755)


def test_engine_answers_reads_the_client(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    _client(bin_dir, "docker", "echo 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    _client(bin_dir, "podman", "echo 'host: arch: amd64'\n")
    monkeypatch.setenv("PATH", str(bin_dir))
    assert engine_answers("docker") == (False, "`docker info` failed: Cannot connect to the "
                                               "Docker daemon")
    assert engine_answers("podman") == (True, "podman answers")
    (bin_dir / "podman").unlink()
    assert engine_answers("podman") == (False, "podman is not installed")


def _answering(*engines: str):
    return lambda engine: ((True, f"{engine} answers") if engine in engines
                           else (False, f"{engine} is not installed"))


@pytest.mark.parametrize("named,answering,found", [
    (None, ("docker", "podman"), "docker"),     # docker first
    (None, ("podman",), "podman"),
    ("podman", ("docker", "podman"), "podman"),  # a named engine is the only one tried
    ("docker", ("podman",), None),
    (None, (), None),
])
def test_first_answering(named, answering, found):
    engine, why, reasons = first_answering(named, _answering(*answering))
    assert engine == found
    assert why == (f"{found} answers" if found else "")
    if not found:
        assert reasons == [f"{e} is not installed" for e in ([named] if named else
                                                             ["docker", "podman"])]


def test_find_engine_says_what_each_said_and_what_to_do():
    assert find_engine(None, _answering("podman")) == "podman"
    with pytest.raises(ToolchainError) as info:
        find_engine(None, _answering())
    assert str(info.value).startswith("no container engine answers (docker is not installed; "
                                      "podman is not installed)")
    assert "--backend host" in info.value.hint and "--dry-run" in info.value.hint
