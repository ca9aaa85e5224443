#!/usr/bin/env bash
# Builds a free-threaded CPython (--disable-gil) from Debian trixie's python3.13
# source package, into a cache directory keyed on the source version, and prints
# the interpreter's path on stdout. A second run finds the cache and only prints.
#
#   tools/freethreaded/build.sh            # -> ~/.cache/grain-freethreaded/3.13.5/bin/python3.13t
#
# Environment:
#   GRAIN_FT_CACHE    cache root (default: ${XDG_CACHE_HOME:-~/.cache}/grain-freethreaded)
#   GRAIN_FT_VERSION  upstream version expected in the source package (default: 3.13.5)
#   GRAIN_FT_JOBS     make -j (default: nproc)
#
# The build's output goes to $CACHE/build-$VERSION.log, never to stdout: stdout
# carries the interpreter's path only, stderr a few progress lines.
# Recipe and background: docs/freethreaded.md.
set -euo pipefail

VERSION="${GRAIN_FT_VERSION:-3.13.5}"
MINOR="${VERSION%.*}"
CACHE="${GRAIN_FT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/grain-freethreaded}"
PREFIX="$CACHE/$VERSION"
PYTHON="$PREFIX/bin/python${MINOR}t"
LOG="$CACHE/build-$VERSION.log"
JOBS="${GRAIN_FT_JOBS:-$(nproc)}"

check() {
    "$PYTHON" -c "import sys, sysconfig
assert sysconfig.get_config_var('Py_GIL_DISABLED') == 1
assert not sys._is_gil_enabled()" 2>/dev/null
}

if [ -x "$PYTHON" ] && [ -f "$PREFIX/.complete" ] && check; then
    echo "$PYTHON"
    exit 0
fi

mkdir -p "$CACHE"
# One build at a time per cache: a second caller waits for the first.
exec 9>"$CACHE/.lock-$VERSION"
flock 9
if [ -x "$PYTHON" ] && [ -f "$PREFIX/.complete" ] && check; then
    echo "$PYTHON"
    exit 0
fi

WORK="$(mktemp -d "$CACHE/build-$VERSION.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
: >"$LOG"
echo "building free-threaded CPython $VERSION (log: $LOG)" >&2
START=$SECONDS

# The build runs in a subshell with its own errexit, its output in the log. Not as
# `{ ...; } >>LOG || handler`: bash ignores errexit on the left of ||, so a failed
# step went on to the next one, and an `exit` in the braces skipped the handler.
set +e
(
    set -e
    # Fetch the source package without touching the system's apt state.
    mkdir -p "$WORK/apt/lists/partial" "$WORK/apt/cache/archives/partial" "$WORK/src"
    cat >"$WORK/apt/trixie-src.sources" <<SOURCES
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    APT_OPTS=(
        -o "Dir::Etc::sourcelist=$WORK/apt/trixie-src.sources"
        -o "Dir::Etc::sourceparts=/dev/null"
        -o "Dir::State::Lists=$WORK/apt/lists"
        -o "Dir::Cache=$WORK/apt/cache"
        -o "APT::Sandbox::User=$(id -un)"
    )
    apt-get "${APT_OPTS[@]}" update
    (cd "$WORK/src" && apt-get "${APT_OPTS[@]}" source --download-only "python${MINOR}/trixie")

    ORIG="$(ls "$WORK/src/python${MINOR}_${VERSION}".orig.tar.* 2>/dev/null | head -n 1)"
    if [ -z "$ORIG" ]; then
        echo "trixie's python${MINOR} source package is not version $VERSION:" >&2
        ls "$WORK/src" >&2
        exit 3
    fi
    DEBIAN="$(ls "$WORK/src/python${MINOR}_${VERSION}"-*.debian.tar.* | head -n 1)"
    mkdir -p "$WORK/src/cpython" "$WORK/src/debian-tree"
    tar -xf "$ORIG" -C "$WORK/src/cpython" --strip-components=1
    tar -xf "$DEBIAN" -C "$WORK/src/debian-tree"

    # Debian's layout patches (dist-packages, multiarch) confuse pip and uv under
    # --prefix; the ones after revert-logger-disable.diff are security and bug
    # fixes, applied in series order.
    SERIES="$WORK/src/debian-tree/debian/patches/series"
    APPLY=0
    while IFS= read -r PATCH; do
        PATCH="${PATCH%%#*}"
        PATCH="$(echo "$PATCH" | xargs)"
        [ -n "$PATCH" ] || continue
        if [ "$APPLY" = 1 ]; then
            echo "applying $PATCH"
            patch -d "$WORK/src/cpython" -p1 --forward <"$WORK/src/debian-tree/debian/patches/$PATCH"
        fi
        [ "$PATCH" = revert-logger-disable.diff ] && APPLY=1
    done <"$SERIES"

    rm -rf "$PREFIX"
    cd "$WORK/src/cpython"
    ./configure --disable-gil --prefix="$PREFIX"
    make -j"$JOBS"
    make install
) >>"$LOG" 2>&1
STATUS=$?
set -e
if [ "$STATUS" -ne 0 ]; then
    echo "free-threaded CPython build failed (status $STATUS); last lines of $LOG:" >&2
    tail -n 30 "$LOG" >&2
    exit "$STATUS"
fi

if ! check; then
    echo "built $PYTHON, but it is not a free-threaded interpreter (log: $LOG)" >&2
    exit 4
fi
touch "$PREFIX/.complete"
echo "built in $((SECONDS - START)) s" >&2
echo "$PYTHON"
