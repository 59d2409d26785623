"""Every wheel carries its upstream license files: the finish step refuses one that does not.

A wheel we publish redistributes someone else's code; most of their licenses (MIT, BSD,
Apache-2.0) let us do that only with the license text alongside. The package's own build puts
it there when it sees it: setuptools copies the files named by ``license-files`` (by default
``LICEN[CS]E*``, ``COPYING*``, ``NOTICE*``, ``AUTHORS*`` at the top of the source) into the
``.dist-info`` and names each in METADATA with a ``License-File:`` header.

The rule, read from the wheel alone:

- core metadata 2.4 (PEP 639): at least one ``License-File:`` header, each naming a file under
  ``.dist-info/licenses/``;
- older metadata: ``License-File:`` headers (setuptools wrote them before PEP 639, with the file
  at the top of ``.dist-info``), or else a file named ``LICENSE*``/``LICENCE*``/``COPYING*``/
  ``NOTICE*`` in the ``.dist-info`` (at its top or under ``licenses/``);
- every license file found is a member of the wheel and is listed in its RECORD (an installer
  that validates RECORD, or a distributor's audit, would otherwise drop or flag it).
"""

from __future__ import annotations

import csv
import io
import re
import zipfile
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath

from packaging.version import InvalidVersion, Version

from tools.core.errors import VerifyError

#: The core metadata version from which ``License-File`` is the standard (PEP 639) and the files
#: live under ``.dist-info/licenses/``.
PEP639_METADATA = Version("2.4")
#: File names that are license files when METADATA names none (setuptools' default patterns
#: less AUTHORS*, which names people, not terms).
_LICENSE_NAME = re.compile(r"^(LICEN[CS]E|COPYING|NOTICE)", re.IGNORECASE)
#: What the error tells a recipe author to do.
FIX = ("the package's sdist ships a license file that its build did not put into the wheel: "
       "add it to the build through the recipe's patch (recipes/<name>/patches/) or the "
       "package's license-files setting (pyproject.toml [project] license-files, or setup.cfg "
       "[metadata] license_files); if the sdist ships none, the recipe's patch adds the "
       "upstream LICENSE file")


def _dist_info(names: list[str], wheel: str) -> str:
    tops = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")}
    if len(tops) != 1:
        raise VerifyError(f"{wheel} has {len(tops)} .dist-info directories, not 1",
                          hint="the package's build produced a malformed wheel")
    return tops.pop()


def _recorded(zf: zipfile.ZipFile, dist_info: str, wheel: str) -> set[str]:
    try:
        text = zf.read(f"{dist_info}/RECORD").decode("utf-8")
    except KeyError:
        raise VerifyError(f"{wheel} has no {dist_info}/RECORD",
                          hint="the package's build produced a malformed wheel") from None
    return {row[0] for row in csv.reader(io.StringIO(text)) if row}


def _metadata(zf: zipfile.ZipFile, dist_info: str, wheel: str) -> tuple[Version, list[str]]:
    """The metadata version and the ``License-File`` values of the wheel's METADATA."""
    try:
        text = zf.read(f"{dist_info}/METADATA").decode("utf-8")
    except KeyError:
        raise VerifyError(f"{wheel} has no {dist_info}/METADATA",
                          hint="the package's build produced a malformed wheel") from None
    headers = HeaderParser().parsestr(text, headersonly=True)
    raw = (headers.get("Metadata-Version") or "").strip()
    try:
        version = Version(raw)
    except InvalidVersion:
        raise VerifyError(f"{wheel}: METADATA's Metadata-Version {raw!r} is not a version",
                          hint="the package's build produced a malformed wheel") from None
    return version, [v.strip() for v in headers.get_all("License-File") or [] if v.strip()]


def _candidates(dist_info: str, named: str, version: Version) -> list[str]:
    """Where the file a ``License-File: named`` header names may be in the wheel."""
    if version >= PEP639_METADATA:
        return [f"{dist_info}/licenses/{named}"]
    # Before PEP 639 setuptools put the file at the top of .dist-info, by its path (>= 69) or
    # by its bare name (older); a build backend that already followed PEP 639 used licenses/.
    return [f"{dist_info}/{named}", f"{dist_info}/{PurePosixPath(named).name}",
            f"{dist_info}/licenses/{named}"]


def _refuse(wheel: str, problem: str) -> VerifyError:
    return VerifyError(f"{wheel} carries no upstream license: {problem} (rule: every wheel "
                       "ships its package's license files in its .dist-info, named by "
                       "METADATA's License-File headers under core metadata 2.4)", hint=FIX)


def check_licenses(wheel: Path) -> tuple[str, ...]:
    """The license files ``wheel`` carries (members of its ``.dist-info``, sorted); VerifyError
    naming the wheel, the rule and the fix when it carries none, or when a file METADATA names
    is missing from the wheel or from its RECORD (see the module docstring)."""
    name = Path(wheel).name
    with zipfile.ZipFile(wheel) as zf:
        members = [n for n in zf.namelist() if not n.endswith("/")]
        dist_info = _dist_info(members, name)
        version, named = _metadata(zf, dist_info, name)
        recorded = _recorded(zf, dist_info, name)
    present = set(members)
    if named:
        found = []
        for value in named:
            places = _candidates(dist_info, value, version)
            hit = next((p for p in places if p in present), None)
            if hit is None:
                raise _refuse(name, f"METADATA names License-File {value!r} but the wheel has "
                                    f"no {' or '.join(places)}")
            found.append(hit)
    elif version >= PEP639_METADATA:
        raise _refuse(name, f"its METADATA (Metadata-Version {version}) has no License-File "
                            "header")
    else:
        found = [m for m in members if m.startswith(dist_info + "/")
                 and _LICENSE_NAME.match(PurePosixPath(m).name)
                 and PurePosixPath(m).parent.as_posix() in (dist_info, f"{dist_info}/licenses")]
        if not found:
            raise _refuse(name, f"its METADATA (Metadata-Version {version}) has no License-File "
                                f"header and {dist_info} holds no LICENSE*, COPYING* or "
                                "NOTICE* file")
    unrecorded = sorted(set(found) - recorded)
    if unrecorded:
        raise _refuse(name, f"{', '.join(unrecorded)} is in the wheel but not in its RECORD")
    return tuple(sorted(set(found)))


def licenses_summary(found: tuple[str, ...]) -> str:
    """The manifest's ``checks`` entry for the license files ``found``.

    >>> licenses_summary(("x-1.dist-info/licenses/LICENSE",))
    'passed: 1 license file(s): licenses/LICENSE'
    """
    shown = [f.split("/", 1)[1] for f in found]
    return f"passed: {len(found)} license file(s): {', '.join(shown)}"
