"""The (CUDA, torch, C++ ABI) identity of a wheel: our local version label, and the others'.

Our label is ``cu<cuda-nodot>.torch<major>.<minor>`` (``2.8.3+cu130.torch2.13``), with
``.cxx11abi0`` appended only for a torch built with the pre-C++11 ABI. The torch minor is its own
all-digit segment so that PEP 440 compares it numerically: ``torch2.10`` sorts after ``torch2.9``.
Dao-AILab's ``cu12torch2.10cxx11abiTRUE`` does not: PEP 440 splits a local label only at ``.``,
``-`` and ``_``, so its segment ``torch2`` is followed by ``10cxx11abitrue``, compared as a
string, and ``"10..." < "8..."``.

A wheel built against a release candidate of torch (a row of the table with ``candidate:``, read
from PyTorch's test index) is labelled ``cu132.torch2.16rc.git<7 hex>``: the ``16rc`` segment holds
letters, and PEP 440 sorts a segment with letters below an all-digit one, so the final's
``cu132.torch2.16`` wheel of the same version sorts after it; the git segment (the candidate's
commit) keeps two candidates' wheels apart, since a published file never changes. Such a wheel
is listed only in the pre-release variant index ``pre/cu132/torch2.16/`` (PRERELEASE_ROOT), which
pip and uv reach only when pointed at it.

Third-party conventions are understood when reading wheels someone else built:
``cu12torch2.8cxx11abiTRUE`` (Dao-AILab; ``cu12`` means any CUDA 12.x), ``cu128torch2.8``,
``cu.12.8.torch.2.10`` and PyG's ``pt28cu128``, each optionally followed by build metadata
(see parse_label).

Standard library only: the selector's single-file download (tools.selector.bundle) carries it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


#: The one spelling of a variant's version (CUDA ``12.8``, torch ``2.10``): dot-separated runs of
#: ASCII digits. ``[0-9]``, never ``\d`` or ``str.isdigit()``: those take Arabic-Indic and other
#: Unicode digits, which ``int()`` reads as numbers and a path keeps as they are (``cu١٢٨/``).
_DOTTED_DIGITS = re.compile(r"[0-9]+(?:\.[0-9]+)*")


def is_dotted_digits(text: object) -> bool:
    """Whether ``text`` is a string of ASCII digits in dot-separated parts (``"12.8"``, ``"2"``).

    >>> is_dotted_digits("12.8"), is_dotted_digits("\u0661\u0662.\u0668"), is_dotted_digits("12.x")
    (True, False, False)
    """
    return isinstance(text, str) and _DOTTED_DIGITS.fullmatch(text) is not None


def dotted_key(text: str) -> tuple[int, ...]:
    """``"2.10"`` -> ``(2, 10)``, to sort versions numerically; ValueError naming the rule for
    anything but ASCII digits in dot-separated parts.

    >>> dotted_key("2.10") > dotted_key("2.9")
    True
    """
    if not is_dotted_digits(text):
        raise ValueError(f"{text!r} is not a version of ASCII digits in dot-separated parts (such as 12.8)")
    return tuple(int(p) for p in text.split("."))


@dataclass(frozen=True, order=True)
class Variant:
    """What a binary wheel was built against.

    ``cuda`` is ``"12.8"``, or just the major (``"12"``) when the label only says "any 12.x";
    ``torch`` is the ``major.minor`` series; ``cxx11_abi`` is None when the label doesn't say.
    ``serves`` is empty for a build for ``torch`` alone; for a build on torch's stable ABI it
    lists every torch series the wheel was checked against and is listed for (its build manifest
    says so; a label never does).
    """

    cuda: str
    torch: str
    cxx11_abi: bool | None = None
    serves: tuple[str, ...] = ()
    #: Built against a release candidate of ``torch``: listed in the pre-release index only.
    prerelease: bool = False

    @property
    def cuda_nodot(self) -> str:
        """``"12.8"`` -> ``"128"``, ``"12"`` -> ``"12"``."""
        return self.cuda.replace(".", "")

    @property
    def index_path(self) -> str:
        """The variant index's directory under the site root: ``cu128/torch2.8``, or for a build
        against a release candidate ``pre/cu132/torch2.16``."""
        root = PRERELEASE_ROOT if self.prerelease else ""
        return f"{root}cu{self.cuda_nodot}/torch{self.torch}"

    @property
    def served(self) -> tuple[str, ...]:
        """The torch series whose variant index lists the wheel: ``serves``, else ``(torch,)``."""
        return self.serves or (self.torch,)

    @property
    def index_paths(self) -> tuple[str, ...]:
        """Every variant index the wheel belongs in: ``("cu130/torch2.11", "cu130/torch2.12")``."""
        root = PRERELEASE_ROOT if self.prerelease else ""
        return tuple(f"{root}cu{self.cuda_nodot}/torch{series}" for series in self.served)

    @property
    def exact_cuda(self) -> bool:
        """True when the CUDA version is major.minor, False for "any 12.x"."""
        return "." in self.cuda


#: The folder under the site root that holds the variant indexes of builds against release
#: candidates: a separate URL, so that nobody installs one without asking for it.
PRERELEASE_ROOT = "pre/"


def cuda_nodot(cuda: str) -> str:
    """``"12.9"`` -> ``"129"`` (the spelling in cell ids and index paths)."""
    return cuda.replace(".", "")


#: PyTorch's own per-CUDA wheel index; ``torch_index_url("13.0")`` is its ``cu130`` directory.
TORCH_INDEX_ROOT = "https://download.pytorch.org/whl/"


def torch_index_url(cuda: str) -> str:
    """PyTorch's wheel index for one CUDA version: ``"13.0"`` -> ``.../whl/cu130``."""
    return f"{TORCH_INDEX_ROOT}cu{cuda_nodot(cuda)}"


