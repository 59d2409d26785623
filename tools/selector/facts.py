"""The facts a site publishes for the selector, as data: ``<site>/selector.json``.

The index step writes it (tools.selector.bundle.facts_document) from recipes/table.yaml, so the
selector never carries a copy of the table. Format (``schema`` 1)::

    {"schema": 1,
     "min_driver": {"11.8": "450.80.02", "12.8": "525.60.13", "13.0": "580", ...},
     "torch_platforms": {"2.10": {"linux_aarch64": {"pypi_cuda": null, "cuda": ["12.6", "12.8", "13.0"]},
                                  "linux_x86_64": {"pypi_cuda": "12.8", "cuda": [...]}, ...}, ...}}

``min_driver``: the oldest NVIDIA driver that runs code built with each CUDA version of the table
(``cuda.<X.Y>.min_driver``). A site built before this file existed has none: the selector then
says that the driver check was not done, rather than guessing.

``torch_platforms`` (optional: older sites don't write it): per torch series and platform
(tools.core.platforms), which CUDA PyPI's torch wheel is built with (``pypi_cuda``; null: PyPI's
wheel for that platform is CPU-only, as aarch64's were before torch 2.11) and the CUDA versions
PyTorch's own index has builds for. A series or platform it doesn't name is unknown, and the
selector says nothing of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

#: The file's name under the site root.
FACTS_FILE = "selector.json"
SCHEMA = 1
_CUDA = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3})?")
_DRIVER = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){0,3}")
_SERIES = re.compile(r"[0-9]{1,3}\.[0-9]{1,4}")
#: A platform name: those of tools.core.platforms, and any later one this selector doesn't know.
_PLATFORM = re.compile(r"[a-z0-9_]{1,40}")
#: The most CUDA versions one (series, platform) lists.
_MAX_CUDA = 64


class FactsError(ValueError):
    """selector.json is not what this selector can read."""


@dataclass(frozen=True)
class TorchBuilds:
    """Where torch of one series has CUDA builds for one platform: ``pypi_cuda``, the CUDA of
    PyPI's wheel (None: CPU-only there), and ``cuda``, those of PyTorch's index."""

    pypi_cuda: str | None
    cuda: tuple[str, ...] = ()


@dataclass(frozen=True)
class SiteFacts:
    """What a site says about CUDA versions and torch's builds (see the module docstring)."""

    min_driver: dict[str, str] = field(default_factory=dict)
    #: torch series -> platform name -> TorchBuilds
    torch_platforms: dict[str, dict[str, TorchBuilds]] = field(default_factory=dict)

    def torch_builds(self, series: str, platform: str) -> TorchBuilds | None:
        """What the site says of torch ``series`` on ``platform``; None when it doesn't say."""
        return self.torch_platforms.get(series, {}).get(platform)

    def driver_for(self, cuda: str) -> str | None:
        """The oldest driver for code built with ``cuda`` (``"12.8"``, or ``"12"`` for any 12.x).

        A version the table lacks gets the lowest floor among the table's versions of the same
        major: CUDA's minor-version compatibility lets every minor of a major run on that driver.
        """
        if cuda in self.min_driver:
            return self.min_driver[cuda]
        major = cuda.split(".")[0]
        same_major = [v for c, v in self.min_driver.items() if c.split(".")[0] == major]
        return min(same_major, key=_driver_key) if same_major else None

    def to_json(self) -> dict[str, Any]:
        """The document as written to selector.json."""
        ordered = sorted(self.min_driver.items(), key=lambda kv: _driver_key(kv[0]))
        doc: dict[str, Any] = {"schema": SCHEMA, "min_driver": dict(ordered)}
        if self.torch_platforms:
            doc["torch_platforms"] = {
                series: {name: {"pypi_cuda": b.pypi_cuda, "cuda": list(b.cuda)}
                         for name, b in sorted(platforms.items())}
                for series, platforms in sorted(self.torch_platforms.items(),
                                                key=lambda kv: _driver_key(kv[0]))}
        return doc


def _driver_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def parse_facts(doc: Any, where: str) -> SiteFacts:
    """A SiteFacts from the parsed JSON of selector.json at ``where``; FactsError names what is wrong."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise FactsError(f"{where}: not a schema {SCHEMA} {FACTS_FILE} (a newer site? update the selector)")
    drivers = doc.get("min_driver")
    if not isinstance(drivers, dict) or not all(isinstance(k, str) and _CUDA.fullmatch(k) and isinstance(v, str)
                                                and _DRIVER.fullmatch(v) for k, v in drivers.items()):
        raise FactsError(f"{where}: 'min_driver' must map CUDA versions to driver versions (strings such as "
                         '"12.8": "570.26")')
    return SiteFacts(min_driver=dict(drivers), torch_platforms=_torch_platforms(doc.get("torch_platforms"), where))


def _torch_platforms(value: Any, where: str) -> dict[str, dict[str, TorchBuilds]]:
    """``torch_platforms`` checked field by field (absent: an older site, nothing known)."""
    if value is None:
        return {}
    wrong = FactsError(f"{where}: 'torch_platforms' must map torch series to platforms to "
                       '{"pypi_cuda": "13.0" or null, "cuda": ["12.8", ...]}')
    if not isinstance(value, dict):
        raise wrong
    out: dict[str, dict[str, TorchBuilds]] = {}
    for series, platforms in value.items():
        if not (isinstance(series, str) and _SERIES.fullmatch(series) and isinstance(platforms, dict)):
            raise wrong
        for name, entry in platforms.items():
            if not (isinstance(name, str) and _PLATFORM.fullmatch(name) and isinstance(entry, dict)):
                raise wrong
            pypi, cuda = entry.get("pypi_cuda"), entry.get("cuda", [])
            if pypi is not None and not (isinstance(pypi, str) and _CUDA.fullmatch(pypi)):
                raise wrong
            if not (isinstance(cuda, list) and len(cuda) <= _MAX_CUDA
                    and all(isinstance(c, str) and _CUDA.fullmatch(c) for c in cuda)):
                raise wrong
            if "pypi_cuda" in entry:  # without it, what PyPI has is unknown: the entry says nothing
                out.setdefault(series, {})[name] = TorchBuilds(pypi, tuple(cuda))
    return out
