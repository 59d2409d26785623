"""This machine's certificate authorities, inside a build container.

Behind a TLS-intercepting proxy the machine trusts its CA through ``SSL_CERT_FILE``,
``PIP_CERT``...; an image's own bundle lacks it, so pip in the container fails with
CERTIFICATE_VERIFY_FAILED until the same file is at the same path inside and the same variables
are set. :func:`trust_store` says what to mount and pass (nothing, where none is set).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: Variables naming a CA bundle (file or directory) that pip, requests, uv and curl read.
CA_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "PIP_CERT", "REQUESTS_CA_BUNDLE",
                "CURL_CA_BUNDLE")
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
                   "no_proxy")


@dataclass(frozen=True)
class TrustStore:
    """What a container needs to trust this machine's certificate authorities: read-only
    mounts at the same paths, and the variables to pass through unchanged."""

    volumes: tuple[str, ...]
    variables: tuple[str, ...]

    @property
    def create_args(self) -> tuple[str, ...]:
        """``docker/podman create`` flags mounting each path read-only."""
        return tuple(arg for volume in self.volumes for arg in ("--volume", volume))


def trust_store(environ: Mapping[str, str] | None = None) -> TrustStore:
    """Mounts and variables for the CA bundles (and proxies) set in ``environ``.

    Behind a TLS-intercepting proxy the machine trusts its CA through ``SSL_CERT_FILE``,
    ``PIP_CERT``... An image's own bundle lacks it, so pip fails with CERTIFICATE_VERIFY_FAILED
    until the same file is at the same path inside and the same variables are set. A path
    inside an already-mounted directory is not mounted again.
    """
    environ = os.environ if environ is None else environ
    paths = sorted({Path(environ[name]) for name in CA_VARIABLES
                    if environ.get(name) and Path(environ[name]).exists()})
    mounted: list[Path] = []
    for path in paths:
        if not any(path.is_relative_to(parent) for parent in mounted):
            mounted.append(path)
    variables = tuple(name for name in (*CA_VARIABLES, *PROXY_VARIABLES) if environ.get(name))
    return TrustStore(tuple(f"{p}:{p}:ro" for p in mounted), variables)