def uv_index_name(index_path: str) -> str:
    """The name of a variant index in uv's configuration: ``cu128/torch2.8`` -> ``cuwheels-cu128-torch2.8``."""
    return "cuwheels-" + index_path.replace("/", "-")


#: The Python part of a collapsed cell's id: one ``abi3`` build serves every CPython from the
#: recipe's ``python_from`` on; one build without the Python C API (``none``) serves every Python.
PYTHON_PART = {"abi3": "abi3", "none": "py3"}


def split_python(python: str) -> tuple[str, bool]:
    """A cell's Python as (its CPython version, whether it is the free-threaded build, PEP 703):
    ``"3.14t"`` -> ``("3.14", True)``, ``"3.12"`` -> ``("3.12", False)``. The one reading of the
    ``t``, for every step that spells a Python.

    >>> split_python("3.14t"), split_python("3.12")
    (('3.14', True), ('3.12', False))
    """
    return (python[:-1], True) if python.endswith("t") else (python, False)


def opt_python_dir(python: str) -> str:
    """The manylinux images' folder of a cell's CPython under ``/opt/python``: ``"3.12"`` ->
    ``"cp312-cp312"``, and a free-threaded build (PEP 703) ``"3.14t"`` -> ``"cp314-cp314t"``.

    >>> opt_python_dir("3.14t")
    'cp314-cp314t'
    """
    base, free = split_python(python)
    tag = "cp" + base.replace(".", "")
    return f"{tag}-{tag}{'t' if free else ''}"


def stable_torch_part(torch_from: str) -> str:
    """The torch part of a stable-ABI cell's id: ``"2.10"`` -> ``"2.10+"`` (every listed series
    from 2.10 on)."""
    return f"{torch_from}+"


def candidate_torch_part(series: str) -> str:
    """The torch part of a cell built against a release candidate of ``series``: ``"2.16rc"``.
    Never the CUDA version's default torch, so the id always names it, and the id differs from
    the final's cell of the same series."""
    return f"{series}rc"


