"""The builder images' Pythons, read from the images: ``python -m tools.refresh --images``.

For each image of the table's ``images:`` (``tools.plan.table_images``), a container engine lists
``/opt/python`` in it (``<engine> run --rm IMAGE ls -1 /opt/python``, pulling the image when it
is not here) and reads its digest (``<engine> image inspect``); the folders become the cell
spellings (``cp312-cp312`` -> ``3.12``, ``cp314-cp314t`` -> ``3.14t``; PyPy and anything else
are not cell Pythons). An entry read so is rewritten with its listing, the digest and where and
when it was read; an image that can't be pulled or listed keeps its entry, and the summary says
why. The change is proposed like the rest of the refresh: a diff of the table, or ``--write``.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tools.backends.engine import image_labels
from tools.backends.machine import StartCheck, current_machine
from tools.core.errors import ToolchainError
from tools.plan.table import python_key
from .yamltext import dump, flow, quoted, yaml_rt

#: A CPython folder of a manylinux image: ``cp314-cp314t`` (free-threaded), ``cp312-cp312``.
_CPYTHON_DIR = re.compile(r"cp3([0-9]+)-cp3\1(t?)")
Run = Callable[..., subprocess.CompletedProcess]


def pythons_of(listing: str) -> list[str]:
    """The cell Pythons of an ``ls -1 /opt/python`` listing, sorted (``3.14`` before
    ``3.14t``).

    >>> pythons_of("cp312-cp312\\ncp314-cp314t\\npp310-pypy310_pp73\\n")
    ['3.12', '3.14t']
    """
    found = {f"3.{m.group(1)}{m.group(2)}" for line in listing.split()
             if (m := _CPYTHON_DIR.fullmatch(line.strip()))}
    return sorted(found, key=python_key)


@dataclass(frozen=True)
class ImageListing:
    """What one image was found to hold: its Pythons and digest, or why it could not be read."""

    image: str
    pythons: tuple[str, ...] = ()
    digest: str = ""
    error: str = ""


def list_image(engine: str, image: str, run: Run = subprocess.run, timeout: int = 1800,
               start: Callable[[str, str], StartCheck] | None = None) -> ImageListing:
    """``image``'s Pythons and digest, read by starting it with ``engine`` (pulled when
    missing); an ImageListing with ``error`` when it can't be. An image already here is started
    the way this machine starts containers (``start``, default the machine hook's:
    ``tools.backends.machine``), which may need a runtime wrapper."""
    runtime: tuple[str, ...] = ()
    try:
        here = image_labels(engine, image) is not None
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ImageListing(image, error=f"`{engine} image inspect {image}` did not run: {exc}")
    if here:
        started = (start or current_machine().start)(engine, image)
        if not started.ok:
            return ImageListing(image, error=started.why)
        runtime = tuple(started.runtime_args)
    argv = [engine, *runtime, "run", "--rm", "--pull=missing", "--entrypoint", "ls", image, "-1",
            "/opt/python"]
    try:
        proc = run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ImageListing(image, error=f"`{' '.join(argv)}` did not run: {exc}")
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        return ImageListing(image, error=f"`{' '.join(argv)}` failed (exit {proc.returncode}): "
                                    f"{said[-1] if said else 'no output'}")
    pythons = pythons_of(proc.stdout)
    if not pythons:
        return ImageListing(image, error="its /opt/python holds no CPython (cpXY-cpXY folders)")
    inspect = run([engine, "image", "inspect", "--format", "{{.Digest}}", image],
                  capture_output=True, text=True, timeout=120)
    digest = inspect.stdout.strip() if inspect.returncode == 0 else ""
    return ImageListing(image, tuple(pythons), digest if re.fullmatch(r"sha256:[0-9a-f]{64}",
                                                                 digest) else "")


@dataclass
class ImagesProposal:
    """The table with each readable image's entry rewritten, and what each image said."""

    path: Path
    old: str
    new: str
    listings: list[ImageListing] = field(default_factory=list)

    def summary(self) -> str:
        """One line per image: its Pythons and digest as read, or why it wasn't."""
        lines = [f"builder images' Pythons ({len(self.listings)} images):"]
        for it in self.listings:
            lines.append(f"- {it.image}: not read: {it.error}" if it.error else
                         f"- {it.image}: {', '.join(it.pythons)}"
                         + (f" ({it.digest})" if it.digest else ""))
        return "\n".join(lines)


def propose_images(table_path: Path, engine: str, date: str, run: Run = subprocess.run
                   ) -> ImagesProposal:
    """Read every image of the table's ``images:`` with ``engine`` and propose the table with
    each readable entry rewritten; ToolchainError when the table has no ``images:``."""
    old = table_path.read_text(encoding="utf-8")
    doc = yaml_rt().load(old)
    entries = doc.get("images") if hasattr(doc, "get") else None
    if not entries:
        raise ToolchainError(f"{table_path} has no images: section to refresh",
                             hint="add images: (tools/plan/table_images.py) first")
    proposal = ImagesProposal(table_path, old, old)
    for image in list(entries):
        listing = list_image(engine, image, run)
        proposal.listings.append(listing)
        if listing.error:
            continue
        entry = entries[image]
        entry["pythons"] = flow(listing.pythons)
        where = f"{image}@{listing.digest}" if listing.digest else image
        entry["source"] = quoted(f"`{engine} run {where} ls -1 /opt/python` on {date}")
        if listing.digest:
            entry["digest"] = quoted(listing.digest)
        elif "digest" in entry:
            del entry["digest"]
        if "note" in entry:
            del entry["note"]
    proposal.new = dump(doc)
    return proposal
