"""``python -m tools.serve``: serve a built index on 127.0.0.1, with the PEP 691 content negotiation static hosting lacks.

The command: it parses the arguments, starts ``tools.sitegen.server.make_server``, prints where it
listens and serves until stopped.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.core.errors import cli
from tools.sitegen import server


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.serve``: serve the site and the wheels until stopped."""
    parser = argparse.ArgumentParser(prog="python -m tools.serve", description=server.__doc__.split("\n\n")[0])
    parser.add_argument("--site", required=True, type=Path, help="the built site (INDEX_DIR)")
    parser.add_argument("--files", type=Path, default=None, help="wheels directory, served at /files/")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--log", type=Path, default=None, help="append 'METHOD PATH STATUS' per request here")
    parser.add_argument("--no-negotiate", action="store_true", help="always answer HTML, like a static host")
    parser.add_argument("--exit-after", type=float, default=0, help="stop after this many seconds (0: never)")
    parser.add_argument("--quiet", action="store_true", help="no access log on stderr")
    parser.add_argument("--request-timeout", type=float, default=server.REQUEST_TIMEOUT,
                        help="seconds a client has to send a request line and headers, and the most one read "
                             f"or write of a connection waits (default {server.REQUEST_TIMEOUT:g})")
    return _run(parser.parse_args(argv))


@cli
def _run(args: argparse.Namespace) -> int:
    httpd = server.make_server(args.site, args.files, host=args.host, port=args.port,
                              negotiate=not args.no_negotiate, log_path=args.log, quiet=args.quiet,
                              request_timeout=args.request_timeout)
    files = f", {args.files} at /files/" if args.files else ""
    print(f"serving {httpd.url}/ ({args.site}{files})", flush=True)
    server.serve(httpd, exit_after=args.exit_after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
