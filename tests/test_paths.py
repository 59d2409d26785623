"""tools.core.paths: cuwheels' cache directory, one rule for every cache under it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.backends.cibw import default_mounts
from tools.core.paths import cache_dir
from tools.pipeline import ccache


@pytest.mark.parametrize("environ, expect", [
    ({}, Path.home() / ".cache" / "cuwheels"),
    ({"XDG_CACHE_HOME": "/xdg/cache"}, Path("/xdg/cache/cuwheels")),
    # an empty value is unset (the XDG base directory rule), not the working directory
    ({"XDG_CACHE_HOME": ""}, Path.home() / ".cache" / "cuwheels"),
])
def test_cache_dir(environ, expect):
    assert cache_dir(environ) == expect


def test_the_process_environment_is_the_default(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "cuwheels"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "cuwheels"


def test_every_cache_follows_it_and_keeps_its_override(tmp_path):
    """The compiler cache and the container's pip cache sit under it; their own variables win."""
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    assert ccache.cache_dir(env) == tmp_path / "cuwheels" / "ccache"
    volumes = default_mounts(env).volumes
    assert f"{tmp_path}/cuwheels/container-pip:/cuwheels-cache" in volumes
    assert f"{tmp_path}/cuwheels/ccache:/cuwheels-ccache" in volumes
    env |= {"CUWHEELS_CCACHE_DIR": str(tmp_path / "cc"),
            "CUWHEELS_CONTAINER_PIP_CACHE": str(tmp_path / "pip")}
    volumes = default_mounts(env).volumes
    assert f"{tmp_path}/cc:/cuwheels-ccache" in volumes
    assert f"{tmp_path}/pip:/cuwheels-cache" in volumes
    assert not any(v.startswith(f"{tmp_path}/cuwheels/") for v in volumes)
