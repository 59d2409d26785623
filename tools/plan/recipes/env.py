"""A recipe's build variables: ``arch_env`` (the variable through which a package reads its arch
list) and ``env`` (its own switches), each checked against what only the system, the tools or
the pipeline may set. Part of loading a recipe (tools.plan.recipes.model); the blocks' shape
(names UPPER_CASE, values one line, the styles) is the recipe schema's."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .shape import check_block_shape
from ..schema import Problems

#: Variables the pipeline sizes or sets itself; a recipe asking for them is pointed elsewhere.
RESERVED_ENV = {
    "MAX_JOBS": "it is sized from cores and memory: set build.job_memory_gib instead",
    "NVCC_THREADS": "set build.nvcc_threads instead",
    "TORCH_CUDA_ARCH_LIST": "set archs (and arch_env if the package reads another variable)",
    "SOURCE_DATE_EPOCH": "the pipeline sets it for reproducible wheels",
    "CUDA_HOME": "the backend sets it to the toolkit it checked",
}


@dataclass(frozen=True)
class EnvRule:
    """A class of variable a recipe may not set: ``pattern`` (a regular expression matched
    against the whole name) and why (what the variable makes a tool run, read or write)."""

    name: str
    pattern: str
    why: str

    def matches(self, name: str) -> bool:
        """Whether the variable ``name`` is of this class."""
        return re.fullmatch(self.pattern, name) is not None


#: The classes of variable a recipe may not set, most specific first: the first that matches
#: is the one named. A package's own switch has the package's own name
#: (FLASH_ATTENTION_FORCE_BUILD, FORCE_CUDA, MMCV_WITH_OPS); these are what the system, a
#: compiler, a linker, a build system, an installer or the pipeline reads, matched by family
#: where the tool reads a family. (A one-word name, PATH, HOME, CC, CFLAGS, is refused by its
#: form afterwards.)
ENV_RULES = (
    EnvRule("loader", r"(LD|DYLD)_\w*",
            "the dynamic loader reads LD_* (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT): it would load "
            "other code into every program of the build"),
    EnvRule("python", r"PYTHON\w*|VIRTUAL_ENV|CONDA_\w*",
            "Python reads PYTHON* (PYTHONPATH, PYTHONHOME, PYTHONSTARTUP) and installers take "
            "VIRTUAL_ENV or CONDA_PREFIX as the environment to use: it would change what every "
            "Python of the build imports"),
    EnvRule("pip", r"PIP_\w*",
            "pip reads PIP_* as its options (PIP_INDEX_URL, PIP_CONFIG_FILE): the build would "
            "install from somewhere else"),
    EnvRule("uv", r"UV_\w*",
            "uv reads UV_* as its options (UV_INDEX_URL, UV_CONFIG_FILE): the build would install "
            "from somewhere else"),
    EnvRule("setuptools", r"(SETUPTOOLS|DISTUTILS|SKBUILD|PEP517|AUDITWHEEL)_\w*|DIST_EXTRA_CONFIG",
            "setuptools, distutils, scikit-build and auditwheel read these as settings "
            "(DIST_EXTRA_CONFIG names another config file, SKBUILD_CMAKE_ARGS passes CMake any "
            "option): the build or the repair would follow other settings"),
    EnvRule("pipeline", r"(CIBW|CUWHEELS|CCACHE|SCCACHE|DISTCC|ICECC)_\w*",
            "cibuildwheel's options, the project's own settings and the compiler cache are the "
            "pipeline's (CCACHE_PREFIX runs a program before every compile, DISTCC_HOSTS sends "
            "compiles to other machines)"),
    EnvRule("torch", r"(PYTORCH|TORCH)_\w*",
            "torch's cpp_extension reads these: PYTORCH_NVCC is run as nvcc, TORCH_NVCC_FLAGS "
            "reaches every nvcc command line (-ccbin included), TORCH_EXTENSIONS_DIR writes "
            "elsewhere; the arch list is set by archs:"),
    EnvRule("nvcc", r"NVCC_\w*|CUDA_\w*|CUDACXX|CUDAHOSTCXX",
            "nvcc reads NVCC_* (NVCC_CCBIN picks the host compiler it runs, NVCC_PREPEND_FLAGS "
            "and NVCC_APPEND_FLAGS add options, -ccbin included, to every call) and builds find "
            "the toolkit through CUDA_* (CUDA_PATH, CUDA_NVCC_EXECUTABLE): which toolkit and "
            "which nvcc run is the backend's"),
    EnvRule("cmake", r"CMAKE_\w*",
            "CMake reads CMAKE_* from the environment: CMAKE_<LANG>_COMPILER_LAUNCHER runs a "
            "program before every compile, CMAKE_<LANG>_COMPILER picks the compiler, "
            "CMAKE_TOOLCHAIN_FILE runs a CMake script, CMAKE_PREFIX_PATH finds packages "
            "elsewhere, CMAKE_ARGS passes any option"),
    EnvRule("gcc", r"COMPILER_PATH|GCC_\w*|COLLECT_\w*|\w*_INCLUDE_PATH|LIBRARY_PATH|"
                   r"DEPENDENCIES_OUTPUT|SUNPRO_DEPENDENCIES",
            "gcc reads these: COMPILER_PATH and GCC_EXEC_PREFIX are where it finds the programs "
            "it runs (as, ld, cc1plus), *_INCLUDE_PATH and LIBRARY_PATH add headers and "
            "libraries from elsewhere, DEPENDENCIES_OUTPUT and SUNPRO_DEPENDENCIES make every "
            "compile write a file elsewhere"),
    EnvRule("pkg-config", r"PKG_CONFIG\w*",
            "pkg-config reads .pc files, and so compile and link flags, from the folders these "
            "name"),
    EnvRule("config-root", r"XDG_\w*|\w*_HOME|\w*_CONFIG(_FILE|_DIR|_PATH)?|\w*_RC",
            "tools read their configuration (and find their programs) under a config root: "
            "XDG_CONFIG_HOME holds pip's and uv's config, CUDA_HOME, ROCM_HOME and CARGO_HOME "
            "name toolchains"),
    EnvRule("git", r"GIT_\w*",
            "git reads GIT_* (GIT_SSH_COMMAND, GIT_CONFIG_*): a build that runs git would run "
            "other programs"),
    EnvRule("network", r"SSL_\w*|REQUESTS_CA_BUNDLE|CURL_\w*|(HTTP|HTTPS|FTP|ALL|NO)_PROXY",
            "these decide which servers the build trusts and through which server its downloads "
            "go"),
    EnvRule("libc", r"MALLOC_\w*|GLIBC_\w*|GCONV_PATH|LOCPATH|NLSPATH|LC_\w*|RESOLV_\w*|"
                    r"HOSTALIASES|LOCALDOMAIN|TZDIR",
            "glibc reads these in every program (GCONV_PATH loads character set modules, "
            "GLIBC_TUNABLES and MALLOC_* change its allocator, LC_* and LOCPATH its locale "
            "data)"),
    EnvRule("shell", r"BASH_\w*|SHELLOPTS|BASHOPTS|ENV|PS4|MAKEFLAGS|MAKEFILES|MFLAGS|"
                     r"GNUMAKEFLAGS|MAKE_\w*",
            "the shell and make read these in every script and makefile (BASH_ENV runs a file, "
            "BASH_FUNC_* defines functions, MAKEFLAGS and MAKEFILES add options and makefiles)"),
    EnvRule("program", r"\w*_(LAUNCHER|WRAPPER|COMPILER|CCBIN|EXECUTABLE|PROGRAM|LINKER|AR|"
                       r"NM|RANLIB|STRIP|OBJCOPY)",
            "it names a program a build tool runs in place of, or before, its own"),
    EnvRule("flags", r"\w*_?(C|CXX|CPP|LD|NVCC|CUDA|CUDAHOST|HIP|F|AS|ARCH)FLAGS|\w*_FLAGS",
            "flags reach every compile or link: -B, -specs, -fplugin, -ccbin, -Wl,-rpath run or "
            "load other programs"),
    EnvRule("search-path", r"\w*_\w*PATH|\w*_(DIR|DIRS|ROOT|PREFIX|SYSROOT)",
            "a tool searches the folders it names for programs, headers, libraries, sources or "
            "settings outside the verified sdist"),
)
#: A package's own variable: two words at least (FORCE_CUDA, FLASH_ATTENTION_FORCE_BUILD).
_OWN_ENV_RE = re.compile(r"[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]")


@dataclass(frozen=True)
class ArchEnv:
    """The environment variable through which the package reads its arch list."""

    name: str
    style: str
    reason: str


@dataclass(frozen=True)
class EnvVar:
    """One build environment variable of the package's own."""

    name: str
    value: str
    reason: str


