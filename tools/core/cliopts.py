"""One spelling per concept on every command line, with the old spellings still accepted.

The commands share four concepts, each with one option name:

- ``--site DIR``: a built index site (``python -m tools.index`` writes it, ``tools.serve``
  serves it); was ``--output-dir``.
- ``--wheels DIR``: a directory of built wheels (the batch ``tools.index`` publishes, what
  ``tools.serve`` serves at /files/, where ``tools.build`` puts its verified wheel); was
  ``--wheels-dir``, ``--files``, ``--out``.
- ``--ledger FILE``: the record of everything published.
- ``--python X.Y[,X.Y]``: Python *versions* (a filter or the versions to build for), as
  ``tools.matrix`` and the release always took them; ``--interpreter PATH`` is an existing
  interpreter's path (was ``--python PATH`` in ``tools.build`` and ``tools.kernelcheck``): a
  version and a path are different values, so they get different names.

:func:`option` adds the name and keeps each old spelling working, hidden from ``--help``, so
workflows and scripts written against it go on running.
"""

from __future__ import annotations

import argparse
from typing import Any

#: The keywords an old spelling shares with the option it stands for.
_SHARED = ("type", "action", "choices", "nargs", "metavar", "const")


def option(ap: Any, flag: str, *old: str, **kw: Any) -> argparse.Action:
    """Add ``flag`` to ``ap`` (a parser or an argument group) with ``kw``; each ``old`` spelling
    sets the same value and is left out of ``--help``. A required option stays required whichever
    spelling gives it (giving two of them is an error)."""
    if not old:
        return ap.add_argument(flag, **kw)
    required = kw.pop("required", False)
    where = ap.add_mutually_exclusive_group(required=True) if required else ap
    action = where.add_argument(flag, **kw)
    shared = {k: v for k, v in kw.items() if k in _SHARED}
    if shared.get("action") in ("store_true", "store_false"):
        shared.pop("metavar", None)
    for spelling in old:
        where.add_argument(spelling, dest=action.dest, help=argparse.SUPPRESS,
                           default=argparse.SUPPRESS, **shared)
    return action
