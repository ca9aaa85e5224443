#!/usr/bin/env bash
# The quick tests (-m "not slow") on free-threaded CPython 3.13t, from a checkout:
# builds the interpreter if it is not cached (tools/freethreaded/build.sh; its log goes
# to a file), makes .venv-freethreaded with the layers (editable) and what has a
# free-threaded wheel (requirements-test.txt), then runs pytest there. Arguments go to
# pytest (default: -m "not slow"). See docs/freethreaded.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

export UV_PYTHON_DOWNLOADS=never
UV=(uv)
command -v uv >/dev/null 2>&1 || UV=(python3 -m uv)

python="$(tools/freethreaded/build.sh)"
venv=.venv-freethreaded
"${UV[@]}" venv --quiet --allow-existing --python "$python" "$venv"
# --only-binary: numpy 2.5 has no cp313t wheel, and nothing else may compile either.
"${UV[@]}" pip install --quiet --python "$venv/bin/python" --only-binary :all: \
    -r tools/freethreaded/requirements-test.txt
# The face and grain-convert require grain-sources[arrayrecord] (array-record: no cp313t
# wheel); their layers are installed above, so they go in without their requirements, as
# the docs say.
"${UV[@]}" pip install --quiet --python "$venv/bin/python" --no-deps \
    -e packages/grain-convert -e packages/grain
if [ "$#" -eq 0 ]; then
    set -- -m "not slow"
fi
exec "$venv/bin/python" -m pytest "$@"
