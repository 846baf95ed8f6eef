# Shared by bin/run and bin/test: create .venv and install the pinned dependencies when
# they changed, every file checked against its hash: the runtime ones (requirements.lock;
# pip itself is pinned there too), and with TEMPO_VENV_DEV=1 (bin/test) the test and bench
# tools too (requirements-dev.lock). The project is installed editable, without its
# dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
locks=(requirements.lock)
if [ "${TEMPO_VENV_DEV:-}" = 1 ]; then
    locks+=(requirements-dev.lock)
fi
stamp=.venv/.installed-$(cat "${locks[@]}" pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --require-hashes "${locks[@]/#/--requirement=}"
    .venv/bin/python -m pip install --quiet --no-deps -e .
    rm -f .venv/.installed-* && touch "$stamp"
fi
