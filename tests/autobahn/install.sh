#!/usr/bin/env bash
# Installs the Autobahn|Testsuite's `wstest` into a Python 2.7 virtualenv (the suite runs on
# Python 2.7 only) and prints the path of `wstest`. From PyPI, pinned (requirements.txt).
#
#   tests/autobahn/install.sh [DIR]        # default DIR: target/autobahn
#
# Exits 3 without installing anything when the machine has no Python 2.7 (pyenv's is looked
# for too; set PYTHON27 to name one). `cargo test -p feedwire-tests --test autobahn_suite`
# then runs the whole suite against the core (FEEDWIRE_WSTEST, or DIR's default place).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:-$here/../../target/autobahn}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

python27=""
for candidate in "${PYTHON27:-}" python2.7 python2 \
    "${PYENV_ROOT:-$HOME/.pyenv}"/versions/2.7*/bin/python2.7; do
    [ -n "$candidate" ] || continue
    if "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (2, 7))' 2>/dev/null; then
        python27="$candidate"
        break
    fi
done
if [ -z "$python27" ]; then
    echo "no Python 2.7 on this machine: the Autobahn|Testsuite cannot run" >&2
    exit 3
fi

wstest="$dir/venv/bin/wstest"
if [ ! -x "$wstest" ]; then
    # virtualenv 20.15 is among the last to make Python 2.7 environments.
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$python27" -m pip install -q --target "$dir/virtualenv" \
        'virtualenv==20.15.1' 2>&1 | grep -v DEPRECATION >&2 || true
    PYTHONPATH="$dir/virtualenv" "$python27" -m virtualenv -q "$dir/venv" >&2
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$dir/venv/bin/pip" install -q -r "$here/requirements.txt" \
        2>&1 | grep -v DEPRECATION >&2 || true
fi
# A run that answers proves the install (the pipes above hide pip's exit status).
"$wstest" --autobahnversion >/dev/null 2>&1 || {
    echo "wstest did not run after installing into $dir/venv" >&2
    exit 1
}
echo "$wstest"
