"""The platform an answer is for: whether the project has wheels for it, the commands that fetch
another platform's wheel from this machine, and what PyPI's torch is on that platform.

The plain commands (tools.selector.answer.install_commands) are for the machine that runs them:
pip and uv take the file of their own platform from a variant index that holds each platform's
wheel of the version. An answer for a machine of another platform (``--platform``) adds the
commands that take *that* platform's file from here: pip's ``download`` with ``--platform``,
``--only-binary :all:`` and ``--python-version`` (pip allows a foreign platform only with those,
and only to download or into ``--target``), and uv's ``--python-platform`` with ``--target``.
Both leave out the dependencies (torch is gigabytes, and the other machine has its own).
"""

from __future__ import annotations

from tools.core.platforms import PLATFORMS, tag_platform, uv_python_platform
from tools.core.variant import cuda_nodot, torch_index_url
from .detect import Machine
from .facts import SiteFacts

#: Where the fetched wheel lands (pip's ``--dest``, uv's ``--target``).
DOWNLOAD_DIR = "cuwheels-download"


def supported_platforms() -> str:
    """The platforms the project builds for, as people read them."""
    return ", ".join(f"{p.shown} ({p.name})" for p in PLATFORMS.values())


def no_platform_reason(m: Machine) -> str:
    """Why nothing fits a machine of a platform the project builds no wheels for."""
    return (f"no wheels for this platform ({m.os} {m.arch}): CUDA wheels are built for "
            f"{supported_platforms()}; answer for one of those with --platform")


def download_commands(project: str, version: str, index_url: str, platform_field: str,
                      m: Machine) -> dict[str, str]:
    """pip's and uv's commands that fetch, on this machine, the wheel of ``project`` ``version``
    (file platform tags ``platform_field``) for machine ``m`` of another platform."""
    requirement = f'"{project}=={version}"'
    python = f"{m.python[0]}.{m.python[1]}"
    tag = next((t for t in platform_field.split(".") if tag_platform(t) is not None), None)
    pip = [f"pip download {requirement} --no-deps --only-binary :all:"]
    if tag is not None:
        pip.append(f"--platform {tag}")
    pip.append(f"--python-version {python}")
    if m.free_threaded:
        pip.append(f"--abi {m.python_tag}")
    pip.append(f"--extra-index-url {index_url} --dest {DOWNLOAD_DIR}")
    target = uv_python_platform(tag) if tag is not None else PLATFORMS[m.platform or ""].uv_target
    # uv's --python-version takes no "t" (uv 0.13.9: "found `t`, which is not part of a valid
    # version"): uv takes a free-threaded ABI only from the interpreter it runs, so the command
    # names one (--python 3.14t: found on this machine, or downloaded by uv)
    python_option = f"--python {python}t" if m.free_threaded else f"--python-version {python}"
    uv = (f"uv pip install {requirement} --no-deps --python-platform {target} {python_option} "
          f"--extra-index-url {index_url} --target {DOWNLOAD_DIR}")
    return {"pip": " ".join(pip), "uv": uv}


def torch_advice(series: str, cuda: str | None, m: Machine, facts: SiteFacts | None,
                 *, installed_cpu: bool = False, unlabelled: bool = False) -> str | None:
    """What to say of PyPI's torch ``series`` on ``m``'s platform, when the site says (its
    ``torch_platforms``): where a CUDA build of torch is, when PyPI's wheel there is CPU-only or
    built with another CUDA than ``cuda`` (the wheel's, or None: any); for a torch that is a CPU
    build (``installed_cpu``) or has no label (``unlabelled``: PyPI's, as far as its version
    says), which CUDA PyPI's has. None when there is nothing to say or the site doesn't know."""
    if facts is None or m.platform is None:
        return None
    builds = facts.torch_builds(series, m.platform)
    if builds is None:
        return None
    shown = PLATFORMS[m.platform].shown
    if builds.pypi_cuda is None:
        index = _pytorch_index(builds.cuda, cuda)
        where = (f"use PyTorch's cu{cuda_nodot(index)} index ({torch_index_url(index)})" if index
                 else "nor does PyTorch's own index list one")
        return f"no {shown} CUDA build of torch {series} on PyPI (its wheel there is CPU-only): {where}"
    if installed_cpu:
        return (f"PyPI's torch {series} for {shown} is a CUDA {builds.pypi_cuda} build: "
                f'pip install "torch=={series}.*" from PyPI gives it')
    if unlabelled:
        return (f"PyPI's torch {series} for {shown} is a CUDA {builds.pypi_cuda} build: pass "
                f"--torch-cuda {builds.pypi_cuda} if this torch is PyPI's")
    if cuda is not None and builds.pypi_cuda != cuda:
        return (f"PyPI's torch {series} for {shown} is a CUDA {builds.pypi_cuda} build, and this "
                f"wheel is for CUDA {cuda}: install torch from PyTorch's cu{cuda_nodot(cuda)} index "
                f"({torch_index_url(cuda)})")
    return None


def _pytorch_index(listed: tuple[str, ...], wanted: str | None) -> str | None:
    """The CUDA of PyTorch's index to name: ``wanted`` when it is listed (the wheel's), else the
    newest listed."""
    if wanted is not None and wanted in listed:
        return wanted
    return max(listed, key=lambda v: tuple(int(p) for p in v.split(".")), default=None)