#: The platform every cell targeted before platforms were a dimension: its ids have no platform
#: part, so that they read exactly as they always did.
DEFAULT_PLATFORM = "linux_x86_64"
#: The platform part of a cell id, per wheel platform of the table (``recipes/table.yaml``'s
#: ``platforms:``): none for the default platform, a short word for the others. The table may
#: name only platforms listed here (tools.plan.table_platforms checks it).
PLATFORM_PART = {DEFAULT_PLATFORM: "", "linux_aarch64": "aarch64", "win_amd64": "win"}


def cell_id(package: str, python: str, cuda: str, torch: str | None = None,
            platform: str = DEFAULT_PLATFORM) -> str:
    """The one id of a build cell, used by nox sessions, CI jobs, reports and the selector.

    ``<package>-<python part>-cu<cuda-nodot>[-torch<torch part>][-<platform part>]``. The python
    part is the interpreter (``3.12``) for a per-Python build, ``abi3`` or ``py3`` for one build
    serving many (PYTHON_PART); the torch part is left out for the CUDA version's default torch
    series, is ``2.8`` for another series, and ``2.10+`` for a stable-ABI build serving every
    listed series from 2.10 on (stable_torch_part); the platform part (PLATFORM_PART) is left out
    for Linux x86_64, and is ``aarch64`` or ``win`` for the others. Every character is one of
    ``[a-z0-9._+-]``: valid in a nox session name, a GitHub job and artifact name, and a file
    name. A torch part always starts with ``torch`` and a platform part never does, so the two
    never read as each other (parse_cell_id).

    >>> cell_id("flash_attn", "3.12", "12.9")
    'flash_attn-3.12-cu129'
    >>> cell_id("flash_attn", "3.12", "12.9", "2.8")
    'flash_attn-3.12-cu129-torch2.8'
    >>> cell_id("xformers", PYTHON_PART["none"], "13.0", stable_torch_part("2.10"))
    'xformers-py3-cu130-torch2.10+'
    >>> cell_id("flash_attn", "3.12", "13.0", "2.12", platform="linux_aarch64")
    'flash_attn-3.12-cu130-torch2.12-aarch64'
    >>> cell_id("flash_attn", "3.12", "13.0", platform="win_amd64")
    'flash_attn-3.12-cu130-win'
    """
    return f"{package}-{python}-{_build_parts(cuda, torch, platform)}"


def _build_parts(cuda: str, torch: str | None, platform: str) -> str:
    """``cu<nodot>[-torch<torch>][-<platform part>]``: what a cell id and a group id share."""
    if platform not in PLATFORM_PART:
        raise ValueError(f"no id part for platform {platform!r} (known: "
                         f"{', '.join(PLATFORM_PART)})")
    parts = [f"cu{cuda_nodot(cuda)}"]
    if torch is not None:
        parts.append(f"torch{torch}")
    if PLATFORM_PART[platform]:
        parts.append(PLATFORM_PART[platform])
    return "-".join(parts)


@dataclass(frozen=True)
class CellIdParts:
    """The parts of a cell id (parse_cell_id): ``torch`` is the torch part without its
    ``torch`` prefix (``2.8``, ``2.10+``, ``2.16rc``), None for the CUDA version's default."""

    package: str
    python: str
    cuda: str
    torch: str | None
    platform: str


_CELL_ID = re.compile(r"(?P<package>[a-z0-9_]+)-(?P<python>[0-9.]+t?|abi3|py3)-cu(?P<cuda>\d{2,3})"
                      r"(?:-torch(?P<torch>[0-9.]+(?:\+|rc)?))?(?:-(?P<platform>[a-z0-9]+))?", re.ASCII)


