#!/usr/bin/env bash
# `pip install .` into a fresh virtual environment, then the package tests against the
# installed wheel (not the in-tree package): what a user gets. Needs network for pip to
# fetch scikit-build-core, numpy and pytest. ctest runs it as py_pip_install (label slow).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d "${TMPDIR:-/tmp}/graft-venv.XXXXXX")
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q . pytest
# from outside the checkout, so `import graft` cannot find python/graft
cd "$venv"
"$venv/bin/python" -c "import graft, os; assert graft.LIBRARY_PATH.startswith('$venv'), graft.LIBRARY_PATH; print('graft from', os.path.dirname(graft.__file__))"
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$OLDPWD/tests/py/test_package.py"
