"""tools.backends.truststore: this machine's certificate authorities, mounted into a container."""

from __future__ import annotations

from tools.backends.truststore import trust_store


def test_trust_store_mounts_bundles_and_passes_variables(tmp_path):
    certs = tmp_path / "certs"
    certs.mkdir()
    bundle = certs / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    other = tmp_path / "corp.pem"
    other.write_text("x")
    env = {"SSL_CERT_FILE": str(bundle), "SSL_CERT_DIR": str(certs), "PIP_CERT": str(bundle),
           "REQUESTS_CA_BUNDLE": str(other), "CURL_CA_BUNDLE": str(tmp_path / "missing.pem"),
           "HTTPS_PROXY": "http://proxy:3128", "HOME": "/root"}
    store = trust_store(env)
    # ca.pem lies inside the mounted certs directory: mounted once, through it.
    assert store.volumes == (f"{certs}:{certs}:ro", f"{other}:{other}:ro")
    assert store.create_args == ("--volume", f"{certs}:{certs}:ro",
                                 "--volume", f"{other}:{other}:ro")
    assert store.variables == ("SSL_CERT_FILE", "SSL_CERT_DIR", "PIP_CERT", "REQUESTS_CA_BUNDLE",
                               "CURL_CA_BUNDLE", "HTTPS_PROXY")


def test_trust_store_empty_without_variables():
    assert trust_store({"HOME": "/root"}).create_args == ()