def parse_cell_id(text: str) -> CellIdParts | None:
    """The parts of a cell id as cell_id spells it, or None when ``text`` is not one.

    >>> parse_cell_id("flash_attn-3.12-cu130-torch2.12-aarch64")
    CellIdParts(package='flash_attn', python='3.12', cuda='13.0', torch='2.12', platform='linux_aarch64')
    >>> parse_cell_id("flash_attn-3.12-cu129").platform
    'linux_x86_64'
    >>> parse_cell_id("flash_attn-3.12-cu129-mips") is None
    True
    """
    m = _CELL_ID.fullmatch(text)
    if m is None:
        return None
    platforms = {part: name for name, part in PLATFORM_PART.items()}
    platform = platforms.get(m["platform"] or "")
    if platform is None:
        return None
    return CellIdParts(m["package"], m["python"], cuda_from_nodot(m["cuda"]), m["torch"], platform)


def group_id(package: str, cuda: str, torch: str | None = None,
             platform: str = DEFAULT_PLATFORM) -> str:
    """The id of a compile group (``tools.plan.groups``): its cells' id (:func:`cell_id`, the
    same parts) without the Python part, which is all that differs between the cells of a
    group. A group id never reads as a cell id (its second part starts with ``cu``); a shard of
    it is ``<group>-shard<k>``.

    >>> group_id("flash_attn", "13.0")
    'flash_attn-cu130'
    >>> group_id("flash_attn", "12.9", "2.8")
    'flash_attn-cu129-torch2.8'
    >>> group_id("xformers", "13.0", stable_torch_part("2.10"))
    'xformers-cu130-torch2.10+'
    >>> group_id("flash_attn", "13.0", platform="linux_aarch64")
    'flash_attn-cu130-aarch64'
    """
    return f"{package}-{_build_parts(cuda, torch, platform)}"


def shard_id(group: str, index: int) -> str:
    """``flash_attn-cu130-shard2``: shard K (1-based) of a compile group (:func:`group_id`): the
    shard's cache directory, its report, its CI job and its artifact.

    >>> shard_id("flash_attn-cu130", 2)
    'flash_attn-cu130-shard2'
    """
    return f"{group}-shard{index}"


def job_id(group: str, index: int) -> str:
    """``flash_attn-cu130-job2``: cell job K (1-based) of a compile group (:func:`group_id`):
    the CI job that builds several of the group's cells one after another after one setup
    (``tools.plan.stages``), and its artifacts.

    >>> job_id("flash_attn-cu130", 2)
    'flash_attn-cu130-job2'
    """
    return f"{group}-job{index}"


def cuda_from_nodot(digits: str) -> str:
    """``"129"`` -> ``"12.9"``, ``"118"`` -> ``"11.8"``, ``"12"`` -> ``"12"`` (major only)."""
    if not digits or not is_dotted_digits(digits) or "." in digits:
        raise ValueError(f"not a CUDA version: {digits!r}")
    if len(digits) <= 2:
        return str(int(digits))
    return f"{int(digits[:-1])}.{digits[-1]}"


def torch_series(version: str) -> str:
    """``"2.13.0+cu130"`` -> ``"2.13"``."""
    parts = version.split("+", 1)[0].split(".")
    if len(parts) < 2 or not is_dotted_digits(parts[0]) or not is_dotted_digits(parts[1]):
        raise ValueError(f"not a torch version: {version!r}")
    return f"{parts[0]}.{parts[1]}"


def format_label(cuda: str, torch: str, cxx11_abi: bool = True, candidate: str = "") -> str:
    """Our local version label for a build against ``torch`` (any X.Y[.Z]) and ``cuda`` (X.Y);
    ``candidate``: the commit of the release candidate built against (its first 7 hex digits
    are kept), empty for a release.

    >>> format_label("13.0", "2.13.0")
    'cu130.torch2.13'
    >>> format_label("12.4", "2.6", cxx11_abi=False)
    'cu124.torch2.6.cxx11abi0'
    >>> format_label("13.2", "2.16.0", candidate="0123abcdef")
    'cu132.torch2.16rc.git0123abc'
    """
    label = f"cu{cuda_nodot(cuda)}.torch{torch_series(torch)}"
    if candidate:
        label += f"rc.git{candidate[:7]}"
    return label if cxx11_abi else f"{label}.cxx11abi0"


