"""``python -m tools.recipe new <pypi-name>``: a template recipe a contributor finishes by hand.

Real runs of the command: against the real registry (causal-conv1d, a small project), offline
with ``--version`` (the registry pointed at a closed port on 127.0.0.1, so a request would fail),
and with the registry down. The validator (``python -m tools.recipe``) refuses the untouched
template, naming every TODO marker, and accepts it once the test has written real values.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tools import ROOT
from tools.core.errors import RecipeError, RegistryError
from tools.plan.table import load_table
from tools.upstream.newrecipe import folder_name


def _closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(*args: str | Path, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.recipe", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _offline(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return _run("new", "flash-attn", "--recipes", tmp_path,
                "--registry", f"https://127.0.0.1:{_closed_port()}/pypi/", *extra)


def _set(data: dict, path: str, value) -> None:
    """Write ``value`` at a key path as the validator names it (``a.b``, ``a[0]``, ``cuda.13.2.x``)."""
    *parents, last = re.findall(r"\[\d+\]|\d+\.\d+|[^.\[\]]+", path)
    node = data
    for part in parents:
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    if last.startswith("["):
        node[int(last[1:-1])] = value
    else:
        node[last] = value


def _fill(recipe: Path, values: dict[str, object]) -> None:
    data = yaml.safe_load(recipe.read_text())
    for path, value in values.items():
        _set(data, path, value)
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))


def _filled_values(cuda: str) -> dict[str, object]:
    """What a contributor writes for every marker the template leaves in any case."""
    oldest = load_table().torch_for_cuda(cuda)[0]
    return {
        "imports[0]": "causal_conv1d_cuda",
        "abi.reason": "a pybind11 module on torch's C++ API: one build per Python and torch series",
        f"cuda.{cuda}.torch_from": oldest,
        f"cuda.{cuda}.reason": "the newest CUDA of the table, from its oldest torch series",
        "archs": {"*": ["80", "90"]},
        "arch_env.reason": "torch's BuildExtension reads TORCH_CUDA_ARCH_LIST",
        "build.requires[0].reason": "the sdist's pyproject names setuptools.build_meta",
        "build.job_memory_gib": 3.5,
        "build.job_memory_reason": "measured peak of one nvcc job for sm_90",
        "platforms.linux_aarch64.reason": "nothing in setup.py is x86-only",
        "platforms.win_amd64": {"exclude": True, "reason": "setup.py passes GCC flags only"},
    }


def test_folder_names_are_normalised_and_bad_names_refused():
    assert folder_name("flash-attn") == "flash_attn"
    assert folder_name("Causal.Conv1D") == "causal_conv1d"
    with pytest.raises(RecipeError, match="is not a PyPI project name"):
        folder_name("../x")
    with pytest.raises(RecipeError, match="which is no recipe folder name"):
        folder_name("3d-ext")


def test_new_against_the_registry_then_the_validator_until_every_todo_is_filled(tmp_path):
    made = _run("new", "causal-conv1d", "--recipes", tmp_path)
    assert made.returncode == 0, made.stderr
    recipe = tmp_path / "causal_conv1d" / "recipe.yaml"
    assert f"wrote {recipe} (causal-conv1d " in made.stdout
    text = recipe.read_text()
    data = yaml.safe_load(text)
    source = data["source"]
    # What the registry said: the newest release's sdist, its URL and digest.
    assert data["package"] == "causal_conv1d" and source["pypi"] == "causal-conv1d"
    assert source["sdist"] == f"causal_conv1d-{source['version']}.tar.gz"
    assert re.fullmatch(r"[0-9a-f]{64}", source["sha256"])
    assert source["url"].startswith("https://files.pythonhosted.org/")
    assert source["url"].endswith("/" + source["sdist"])
    assert "TODO" not in data["summary"] and "TODO" not in data["python"]
    # Every value line carries its why: a comment, or a reason in the flow mapping.
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            assert "  # " in line, f"no comment on: {line}"

    untouched = _run(recipe.parent)
    assert untouched.returncode == RecipeError.exit_code
    assert f"{recipe}: 11 problems:" in untouched.stderr
    cuda = next(iter(data["cuda"]))
    for path in _filled_values(cuda):
        field = path if path != "platforms.win_amd64" else "platforms.win_amd64.reason"
        assert f"  - {field}: still holds the template's TODO marker ('TODO: " in untouched.stderr
    assert "python -m tools.recipe new wrote it as a placeholder" in untouched.stderr

    values = _filled_values(cuda)
    _fill(recipe, {k: v for k, v in values.items() if k != "archs"})
    one_left = _run(recipe.parent)
    assert one_left.returncode == RecipeError.exit_code
    assert f"{recipe}: 1 problem:\n  - archs: still holds" in one_left.stderr

    _fill(recipe, {"archs": values["archs"]})
    done = _run(recipe.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"ok  causal_conv1d {source['version']}: CUDA {cuda}")


def test_new_with_version_asks_no_registry_and_leaves_the_sdist_to_fill(tmp_path):
    made = _offline(tmp_path, "--version", "2.8.3")
    assert made.returncode == 0, made.stderr
    recipe = tmp_path / "flash_attn" / "recipe.yaml"
    data = yaml.safe_load(recipe.read_text())
    assert data["package"] == "flash_attn" and data["source"]["pypi"] == "flash-attn"
    assert data["source"]["version"] == "2.8.3"
    assert data["source"]["sdist"] == "flash_attn-2.8.3.tar.gz"
    assert "  - source.sha256: TODO: " in made.stdout and "  - source.url: TODO: " in made.stdout

    cuda = next(iter(data["cuda"]))
    _fill(recipe, {**_filled_values(cuda), "imports[0]": "flash_attn_2_cuda",
                   "summary": "Flash attention kernels", "python": ">=3.9",
                   "source.sha256": "0" * 64,
                   "source.url": "https://files.pythonhosted.org/packages/00/00/"
                                 "flash_attn-2.8.3.tar.gz"})
    done = _run(recipe.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok  flash_attn 2.8.3: ")


def test_new_with_the_registry_down_says_so_and_writes_nothing(tmp_path):
    down = _offline(tmp_path)
    assert down.returncode == RegistryError.exit_code
    assert "registry error: reading https://127.0.0.1:" in down.stderr
    assert "give --version X.Y.Z to write the template without asking it" in down.stderr
    assert not list(tmp_path.iterdir())


def test_new_never_overwrites_a_recipe_folder(tmp_path):
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "recipe.yaml").write_text("schema: 1\n")
    again = _offline(tmp_path, "--version", "2.8.3")
    assert again.returncode == RecipeError.exit_code
    assert f"{tmp_path / 'flash_attn'} already exists: a template never overwrites a recipe" \
        in again.stderr
    assert (tmp_path / "flash_attn" / "recipe.yaml").read_text() == "schema: 1\n"
