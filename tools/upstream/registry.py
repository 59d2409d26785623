"""Reading the registry: PyPI's JSON API, a torch wheel's members by HTTP range requests, and
torch's own index of CUDA variants. What ``tools.refresh`` compares with the table and recipes.

The reads follow the table's ``source:`` entries: the project URL
(``https://pypi.org/pypi/<name>/json``; the per-version URL answers 404 from some networks), then,
per torch release, one x86_64 Linux wheel's ``METADATA``, ``torch/version.py`` and
``torch/lib/libshm.so`` (about 1.3 MB of a 500-900 MB wheel), and for a series new to the table,
the ``torch/version.py`` of one wheel per other platform of the table (``manylinux_*_aarch64``,
``win_amd64``: :func:`read_platform`). Values that cannot be read are ``None`` with a note;
nothing is guessed.
"""

from __future__ import annotations

import io
import json
import re
import urllib.parse
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from tools.core.httpclient import PYPI_FILES, check_url, download
from tools.core.progress import StepCounter
from tools.core.errors import RegistryError
from tools.core.rangeread import RangeReader
from tools.plan.table import version_key

PYPI_JSON = "https://pypi.org/pypi/"
#: torch's own index of every variant (one page lists the files of every ``cuXYZ`` index).
TORCH_VARIANTS = "https://download.pytorch.org/whl/torch/"
#: PyTorch's test index, where release candidates are published weeks before the release (under
#: the final's version number): its page listing every torch file, plain and ``+cuXYZ``.
TORCH_TEST = "https://download.pytorch.org/whl/test/torch/"
USER_AGENT = "cuwheels-refresh/1"
#: The User-Agent of the range reads of a wheel's members: the agent these reads have always
#: sent (the selector's), kept so that a registry's logs and rules see the same client.
RANGE_USER_AGENT = "cuwheels-select/1"
#: A file up to this size is read whole when the server ignores range requests.
WHOLE_FILE_LIMIT = 16 << 20
#: The largest answer read whole: a project's JSON (torch's is 0.8 MB) or an sdist (the largest
#: a recipe builds is 8.5 MB).
MAX_ANSWER_BYTES = 128 << 20
#: Seconds one answer may take in all, however steadily its bytes trickle in.
ANSWER_DEADLINE = 300.0
_HINT = "nothing was written; run again when the registry answers"
#: The wheel read for a torch release: the newest Python's would follow torch's support window,
#: so one in the middle of every window since 2.4 is taken first.
PREFERRED_PYTHON = ("cp312", "cp313", "cp311", "cp314")

_SERIES_RE = re.compile(r"(\d+)\.(\d+)")
_VARIANT_RE = re.compile(r"torch-(\d+\.\d+\.\d+)(?:%2B|\+)cu(\d+)(\d)-cp\d+-cp\d+t?-"
                         r"(?:manylinux|linux)[\w.]*x86_64\.whl")
_PIN_RES = (  # which pin names the CUDA build: cuda-toolkit from 2.11, nvidia-*-cu12 before
    re.compile(r"^(cuda-toolkit)(\[[^\]]*\])?\s*==\s*(\d+)\.(\d+)[.\d]*"),
    re.compile(r"^(nvidia-cuda-runtime(?:-cu\d+)?)()\s*==\s*(\d+)\.(\d+)[.\d]*"),
)
_VERSION_PY_RE = re.compile(r"^__version__\s*=\s*'([^']+)'", re.M)
_CUDA_PY_RE = re.compile(r"^cuda(?::\s*Optional\[str\])?\s*=\s*'(\d+)\.(\d+)'", re.M)
#: A CPU-only build's ``torch/version.py`` (``cuda: Optional[str] = None``).
_NO_CUDA_PY_RE = re.compile(r"^cuda(?::\s*Optional\[str\])?\s*=\s*None\s*$", re.M)
#: A ``+cuXYZ`` wheel on torch's page, any platform: (release, CUDA major, minor, platform tag).
_ANY_VARIANT_RE = re.compile(r"torch-(\d+\.\d+\.\d+)(?:%2B|\+)cu(\d+)(\d)-cp\d+-cp\d+t?-"
                             r"([\w.]+)\.whl")
