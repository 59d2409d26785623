#!/bin/sh
# Build one cell locally in its manylinux CUDA image, exactly as CI does (the container backend).
#
#   scripts/build_local.sh ENGINE PACKAGE PYTHON CUDA [--torch X.Y] [tools.build options...]
#   scripts/build_local.sh docker flash_attn 3.12 12.9
#   scripts/build_local.sh podman flash_attn 3.12 12.9 --dry-run
#   scripts/build_local.sh docker flash_attn 3.12 13.0 --torch 2.9 --archs 90
#
# ENGINE is docker or podman; CUDA is 12.9 or 129; --torch picks a non-default torch series for
# that CUDA version (the recipe's first is the default). Everything after that goes to
# `python -m tools.build` (--archs, --sdist, --dry-run, --wheels, --work...). The package version is
# the recipe's: a recipe builds one version.
set -eu

usage() {
    echo "usage: $0 docker|podman PACKAGE PYTHON CUDA [--torch X.Y] [tools.build options...]" >&2
    echo "  e.g. $0 docker flash_attn 3.12 12.9 --dry-run" >&2
    exit 2
}

[ $# -ge 4 ] || usage
engine=$1 package=$2 python=$3 cuda=$4
shift 4
case $engine in docker|podman) ;; *) echo "unknown engine: $engine" >&2; usage ;; esac
case $python in 3.[0-9]|3.[0-9][0-9]) ;; *) echo "PYTHON is like 3.12, not $python" >&2; usage ;; esac
case $cuda in [0-9][0-9]|[0-9][0-9][0-9]|[0-9][0-9].[0-9]) ;; *) echo "CUDA is like 12.9 or 129, not $cuda" >&2; usage ;; esac

series=
if [ $# -ge 2 ] && [ "$1" = "--torch" ]; then
    series=$2
    shift 2
fi
if [ -n "$series" ]; then torch="--torch=$series"; else torch=--default-torch-only; fi

root=$(cd "$(dirname "$0")/.." && pwd)
# The project's pinned environment (`make setup`), unless the caller names an interpreter.
py=${CUWHEELS_PYTHON:-$root/.venv/bin/python}
[ -x "$py" ] || { echo "$py not found: run \`make setup\` first" >&2; exit 2; }

# The planner formats the cell id (tools.variant.cell_id), so this script never spells one.
cd "$root"
cell=$("$py" -m tools.matrix --package "$package" --python "$python" --cuda "$cuda" "$torch" \
       --format ids)
case $cell in
    "") echo "no cell of $package for Python $python, CUDA $cuda${series:+, torch $series}" >&2
        echo "  the cells of $package: $py -m tools.matrix --package $package --format ids" >&2
        exit 2 ;;
    *"
"*) echo "more than one cell matches: $cell" >&2; exit 2 ;;
esac
exec "$py" -m tools.build "$cell" --backend container --engine "$engine" "$@"
