#!/bin/sh
# Make the container backend usable on a machine that can pull no image (CI runners without a
# registry, sandboxes): install podman, runc and debootstrap where apt is available, build the
# local builder image once (cached; reused on later runs), and start a container from it. Where
# the OCI runtime may not set resource limits, the start goes through the rlimit-stripping
# wrapper, and the exact CONTAINERS_CONF line for cibuildwheel is printed.
#
#   scripts/ci_podman.sh            # CUDA version from this machine's nvcc
#   scripts/ci_podman.sh 13.0       # or named (must match the local toolkit)
#   scripts/ci_podman.sh 13.0 --python 3.12 --rebuild   # further tools.localimage options
#
# Exits non-zero, saying why, when no image can be built or no container started.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
py=${CUWHEELS_PYTHON:-$root/.venv/bin/python}
[ -x "$py" ] || { echo "$py not found: run \`make setup\` first" >&2; exit 2; }

missing=""
for tool in podman runc debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -n "$missing" ]; then
    if command -v apt-get >/dev/null 2>&1; then
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        echo "installing$missing with apt-get"
        $sudo apt-get update -qq
        # shellcheck disable=SC2086  # one word per package
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
    else
        echo "missing:$missing, and no apt-get to install them: install them and retry" >&2
        exit 2
    fi
fi

if [ $# -ge 1 ] && [ "${1#-}" = "$1" ]; then
    cuda=$1
    shift
else
    nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
    [ -x "$nvcc" ] || { echo "no nvcc at $nvcc: set CUDA_HOME or pass the CUDA version" >&2; exit 2; }
    cuda=$("$nvcc" --version | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')
fi

cd "$root"
exec "$py" -m tools.localimage --cuda "$cuda" --engine podman "$@"