_GIT_PY_RE = re.compile(r"^git_version\s*=\s*'([0-9a-f]{7,40})'", re.M)
_LEGACY_MANYLINUX = ("manylinux1_", "manylinux2010_", "manylinux2014_", "linux_")


@dataclass
class Registry:
    """Where the registry and torch's variant index answer (tests point both at 127.0.0.1).

    Every read goes to the JSON API's origin, the variant index's or PyPI's file host, and no
    other (whatever URL an answer names); ``timeout`` bounds one read, ``deadline`` a whole
    answer and ``max_bytes`` its size.
    """

    pypi: str = PYPI_JSON
    variants: str = TORCH_VARIANTS
    timeout: float = 60
    deadline: float = ANSWER_DEADLINE
    max_bytes: int = MAX_ANSWER_BYTES
    #: PyTorch's test index page (release candidates), read by ``--rc`` only.
    test: str = TORCH_TEST
    #: Counts each read, for the command's progress line (None: not shown).
    progress: StepCounter | None = field(default=None, compare=False, repr=False)

    def origins(self) -> tuple[str, ...]:
        """Where this client reads: the JSON API, the variant index, the test index and PyPI's
        file host."""
        return (self.pypi, self.variants, self.test, PYPI_FILES)

    def project(self, name: str) -> tuple[dict[str, Any], str]:
        """The JSON API's answer for a project and the URL it came from."""
        url = urllib.parse.urljoin(self.pypi, f"{name}/json")
        try:
            return json.loads(self._get(url)), url
        except ValueError as exc:
            raise RegistryError(f"{url}: the answer is not JSON ({exc})") from None

    def _get(self, url: str) -> bytes:
        if self.progress is not None:
            self.progress.advance(_short(url))
        body = io.BytesIO()
        download(url, body, origins=self.origins(), error=RegistryError, hint=_HINT,
                 max_bytes=self.max_bytes, deadline=self.deadline, timeout=self.timeout,
                 user_agent=USER_AGENT)
        return body.getvalue()

    def members(self, url: str, size: int | None, wanted: Iterable[str]) -> dict[str, bytes]:
        """The named members of the remote zip at ``url``, read with HTTP range requests
        (``size`` None: asked of the server with a one-byte range request)."""
        check_url(url, self.origins(), RegistryError)
        if self.progress is not None:
            self.progress.advance(_short(url))
        try:
            # Without a size the reader asks the server first: inside, so its errors are named.
            reader = RangeReader(url, size, timeout=self.timeout, user_agent=RANGE_USER_AGENT,
                                 whole_file_limit=WHOLE_FILE_LIMIT)
            reader.prefetch_tail()
            with zipfile.ZipFile(reader) as zf:
                names = set(zf.namelist())
                return {n: zf.read(n) for n in wanted if n in names}
        except Exception as exc:  # the reader raises urllib's, zipfile's and its own errors
            raise RegistryError(f"reading {url} with range requests failed: "
                                f"{type(exc).__name__}: {exc}", hint=_HINT) from None

    def download(self, url: str, dest: Path) -> Path:
        """Download ``url`` (an sdist: kilobytes to megabytes) to ``dest``: only from where this
        client reads, within its deadline and size cap (else RegistryError, nothing written)."""
        dest.write_bytes(self._get(url))
        return dest

    def variant_page(self) -> str:
        """torch's page listing every variant's files (RegistryError when it doesn't answer)."""
        return self._get(self.variants).decode("utf-8", "replace")

    def test_page(self) -> str:
        """PyTorch's test index page of torch's files (RegistryError when it doesn't answer)."""
        return self._get(self.test).decode("utf-8", "replace")


