"""What a failed compile log blames: ninja's failed target and the first compiler error.

Both backends read their package's build log with it (the host's ``pip wheel`` log, the
container's cibuildwheel log), so a failure names the file to look at.
"""

from __future__ import annotations

import re
from pathlib import Path

_NINJA_FAILED = re.compile(r"^FAILED: (?:\[code=\d+\] )?(\S+)")
_COMPILER_ERROR = re.compile(
    r"^(\S+\.(?:cu|cuh|cpp|cc|cxx|c|h|hpp))(?:\((\d+)\)|:(\d+)(?::\d+)?):? "
    r"(?:catastrophic |fatal )?error\b:?\s*(.*)")


def failing_file(log_text: str) -> str | None:
    """What a compile log blames: the target ninja says failed and the first compiler error
    (file:line: message), when the log names them."""
    target = error = None
    for line in log_text.splitlines():
        line = line.strip()
        if target is None and (m := _NINJA_FAILED.match(line)):
            target = Path(m.group(1)).name
        if error is None and (m := _COMPILER_ERROR.match(line)):
            error = f"{m.group(1)}:{m.group(2) or m.group(3)}: {m.group(4)[:160]}"
    if target and error:
        return f"{target} (first error: {error})"
    return target or error
