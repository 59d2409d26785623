"""The facts a site publishes for the selector, as data: ``<site>/selector.json``.

The index step writes it (tools.selector.bundle.facts_document) from recipes/table.yaml, so the
selector never carries a copy of the table. Format (``schema`` 1)::

    {"schema": 1,
     "min_driver": {"11.8": "450.80.02", "12.8": "525.60.13", "13.0": "580", ...}}

``min_driver``: the oldest NVIDIA driver that runs code built with each CUDA version of the table
(``cuda.<X.Y>.min_driver``). A site built before this file existed has none: the selector then
says that the driver check was not done, rather than guessing.
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


class FactsError(ValueError):
    """selector.json is not what this selector can read."""


@dataclass(frozen=True)
class SiteFacts:
    """What a site says about CUDA versions (see the module docstring)."""

    min_driver: dict[str, str] = field(default_factory=dict)

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
        return {"schema": SCHEMA, "min_driver": dict(ordered)}


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
    return SiteFacts(min_driver=dict(drivers))