# --------------------------------------------------------------------------- reading torch


@dataclass
class TorchFacts:
    """What the registry says about one torch series (its newest release); None: not read."""

    series: str
    release: str
    python: list[str] = field(default_factory=list)
    free_threaded: list[str] = field(default_factory=list)
    pypi_cuda: str | None = None
    manylinux: str | None = None
    cxx11_abi: bool | None = None
    variants: list[str] | None = None
    #: The commit the wheel read was built from (``torch/version.py``'s ``git_version``).
    git: str | None = None
    #: How each value was read, for the row's ``source:``.
    how: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: Platform -> what PyPI has of the release there (:func:`read_platform`); read for a
    #: series new to the table only, for the table's platforms other than Linux x86_64.
    platforms: dict[str, PlatformFacts] = field(default_factory=dict)


@dataclass
class PlatformFacts:
    """What PyPI has of one torch release for a platform other than Linux x86_64: its files and
    the CUDA version of one wheel's ``torch/version.py``."""

    platform: str
    release: str
    #: The wheel platform tags of its files (``manylinux_2_28_aarch64``); empty: PyPI has none.
    tags: list[str] = field(default_factory=list)
    #: The wheel whose ``torch/version.py`` was read, its ``__version__`` and CUDA version.
    wheel: str | None = None
    local: str | None = None
    cuda: str | None = None
    #: True when that ``torch/version.py`` says ``cuda = None``: PyPI's wheel is CPU-only.
    cpu_only: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def files(self) -> str:
        """The file names as a row's ``source:`` names them:
        ``torch-2.15.0-cp3XX-cp3XX-manylinux_2_28_aarch64.whl``."""
        return ", ".join(f"torch-{self.release}-cp3XX-cp3XX-{t}.whl" for t in self.tags)

    @property
    def known(self) -> bool:
        """Whether the CUDA build of PyPI's wheel was read (a CUDA version, or CPU-only)."""
        return self.cuda is not None or self.cpu_only


def _short(url: str) -> str:
    """The end of a URL's path, for the progress line (``torch/json``, a wheel's name)."""
    return "/".join(urllib.parse.urlsplit(url).path.rstrip("/").split("/")[-2:])


def release_wheels(files: list[dict]) -> Iterator[tuple[dict, Any, Any]]:
    """(file, build tag, tags) for every non-yanked wheel of a release whose name parses."""
    for f in files:
        if f.get("packagetype") != "bdist_wheel" or f.get("yanked"):
            continue
        try:
            _, _, build, tags = parse_wheel_filename(f["filename"])
        except InvalidWheelFilename:
            continue
        yield f, build, tags


def _linux_wheels(files: list[dict]) -> list[tuple[dict, Any]]:
    """(file, its tags) for every non-yanked x86_64 Linux wheel of a release."""
    out = []
    for f, build, tags in release_wheels(files):
        if any(t.platform.endswith("x86_64") and "linux" in t.platform for t in tags):
            out.append((f, build, tags))
    return out


def newest_by_series(doc: dict[str, Any]) -> dict[str, str]:
    """Series -> its newest final release that has a Linux x86_64 wheel (never a pre-release)."""
    best: dict[str, Version] = {}
    for text, files in doc.get("releases", {}).items():
        try:
            v = Version(text)
        except InvalidVersion:
            continue
        if v.is_prerelease or v.is_devrelease or not _linux_wheels(files):
            continue
        series = f"{v.major}.{v.minor}"
        if series not in best or v > best[series]:
            best[series] = v
    return {s: str(v) for s, v in sorted(best.items(), key=lambda kv: version_key(kv[0]))}


