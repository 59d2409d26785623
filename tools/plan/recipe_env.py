"""A recipe's build variables: ``arch_env`` (the variable through which a package reads its arch
list) and ``env`` (its own switches), each checked against what only the system, the tools or
the pipeline may set. Part of loading a recipe (tools.plan.recipe_model)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .schema import Problems

#: How a package reads its arch list: "plain" is "80;90;120", "torch" is TORCH_CUDA_ARCH_LIST's
#: "8.0;9.0;12.0".
ARCH_STYLES = ("plain", "torch")
#: Variables the pipeline sizes or sets itself; a recipe asking for them is pointed elsewhere.
RESERVED_ENV = {
    "MAX_JOBS": "it is sized from cores and memory: set build.job_memory_gib instead",
    "NVCC_THREADS": "set build.nvcc_threads instead",
    "TORCH_CUDA_ARCH_LIST": "set archs (and arch_env if the package reads another variable)",
    "SOURCE_DATE_EPOCH": "the pipeline sets it for reproducible wheels",
    "CUDA_HOME": "the backend sets it to the toolkit it checked",
}

#: Name prefixes a recipe's variables may never have, and why: the system, the tools or the
#: pipeline read them, not a package's build script. (A one-word name, PATH, HOME, CC, CFLAGS,
#: is refused by its form: a package's own switches are PREFIX_NAME.)
SYSTEM_ENV = {
    "LD_": "the dynamic loader reads LD_* (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT): it would load "
           "other code into every program of the build",
    "PYTHON": "Python reads PYTHON* (PYTHONPATH, PYTHONHOME, PYTHONSTARTUP): it would change what "
              "every Python of the build imports",
    "PIP_": "pip reads PIP_* as its options (PIP_INDEX_URL): the build would install from "
            "somewhere else",
    "UV_": "uv reads UV_* as its options (UV_INDEX_URL): the build would install from somewhere "
           "else",
    "CIBW_": "cibuildwheel's options are the container backend's",
    "CCACHE_": "the compiler cache is the pipeline's (CCACHE_PREFIX runs a program before every "
               "compile)",
    "PYTORCH_": "torch's cpp_extension runs PYTORCH_NVCC as nvcc, which the pipeline sets for the "
                "compiler cache",
    "GIT_": "git reads GIT_* (GIT_SSH_COMMAND, GIT_CONFIG_*): a build that runs git would run "
            "other programs",
    "SSL_": "SSL_CERT_FILE and SSL_CERT_DIR decide which servers the build trusts",
    "REQUESTS_CA_BUNDLE": "it decides which servers the build trusts",
    "CURL_CA_BUNDLE": "it decides which servers the build trusts",
    "HTTP_PROXY": "it sends the build's downloads through another server",
    "HTTPS_PROXY": "it sends the build's downloads through another server",
    "ALL_PROXY": "it sends the build's downloads through another server",
    "NO_PROXY": "it decides which downloads bypass the proxy",
    "MALLOC_": "glibc reads MALLOC_* in every program",
    "GLIBC_TUNABLES": "glibc reads it in every program",
    "GCONV_PATH": "glibc loads character set modules from it in every program",
    "BASH_ENV": "bash runs the file it names at the start of every script",
}
#: The longest variable value (the longest a recipe sets is 19 characters).
MAX_ENV_VALUE = 4096
_ENV_RE = re.compile(r"[A-Z][A-Z0-9_]*")
#: A package's own variable: two words at least (FORCE_CUDA, FLASH_ATTENTION_FORCE_BUILD).
_OWN_ENV_RE = re.compile(r"[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]")
#: A control character (a newline would start another line of the build's environment).
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


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
    m = p.entry(raw, "arch_env", {"name": str, "style": str, "reason": str})
    if m is None:
        return None
    if m["style"] not in ARCH_STYLES:
        p.add("arch_env.style", f"{m['style']!r} is not one of {', '.join(ARCH_STYLES)}",
              "plain: 80;90;120, torch: 8.0;9.0;12.0")
    if not _ENV_RE.fullmatch(m["name"]):
        p.add("arch_env.name", f"{m['name']!r} is not an environment variable name")
    elif m["name"] != "TORCH_CUDA_ARCH_LIST":
        refused = env_name_refused(m["name"])
        if refused:
            p.add("arch_env.name", refused[0], refused[1])
    p.reason(m["reason"], "arch_env.reason")
    return ArchEnv(m["name"], m["style"], m["reason"])


def parse_env(p: Problems, raw: object, arch_env: ArchEnv | None) -> tuple[EnvVar, ...]:
    """The recipe's ``env`` block: its own variables, each with a reason, none the system's."""
    if not isinstance(raw, dict):
        p.add("env", "must be a mapping of NAME: {value, reason}")
        return ()
    out = []
    for name, entry in raw.items():
        where = f"env.{name}"
        if not isinstance(name, str) or not _ENV_RE.fullmatch(name):
            p.add(where, f"{name!r} is not an UPPER_CASE environment variable name")
            continue
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
        m = p.entry(entry, where, {"value": str, "reason": str})
        if m is None:
            continue
        p.reason(m["reason"], f"{where}.reason")
        if _CONTROL_RE.search(m["value"]):
            p.add(f"{where}.value", "contains a newline or another control character",
                  "one line of printable text: the value is written into the build's "
                  "environment lines as it is")
        elif len(m["value"]) > MAX_ENV_VALUE:
            p.add(f"{where}.value", f"is {len(m['value'])} characters long (at most "
                  f"{MAX_ENV_VALUE})")
        out.append(EnvVar(name, m["value"], m["reason"]))
    return tuple(out)


def env_name_refused(name: str) -> tuple[str, str] | None:
    """(why, fix) when a recipe may not set the variable ``name``, else None: a package's own
    variable is PREFIX_NAME and not one of :data:`SYSTEM_ENV`'s."""
    for prefix, why in SYSTEM_ENV.items():
        if name.startswith(prefix):
            return (f"{name} is not the package's to set: {why}",
                    "remove it; a build switch of the package's own has its own name")
    if not _OWN_ENV_RE.fullmatch(name):
        return (f"{name} is not a package's build variable: a one-word name is the system's or "
                "the toolchain's (PATH, HOME, CC, CFLAGS)",
                "set only the variables the package's build script reads (PREFIX_NAME, like "
                "FORCE_CUDA or FLASH_ATTENTION_FORCE_BUILD)")
    return None
