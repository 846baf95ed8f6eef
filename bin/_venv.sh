# Shared by bin/run and bin/test: create .venv and install the pinned dependencies
# (requirements.lock, every file checked against its hash; pip itself is pinned there too)
# when they changed. The project itself is installed editable, without dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.installed-$(cat requirements.lock pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --require-hashes -r requirements.lock
    .venv/bin/python -m pip install --quiet --no-deps -e .
    rm -f .venv/.installed-* && touch "$stamp"
fi