def is_candidate_label(label: str) -> bool:
    """Whether a local version label is ours for a build against a release candidate.

    >>> is_candidate_label("cu132.torch2.16rc.git0123abc"), is_candidate_label("cu132.torch2.16")
    (True, False)
    """
    v = parse_label(label)
    return v is not None and v.prerelease


_OURS = (r"cu(?P<cu>\d{2,3})\.torch(?P<tmaj>\d+)\.(?P<tmin>\d+)(?P<rc>rc\.git[0-9a-f]{7})?"
         r"(?:\.cxx11abi(?P<abi>[01]))?")
_DAO = r"cu(?P<cu>\d{2,3})torch(?P<tmaj>\d+)\.(?P<tmin>\d+)(?:cxx11abi(?P<abi>true|false))?"
_DOTTED = r"cu\.(?P<cmaj>\d+)\.(?P<cmin>\d+)\.torch\.(?P<tmaj>\d+)\.(?P<tmin>\d+)"
_PYG = r"pt(?P<tmaj>\d)(?P<tmin>\d+)cu(?P<cu>\d{2,3})"
#: Build metadata after a complete label: either glued on as one of the words builders use
#: (``gite2743ab``: a git hash of 7 to 40 hex digits; ``post1``; ``dev3``), or one or more
#: ``.``-separated alphanumeric segments (``.post1``, ``.gite2743ab``, ``.1``), each optionally
#: followed by more such segments. A segment may not start like a label part (``cxx11abi``,
#: ``cu<digits>``, ``torch``, ``pt<digits>``), so that a malformed ABI flag is refused rather than
#: dropped; anything else glued on (``cu128torch2.8x``) is not metadata, and the label names no
#: variant.
_SEGMENT = r"\.(?!cxx11abi|cu\d|torch|pt\d)[a-z0-9]+"
_TRAILER = rf"(?:(?:git[0-9a-f]{{7,40}}|post\d+|dev\d+)(?:{_SEGMENT})*|(?:{_SEGMENT})+)?"
# re.ASCII: ``\d`` is [0-9] and case folds only ASCII letters (the one rule, is_dotted_digits).
_GRAMMARS = tuple(re.compile(rf"(?:{grammar}){_TRAILER}", re.I | re.ASCII) for grammar in (_OURS, _DAO, _DOTTED, _PYG))


def parse_label(label: str) -> Variant | None:
    """The Variant named by a local version label, or None when it names no CUDA+torch pair.

    A label may carry build metadata after the variant (``cu130torch2.10gite2743ab``,
    ``cu128torch2.8.post1``); what the metadata may be is described at ``_TRAILER``.

    >>> parse_label("cu12torch2.8cxx11abiTRUE")
    Variant(cuda='12', torch='2.8', cxx11_abi=True, serves=(), prerelease=False)
    >>> parse_label("pt210cu128")
    Variant(cuda='12.8', torch='2.10', cxx11_abi=None, serves=(), prerelease=False)
    >>> parse_label("cu130torch2.10gite2743ab")
    Variant(cuda='13.0', torch='2.10', cxx11_abi=None, serves=(), prerelease=False)
    >>> parse_label("cu132.torch2.16rc.git0123abc").prerelease
    True
    >>> parse_label("cpu") is None
    True
    """
    text = label.strip()
    for grammar in _GRAMMARS:
        m = grammar.fullmatch(text)
        if m is None:
            continue
        fields = m.groupdict()
        cuda = f"{int(fields['cmaj'])}.{int(fields['cmin'])}" if "cmaj" in fields else cuda_from_nodot(fields["cu"])
        abi = None if fields.get("abi") is None else fields["abi"].lower() in ("1", "true")
        return Variant(cuda, f"{int(fields['tmaj'])}.{int(fields['tmin'])}", abi,
                       prerelease=bool(fields.get("rc")))
    return None
