"""``python -m tools.ledger``: the ledger: the record of every file the index has ever published.

The command: ``hold-back`` sets aside the wheels of a batch whose file names are already
published, or were and were removed (``tools.sitegen.ledger_file.hold_back_published``), and says what
it did with each.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.core.cliopts import option
from tools.core.errors import cli
from tools.sitegen.ledger_file import hold_back_published, load_ledger_document


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.ledger hold-back``: set aside the wheels of a batch already published."""
    parser = argparse.ArgumentParser(prog="python -m tools.ledger", description="The ledger of published files: hold back the wheels "
                                     "of a batch already published.")
    sub = parser.add_subparsers(dest="command", required=True)
    hold = sub.add_parser("hold-back",
                          help="move wheels whose file names the ledger has (published or removed) out of the batch")
    hold.add_argument("--ledger", required=True, type=Path, metavar="FILE",
                      help="the ledger (the live site's ledger.json)")
    option(hold, "--wheels", "--wheels-dir", required=True, type=Path, metavar="DIR",
           help="the batch of wheels to publish")
    hold.add_argument("--to", required=True, type=Path, dest="held_dir", metavar="DIR",
                      help="where the held-back wheels go")
    return _run(parser.parse_args(argv))


@cli
def _run(args: argparse.Namespace) -> int:
    report = hold_back_published(wheels_dir=args.wheels, ledger=load_ledger_document(args.ledger),
                                 held_dir=args.held_dir)
    for h in report.held:
        if h.removed:
            print(f"{h.filename}: removed from the index (--remove), and stays out: not published again. "
                  "To publish it again: python -m tools.index --restore " + h.filename)
        elif h.same_bytes:
            print(f"{h.filename}: already published, same bytes (a re-run): not published again")
        else:
            print(f"{h.filename}: already published with other bytes: the published file stays. "
                  "To publish this rebuild, give it a new file name: raise build.number in its "
                  "recipe (or bump source.version)")
    print(f"{report.remaining} new wheel(s) to publish, {len(report.held)} held back in {args.held_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