def python_versions(wheels: list[tuple[dict, Any, Any]]) -> tuple[list[str], list[str]]:
    """(CPython versions, free-threaded ones as ``3.14t``) of a release's Linux wheels."""
    regular, threaded = set(), set()
    for _f, _b, tags in wheels:
        for t in tags:
            m = re.fullmatch(r"cp(\d)(\d+)", t.interpreter)
            if m and t.abi == t.interpreter:
                regular.add(f"{m[1]}.{m[2]}")
            elif m and t.abi == t.interpreter + "t":
                threaded.add(f"{m[1]}.{m[2]}t")
    key = lambda p: version_key(p.rstrip("t"))  # noqa: E731 - a sort key
    return sorted(regular, key=key), sorted(threaded, key=key)


def manylinux_tag(wheels: list[tuple[dict, Any, Any]]) -> str | None:
    """The PEP 600 glibc baseline the x86_64 file names state (``"2_28"``); None when they
    carry only legacy tags (``manylinux1``: the real floor must be read from the libraries)."""
    floors = set()
    for _f, _b, tags in wheels:
        pep600 = [tuple(map(int, m.groups())) for t in tags
                  if (m := re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", t.platform))]
        if pep600:
            floors.add(min(pep600))
    if len(floors) != 1:
        return None
    major, minor = floors.pop()
    return f"{major}_{minor}"


def cuda_from_requires(lines: Iterable[str]) -> tuple[str | None, str]:
    """(CUDA major.minor, the pin it came from) from a torch wheel's Requires-Dist lines."""
    for line in lines:
        req = line.split(";")[0].strip()
        for pattern in _PIN_RES:
            if m := pattern.match(req):
                extras = "[...]" if m[2] else ""
                return f"{m[3]}.{m[4]}", f"{m[1]}{extras}=={req.split('==', 1)[1].strip()}"
    return None, ""


def elf_facts(data: bytes) -> tuple[bool, str | None]:
    """(any ``std::__cxx11`` name among the dynamic symbols, the newest ``GLIBC_2.N`` needed as
    ``"2_N"``) of a shared library."""
    elf = ELFFile(io.BytesIO(data))
    cxx11 = any("__cxx11" in s.name for sec in elf.iter_sections()
                if sec.header.sh_type == "SHT_DYNSYM" for s in sec.iter_symbols())
    glibc = []
    for sec in elf.iter_sections():
        if isinstance(sec, GNUVerNeedSection):
            for _verneed, auxes in sec.iter_versions():
                for aux in auxes:
                    if m := re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", aux.name):
                        glibc.append((int(m[1]), int(m[2])))
    return cxx11, (f"{max(glibc)[0]}_{max(glibc)[1]}" if glibc else None)


def read_torch(registry: Registry, doc: dict, json_url: str, release: str, *,
               listing: str | None = None) -> TorchFacts:
    """Read one torch release: file names from the JSON, then one wheel's members by range.
    ``listing``: where the file names were read when not from PyPI's JSON (the test index's page;
    ``doc`` then holds its files in the JSON's shape, ``size`` None: asked of the server)."""
    facts = TorchFacts(f"{Version(release).major}.{Version(release).minor}", release)
    wheels = _linux_wheels(doc["releases"][release])
    facts.python, facts.free_threaded = python_versions(wheels)
    facts.how["python"] = (f"{listing} (torch-{release} x86_64 Linux file names)" if listing
                           else f"PyPI JSON releases['{release}'] (x86_64 Linux file names)")
    facts.manylinux = manylinux_tag(wheels)
    if facts.manylinux:
        facts.how["manylinux"] = f"manylinux_{facts.manylinux}_x86_64 file names"
    regular = [(f, b, t) for f, b, t in wheels if any(x.abi == x.interpreter for x in t)]
    pick = None
    for py in PREFERRED_PYTHON:
        hits = sorted((w for w in regular if any(t.interpreter == py for t in w[2])),
                      key=lambda w: w[1])  # the highest build tag is what pip installs
        if hits:
            pick = hits[-1][0]
            break
    if pick is None:
        facts.notes.append(f"torch {release}: no CPython x86_64 Linux wheel to read; check its "
                           "CUDA build, C++ ABI and glibc floor by hand")
        return facts
    dist = f"torch-{release}.dist-info/METADATA"
    wanted = [dist, "torch/version.py", "torch/lib/libshm.so"]
    if facts.manylinux is None:
        wanted.append("torch/lib/libc10.so")
    url = urllib.parse.urljoin(json_url, pick["url"])
    got = registry.members(url, int(pick["size"]) if pick.get("size") is not None else None,
                           wanted)
    meta = got.get(dist, b"").decode("utf-8", "replace")
    requires = [ln.split(":", 1)[1].strip() for ln in meta.splitlines()
                if ln.startswith("Requires-Dist:")]
    cuda, pin = cuda_from_requires(requires)
    vpy = got.get("torch/version.py", b"").decode("utf-8", "replace")
    local = _VERSION_PY_RE.search(vpy)
    cuda_py = _CUDA_PY_RE.search(vpy)
    git = _GIT_PY_RE.search(vpy)
    facts.git = git[1] if git else None
    cuda_py_text = f"{cuda_py[1]}.{cuda_py[2]}" if cuda_py else None
    where = pick["filename"]
    if cuda and cuda_py_text and cuda != cuda_py_text:
        facts.notes.append(f"torch {release}: {where} pins {pin} but its torch/version.py says "
                           f"CUDA {cuda_py_text}; check which build PyPI serves")
    elif cuda or cuda_py_text:
        facts.pypi_cuda = cuda or cuda_py_text
        facts.how["pypi_cuda"] = ", ".join(filter(None, [
            f"wheel METADATA ({pin})" if pin else "",
            f"torch/version.py ({local[1] if local else 'cuda ' + cuda_py_text})"
            if cuda_py_text else ""]))
    else:
        facts.notes.append(f"torch {release}: {where} pins no CUDA package and its "
                           "torch/version.py names no CUDA; check whether it is a CUDA build")
    if "torch/lib/libshm.so" in got:
        facts.cxx11_abi, _ = elf_facts(got["torch/lib/libshm.so"])
        facts.how["cxx11_abi"] = ("std::__cxx11 symbols in torch/lib/libshm.so" if facts.cxx11_abi
                                  else "no std::__cxx11 symbol in torch/lib/libshm.so")
    else:
        facts.notes.append(f"torch {release}: {where} has no torch/lib/libshm.so; check its C++ "
                           "ABI (torch._C._GLIBCXX_USE_CXX11_ABI)")
    if facts.manylinux is None:
        floor = elf_facts(got["torch/lib/libc10.so"])[1] if "torch/lib/libc10.so" in got else None
        if floor:
            facts.manylinux = floor
            glibc = floor.replace("_", ".")
            facts.how["manylinux"] = (f"legacy platform tag in the file names; GLIBC_{glibc} is "
                                      "the newest glibc version torch/lib/libc10.so needs")
        else:
            facts.notes.append(f"torch {release}: the file names carry no PEP 600 manylinux tag "
                               "and libc10.so's glibc needs could not be read; check its glibc "
                               "floor")
    facts.how["read"] = f"{where} read with HTTP range requests"
    return facts


def platform_tag_re(tag: str) -> re.Pattern[str]:
    """A table platform's tag pattern (``manylinux_{manylinux}_aarch64``, ``win_amd64``) as a
    regular expression matching the wheel platform tags of its files, any glibc baseline."""
    return re.compile(re.escape(tag).replace(re.escape("{manylinux}"), r"\d+_\d+"))


def read_platform(registry: Registry, doc: dict, json_url: str, release: str, platform: str,
                  tag: str) -> PlatformFacts:
    """What PyPI has of ``release`` for ``platform`` (``tag``: the table's tag pattern of it):
    its files' platform tags from the JSON, then one wheel's ``torch/version.py`` read with HTTP
    range requests (the preferred Python's, the highest build tag), which says the CUDA version
    of PyPI's build there, or ``None`` for a CPU-only build. Nothing found: no tags, a note."""
    facts = PlatformFacts(platform, release)
    pattern = platform_tag_re(tag)
    wheels = []
    for f, build, tags in release_wheels(doc["releases"].get(release, [])):
        matching = sorted({t.platform for t in tags if pattern.fullmatch(t.platform)})
        if matching:
            wheels.append((f, build, tags))
            facts.tags += [t for t in matching if t not in facts.tags]
    if not wheels:
        facts.notes.append(f"torch {release}: PyPI has no {platform} file ({tag})")
        return facts
    pick = None
    for py in PREFERRED_PYTHON:
        hits = sorted((w for w in wheels if any(t.interpreter == py and t.abi == py
                                                for t in w[2])), key=lambda w: w[1])
        if hits:
            pick = hits[-1][0]
            break
    if pick is None:
        facts.notes.append(f"torch {release}: no CPython {platform} wheel of "
                           f"{', '.join(PREFERRED_PYTHON)} to read; check its CUDA build by hand")
        return facts
    facts.wheel = pick["filename"]
    url = urllib.parse.urljoin(json_url, pick["url"])
    got = registry.members(url, int(pick["size"]) if pick.get("size") is not None else None,
                           ["torch/version.py"])
    vpy = got.get("torch/version.py", b"").decode("utf-8", "replace")
    local = _VERSION_PY_RE.search(vpy)
    facts.local = local[1] if local else None
    if cuda := _CUDA_PY_RE.search(vpy):
        facts.cuda = f"{cuda[1]}.{cuda[2]}"
    elif _NO_CUDA_PY_RE.search(vpy):
        facts.cpu_only = True
    else:
        facts.notes.append(f"torch {release}: "
                           + (f"{facts.wheel}'s torch/version.py names no CUDA version"
                              if vpy else f"{facts.wheel} has no torch/version.py")
                           + f"; check whether PyPI's {platform} wheel is a CUDA build")
    return facts


def read_variant_page(registry: Registry) -> tuple[str | None, str]:
    """torch's page listing every variant's files, or None and why it could not be read."""
    try:
        return registry.variant_page(), ""
    except RegistryError as exc:
        return None, exc.message


def parse_variants(page: str, registry: Registry) -> tuple[dict[str, set[str]] | None, str]:
    """release -> CUDA versions of the x86_64 Linux ``+cuXYZ`` wheels on torch's page, or None
    and why when it lists none."""
    found: dict[str, set[str]] = {}
    for release, major, minor in _VARIANT_RE.findall(page):
        found.setdefault(release, set()).add(f"{major}.{minor}")
    if not found:
        return None, f"{registry.variants} lists no torch+cuXYZ x86_64 wheel"
    return found, ""


def platform_variants(page: str, tag: str) -> dict[str, set[str]]:
    """release -> CUDA versions of the ``+cuXYZ`` wheels on torch's page whose platform tag
    matches a table platform's pattern (``tag``)."""
    pattern = platform_tag_re(tag)
    found: dict[str, set[str]] = {}
    for release, major, minor, tags in _ANY_VARIANT_RE.findall(page):
        if any(pattern.fullmatch(t) for t in tags.split(".")):
            found.setdefault(release, set()).add(f"{major}.{minor}")
    return found


def read_variants(registry: Registry) -> tuple[dict[str, set[str]] | None, str]:
    """release -> CUDA versions on torch's own index, or None and why it could not be read."""
    page, why = read_variant_page(registry)
    return parse_variants(page, registry) if page is not None else (None, why)


def newest_release(doc: dict[str, Any]) -> str | None:
    """The newest final, non-yanked release of a project (None: it has none)."""
    best = None
    for text, files in doc.get("releases", {}).items():
        try:
            v = Version(text)
        except InvalidVersion:
            continue
        if v.is_prerelease or v.is_devrelease or not files or all(f.get("yanked") for f in files):
            continue
        best = v if best is None or v > best else best
    return str(best) if best else None