def parse_arch_env(p: Problems, raw: object) -> ArchEnv | None:
    """The recipe's ``arch_env`` block, checked (None when absent or broken)."""
    if raw is not None:
        check_block_shape(p, raw, "arch_env")
    m = p.shaped(raw, "arch_env")
    if m is None:
        return None
    if m["name"] != "TORCH_CUDA_ARCH_LIST":
        refused = env_name_refused(m["name"])
        if refused:
            p.add("arch_env.name", refused[0], refused[1])
    p.reason(m["reason"], "arch_env.reason")
    return ArchEnv(m["name"], m["style"], m["reason"])


def parse_env(p: Problems, raw: object, arch_env: ArchEnv | None) -> tuple[EnvVar, ...]:
    """The recipe's ``env`` block: its own variables, each with a reason, none the system's."""
    check_block_shape(p, raw, "env")
    out: list[EnvVar] = []
    for name, entry in (raw.items() if isinstance(raw, dict) and p.usable("env") else ()):
        where = f"env.{name}"
        if not p.usable(where):
            continue  # a name that is no UPPER_CASE one, or an entry of the wrong shape
        if name in RESERVED_ENV:
            p.add(where, f"{name} is set by the pipeline", RESERVED_ENV[name])
            continue
        if arch_env and name == arch_env.name:
            p.add(where, f"{name} carries the arch list", "set archs: instead")
            continue
        refused = env_name_refused(name)
        if refused:
            p.add(where, refused[0], refused[1])
            continue
        m = p.shaped(entry, where)
        if m is None:
            continue
        p.reason(m["reason"], f"{where}.reason")
        out.append(EnvVar(name, m["value"], m["reason"]))
    return tuple(out)


def env_rule(name: str) -> EnvRule | None:
    """The first of :data:`ENV_RULES` the variable ``name`` falls under, else None."""
    return next((rule for rule in ENV_RULES if rule.matches(name)), None)


def env_name_refused(name: str) -> tuple[str, str] | None:
    """(why, fix) when a recipe may not set the variable ``name``, else None: a package's own
    variable is PREFIX_NAME and of none of :data:`ENV_RULES`' classes."""
    rule = env_rule(name)
    if rule is not None:
        return (f"{name} is not the package's to set: {rule.why} (rule {rule.name!r}: names "
                f"matching {rule.pattern})",
                "remove it; set only the variables the package's own build script reads, "
                "named after the package (like FLASH_ATTENTION_FORCE_BUILD or FORCE_CUDA)")
    if not _OWN_ENV_RE.fullmatch(name):
        return (f"{name} is not a package's build variable: a one-word name is the system's or "
                "the toolchain's (PATH, HOME, CC, CFLAGS) (rule 'one-word')",
                "set only the variables the package's build script reads (PREFIX_NAME, like "
                "FORCE_CUDA or FLASH_ATTENTION_FORCE_BUILD)")
    return None
