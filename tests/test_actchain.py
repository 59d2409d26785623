"""tools/devtools/actchain.py: wheels.yml's chain under nektos/act.

The slow test runs the whole chain of a one-cell batch (causal_conv1d for Python 3.11, CUDA 13.0,
torch 2.13, sm_90) under act: plan -> build-<cell> -> release (attestation stand-in) -> publish
(Pages stand-in), the REST API and Pages being tests/github_standin.py on 127.0.0.1, and ends
with pip installing the published wheel from the published site. It skips, naming what is
missing, where the machine lacks podman, debootstrap, a CUDA toolkit or the actions' sources
(``CUWHEELS_ACTIONS_SRC``, a directory of their repositories, where github.com is unreachable).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from github_standin import serve
from tools import ROOT
from tools.devtools import actchain, standin_image

#: The batch: one small cell, one arch (the dispatch's filters, the repository variable).
#: As strings, as in GitHub's workflow_dispatch payload: act reads a JSON true as the input's
#: default (false) for a boolean input, and the release and publish jobs were skipped.
CELL = "causal_conv1d-3.11-cu130-torch2.13"
INPUTS = {"package": "causal_conv1d", "python": "3.11", "cuda": "13.0", "torch": "2.13",
          "platform": "linux_x86_64", "publish": "true"}
#: The name GitHub's server (the stand-in) has in the jobs, and to pip.
SERVER = "github.localhost"


def test_pinned_actions_are_read_by_repository_and_commit():
    text = ("uses: actions/cache/restore@" + "a" * 40 + " # v5.0.5\n"
            "uses: actions/cache/save@" + "a" * 40 + " # v5.0.5\n"
            "uses: ./.github/workflows/x.yml\nuses: actions/checkout@v4\n")
    assert actchain.pinned_actions([text]) == [actchain.Pin("actions/cache", "a" * 40, "v5.0.5")]


def test_every_action_the_release_workflows_pin_has_a_way_to_run_under_act():
    pins = actchain.pinned_actions(actchain.workflow_texts())
    assert pins and all(p.repo in actchain.ACTIONS for p in pins)
    for name in ("attest-build-provenance", "deploy-pages", "cache"):
        text = (actchain.STANDINS / name / "action.yml").read_text()
        assert "stand-in" in text.split("\n")[0]


def test_act_argv_maps_the_pins_to_their_directories(tmp_path):
    tools = actchain.Tools(tmp_path / "act", tmp_path)
    argv = actchain.act_argv(tools, "img", {"a/b@" + "1" * 40: tmp_path}, actchain.ActRequest(
        event="push", event_file=tmp_path / "e.json", workflow="w.yml", artifacts=tmp_path,
        artifact_port=1234, env={"K": "v"}, secrets={"GITHUB_TOKEN": "t"}, variables={"V": "1"},
        mounts=["/x:/y:ro"], hosts={"github.localhost": "127.0.0.1"}))
    joined = " ".join(argv)
    assert f"--local-repository a/b@{'1' * 40}={tmp_path}" in joined
    assert "--env K=v" in joined and "-s GITHUB_TOKEN=t" in joined and "--var V=1" in joined
    assert argv[argv.index("--container-options") + 1] == \
        "-v /x:/y:ro --add-host=github.localhost:127.0.0.1"
    assert "-P ubuntu-24.04=img" in joined and "--action-offline-mode" in argv


def test_the_api_stand_in_says_so_and_keeps_the_documented_limits(tmp_path):
    import urllib.error
    import urllib.request
    from tools.plan.limits import load_limits
    limits = load_limits()
    state, base, server = serve(limits=limits)
    try:
        state.content_windows = [(2, 60, state.content_windows[0][2])]  # a smaller minute

        def post():
            req = urllib.request.Request(f"{base}/repos/o/r/releases", method="POST",
                                         data=b'{"tag_name": "t", "draft": true}')
            return urllib.request.urlopen(req, timeout=10)
        assert post().headers["X-GitHub-Stand-In"].startswith("tests/github_standin.py")
        post()
        with pytest.raises(urllib.error.HTTPError) as err:
            post()
        assert err.value.code == 403 and err.value.headers["Retry-After"] == "60"
        assert state.assets_limit == limits.assets_per_release
    finally:
        server.shutdown()
        server.server_close()


def test_the_site_stand_in_serves_pages_with_their_type(tmp_path):
    """As Pages does: a folder's index.html as text/html (pip skips an index page of no known
    type), a wheel's .metadata as bytes."""
    import urllib.request
    site = tmp_path / "site"
    (site / "simple" / "demo").mkdir(parents=True)
    (site / "simple" / "demo" / "index.html").write_text("<!DOCTYPE html><html></html>")
    (site / "demo-1.0-py3-none-any.whl.metadata").write_text("Metadata-Version: 2.1\n")
    state, base, server = serve(site_dir=site)
    try:
        with urllib.request.urlopen(f"{base}/site/simple/demo/", timeout=10) as page:
            assert page.headers["Content-Type"] == "text/html; charset=utf-8"
        with urllib.request.urlopen(f"{base}/site/demo-1.0-py3-none-any.whl.metadata",
                                    timeout=10) as meta:
            assert meta.headers["Content-Type"] == "application/octet-stream"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
