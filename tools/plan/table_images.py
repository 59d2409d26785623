"""The builder images' Pythons: the table's ``images:``, and the cells an image can't build.

A container cell is built by cibuildwheel with the image's own interpreter,
``/opt/python/cp314-cp314t/bin/python`` for ``3.14t`` (``tools.core.variant.opt_python_dir``).
Which interpreters an image holds is not the table's torch rows: PyTorch's builder images copy
``/opt/python`` from pypa/manylinux's image when they are built, so a tag holds what manylinux had
then (3.14/3.14t from 2025-05-10, 3.15/3.15t from 2026-05-07, when 3.13t left). So the table
records each image's list with its source (``images:``), ``python -m tools.refresh --images``
reads it from the images themselves where a container engine can pull them
(``tools.upstream.images``), and the planner plans no cell whose Python its image lacks:
:func:`missing_python` says why, and ``python -m tools.matrix --format counts`` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tools.core.variant import opt_python_dir
from .schema import Problems


@dataclass(frozen=True)
class ImagePythons:
    """The Pythons one builder image holds (cell spellings: ``3.12``, ``3.14t``), and where
    that was read."""

    image: str
    pythons: tuple[str, ...]
    source: str
    digest: str = ""
    note: str = ""


def parse_images(p: Problems, raw: Any) -> dict[str, ImagePythons]:
    """``images:``: each image's Pythons, each once, with the source (the shape is the
    schema's)."""
    out: dict[str, ImagePythons] = {}
    for image, entry in (p.shaped(raw, "images") or {}).items():
        where = f"images.{image}"
        m = p.shaped(entry, where)
        if m is None:
            continue
        pythons = tuple(m["pythons"])
        p.once(pythons, f"{where}.pythons", "Python")
        out[image] = ImagePythons(image, pythons, m["source"], m.get("digest", ""),
                                  m.get("note", ""))
    return out


def check_images_named(p: Problems, images: dict[str, ImagePythons],
                       used: dict[str, str]) -> None:
    """Every image a container cell may be built in (``used``: image -> where the table names
    it) has an ``images:`` entry: an image whose Pythons nobody recorded plans nothing."""
    for image, where in used.items():
        if image and image not in images:
            p.add(where, f"the image {image} has no entry under images: (its /opt/python "
                  "Pythons)", f"add images: {{\"{image}\": {{pythons: [...], source: ...}}}} "
                  "(python -m tools.refresh --images lists them where the image can be pulled)")


def missing_python(images: dict[str, ImagePythons], image: str, python: str) -> str | None:
    """Why ``image`` can't build a cell of ``python``, or None when it holds it (or the cell is
    built without an image: a native platform)."""
    if not image or image not in images:
        return None
    entry = images[image]
    if python in entry.pythons:
        return None
    return (f"{image} has no /opt/python/{opt_python_dir(python)} (the table's images: "
            f"lists {', '.join(entry.pythons)})")
