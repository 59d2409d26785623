"""``python -m tools.serve``: serve a built index on 127.0.0.1, with the PEP 691 content negotiation static hosting lacks.

The command: it parses the arguments, starts ``tools.sitegen.server.make_server``, prints where it
listens and serves until stopped.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.core.cliopts import option
from tools.core.errors import cli
from tools.sitegen import server


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.serve``: serve the site and the wheels until stopped."""
    parser = argparse.ArgumentParser(prog="python -m tools.serve", description="Serve a built index on 127.0.0.1 with PEP 691 content "
                                     "negotiation, until stopped.")
    parser.add_argument("--site", required=True, type=Path, metavar="DIR", help="the built site (INDEX_DIR)")
    option(parser, "--wheels", "--files", type=Path, default=None, metavar="DIR",
           help="the wheels directory, served at /files/")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the IP address to listen on: 127.0.0.1 (default), ::1, 0.0.0.0 or ::")
    parser.add_argument("--port", type=_port, default=8000, help="0-65535; 0 picks a free port")
    parser.add_argument("--log", type=Path, default=None,
                        help="append 'METHOD PATH STATUS' per request to this regular file")
    parser.add_argument("--no-negotiate", action="store_true", help="always answer HTML, like a static host")
    parser.add_argument("--exit-after", type=_seconds, default=None, metavar="SECONDS",
                        help="stop after this many seconds (a number above 0; default: never)")
    parser.add_argument("--quiet", action="store_true", help="no access log on stderr")
    parser.add_argument("--request-timeout", type=_seconds, default=server.REQUEST_TIMEOUT, metavar="SECONDS",
                        help="seconds a client has to send a request line and headers, and the most one read "
                             f"or write of a connection waits (default {server.REQUEST_TIMEOUT:g})")
    parser.add_argument("--response-timeout", type=_seconds, default=server.RESPONSE_TIMEOUT, metavar="SECONDS",
                        help="the most seconds one response may take to send: a client reading slower is cut "
                             f"off (default {server.RESPONSE_TIMEOUT:g})")
    return _run(parser.parse_args(argv))


def _port(text: str) -> int:
    """A port number for argparse: 0-65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535; 0 picks a free port)") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is outside 0-65535 (0 picks a free port)")
    return port


def _seconds(text: str) -> float:
    """A number of seconds for argparse: finite and above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


@cli
def _run(args: argparse.Namespace) -> int:
    httpd = server.make_server(args.site, args.wheels, host=args.host, port=args.port,
                              negotiate=not args.no_negotiate, log_path=args.log, quiet=args.quiet,
                              request_timeout=args.request_timeout, response_timeout=args.response_timeout)
    files = f", {args.wheels} at /files/" if args.wheels else ""
    print(f"serving {httpd.url}/ ({args.site}{files})", flush=True)
    server.serve(httpd, exit_after=args.exit_after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