# past the suite's 900 s: the cell compiles four units for sm_90 (12 min on 2 shared cores);
# act itself is bounded at 3000 s (run_act)
@pytest.mark.timeout(3600)
def test_the_release_chain_runs_under_act(tmp_path):
    lack = actchain.missing_prerequisites()
    if lack:
        pytest.skip("the chain under act needs: " + "; ".join(lack))
    started = time.monotonic()
    cache = actchain.cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    sources = os.environ.get("CUWHEELS_ACTIONS_SRC")
    tools = actchain.install_tools(cache)
    podman = actchain.Podman(cache)
    podman.configure()
    image = actchain.runner_image(podman, tools)
    actions = actchain.prepare_actions(actchain.pinned_actions(actchain.workflow_texts()), tools,
                                       cache, Path(sources) if sources else None)
    prepared_s = time.monotonic() - started

    copy = actchain.repo_copy(ROOT, tmp_path / "repo")
    artifacts = tmp_path / "artifacts"
    (artifacts / "1").mkdir(parents=True)  # act's ListArtifacts fails on a run without a folder
    site = tmp_path / "site"
    site.mkdir()
    (site / "ledger.json").write_text('{"schema": 2, "files": {}}')  # a live site, nothing yet
    state, base, server = serve(artifacts_dir=artifacts, site_dir=site)
    state.pages = {"html_url": f"{base}/site/", "build_type": "workflow"}
    event = actchain.write_json(tmp_path / "event.json", {"inputs": INPUTS,
                                                          "ref": "refs/heads/main"})
    toolkit = standin_image.find_cuda("13.0")
    uv_cache = Path(os.environ.get("UV_CACHE_DIR") or Path.home() / ".cache" / "uv")
    ca = "/etc/ssl/certs/ca-certificates.crt"
    argv = actchain.act_argv(tools, image, actions, actchain.ActRequest(
        event="workflow_dispatch", event_file=event,
        workflow=".github/workflows/wheels.yml", artifacts=artifacts,
        artifact_port=actchain.free_port(),
        # GitHub's server: the stand-in under a *.localhost name, which the artifact actions
        # take for GitHub (any other name but github.com and *.ghe.com is GHES to them)
        env={"GITHUB_API_URL": base, "GITHUB_SERVER_URL": base.replace("127.0.0.1", SERVER),
             "SSL_CERT_FILE": ca,
             "PIP_CERT": ca, "REQUESTS_CA_BUNDLE": ca, "UV_CACHE_DIR": "/root/.cache/uv",
             "UV_LINK_MODE": "copy"},
        secrets={"GITHUB_TOKEN": "stand-in-token"},
        variables={"CUWHEELS_CELL_BACKEND": "host", "CUWHEELS_CELL_ARCHS": "90"},
        mounts=[f"{toolkit}:/usr/local/cuda:ro", f"{uv_cache}:/root/.cache/uv"],
        hosts={SERVER: "127.0.0.1"}))
    log = tmp_path / "act.log"
    try:
        podman.clean()  # a stale act-toolcache volume hides the image's tool cache
        with podman.service():
            run = actchain.run_act(argv, copy, podman, log, timeout_s=3000,
                                   echo=lambda line: print(line, flush=True))
        print(f"prepared in {prepared_s:.0f} s; act ran {run.seconds:.0f} s (exit "
              f"{run.returncode})\n{run.table()}\nstood in:\n" +
              "\n".join(f"  {k}: {v}" for k, v in actchain.STOOD_IN.items()))
        assert run.returncode == 0, f"act failed (log: {log}):\n{run.table()}"
        results = {("cell" if "build-" in name else name.split("/")[-1]): r
                   for name, (_, _, r) in run.jobs.items()}
        assert [results.get(j) for j in ("plan", "cell", "release", "publish")] == \
            ["succeeded"] * 4, run.table()

        # released through the stand-in, within its limits; deployed through it
        # (the kernel store's release, kernel-cache, only when the run had shards to keep)
        (release,) = [r for r in state.releases if r["tag_name"] != "kernel-cache"]
        assert release["tag_name"].startswith("wheels-") and not release["draft"]
        wheels = [a["name"] for a in state.assets[release["id"]] if a["name"].endswith(".whl")]
        assert len(wheels) == 1 and wheels[0].startswith("causal_conv1d-1.7.0"), wheels
        assert state.deployments
        assert wheels[0] in json.loads((site / "ledger.json").read_text())["files"]

        # the published site, served on 127.0.0.1, to a real pip install of the published wheel
        _install_from(podman, image, f"{base}/site/cu130/torch2.13/simple/")
    finally:
        server.shutdown()
        server.server_close()


def _install_from(podman: actchain.Podman, image: str, index: str) -> None:
    """pip installs causal_conv1d from the published index on 127.0.0.1, the wheel from the
    release's address as the site links it (``github.localhost``: so in a container of the job
    image on the host's network, where that name is 127.0.0.1). Without its dependencies: the
    import needs torch 2.13's 3 GB of CUDA libraries, and its kernels a GPU."""
    script = ("python3 -m venv /v && /v/bin/pip install --isolated --no-cache-dir --no-deps "
              f"--index-url {index} causal-conv1d==1.7.0 && /v/bin/pip show -f causal-conv1d")
    proc = podman.podman("run", "--rm", "--network", "host", f"--add-host={SERVER}:127.0.0.1",
                         image, "sh", "-c", script, timeout=300)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Successfully installed causal-conv1d-1.7.0" in proc.stdout, proc.stdout
    assert "causal_conv1d_cuda" in proc.stdout  # the compiled extension is in what it installed
