"""``python -m tools``: every command of the project, one line each (``--help`` says the same)."""

import sys

from tools.devtools.commandline import listing


def main(argv: list[str] | None = None) -> int:
    """Print the command list; any argument other than -h/--help is refused."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] not in ("-h", "--help"):
        print(listing(), file=sys.stderr)
        print(f"\nerror: {args[0]!r} is not an option of python -m tools: run a command as "
              "python -m tools.COMMAND", file=sys.stderr)
        return 2
    print(listing())
    return 0


if __name__ == "__main__":
    sys.exit(main())
