#!/bin/sh
# A free-threaded CPython 3.14 (PEP 703, `python3.14t`) for the tests that install free-threaded
# wheels with a real interpreter, on a machine where `uv python install 3.14t` can't download one
# (uv's Pythons come from GitHub; only the package registries are reachable from some CI
# machines). Built once from CPython's source as Debian's archive publishes it (the orig tarball,
# sha256 checked), with --disable-gil, into the cache; later runs reuse it.
#
#   scripts/free_threaded_python.sh          # prints the interpreter's bin directory
#
# Put that directory on PATH: the project finds `python3.14t` there (tools/pipeline/pythons.py).
# Exits non-zero, saying why, when the source can't be had or the build fails.
set -eu

version=3.14.7
sha256=3b48dac8fb59f62eaa67ac83c1eb12bda1b7a08406dd286e252c11a66be27f81
url="http://deb.debian.org/debian/pool/main/p/python3.14/python3.14_${version}.orig.tar.xz"
cache=${XDG_CACHE_HOME:-$HOME/.cache}/cuwheels/python
prefix="$cache/cpython-${version}t"

if [ -x "$prefix/bin/python3.14t" ] && "$prefix/bin/python3.14t" -c \
    'import sysconfig, sys; sys.exit(not sysconfig.get_config_var("Py_GIL_DISABLED"))'; then
    echo "$prefix/bin"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "building a free-threaded CPython $version into $prefix (once; a few minutes)" >&2
curl -sSfL --retry 2 -o "$work/src.tar.xz" "$url" \
    || { echo "could not download $url" >&2; exit 2; }
echo "$sha256  $work/src.tar.xz" | sha256sum -c --quiet - \
    || { echo "$url does not have the sha256 $sha256" >&2; exit 2; }
tar -xJf "$work/src.tar.xz" -C "$work"
cd "$work/Python-$version"
# --disable-test-modules: the tests need the interpreter, pip (cibuildwheel runs the image
# Python's own pip, so a local builder image made from it needs one) and venv, nothing else
./configure --disable-gil --prefix="$prefix" --disable-test-modules --with-ensurepip=install \
    >"$work/configure.log" 2>&1 || { tail -20 "$work/configure.log" >&2; exit 2; }
make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -20 "$work/make.log" >&2; exit 2; }
# installed into a staging root first: the finished tree only takes its final name (with the
# prefix it was configured for) once complete, so a build cut off leaves no half-made interpreter
make install DESTDIR="$work/stage" >"$work/install.log" 2>&1 \
    || { tail -20 "$work/install.log" >&2; exit 2; }
# what the tests use of it: a venv with pip (ensurepip's bundled wheel needs zlib)
"$work/stage$prefix/bin/python3.14t" -c 'import sys, zlib, ensurepip, venv; sys.exit(sys._is_gil_enabled())' \
    || { echo "the built interpreter lacks zlib or venv, or is not free-threaded (install zlib1g-dev)" >&2; exit 2; }
# manylinux's layout: bin/python and bin/pip beside python3.14t and pip3
ln -s python3.14t "$work/stage$prefix/bin/python"
ln -s pip3 "$work/stage$prefix/bin/pip"
mkdir -p "$(dirname "$prefix")"
rm -rf "$prefix"
mv "$work/stage$prefix" "$prefix"
echo "$prefix/bin"
