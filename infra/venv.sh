#!/usr/bin/env bash
# Creates <repo>/.venv and installs infra/requirements.txt into it (skipped when unchanged).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

req="$OSR_ROOT/infra/requirements.txt"
stamp="$OSR_VENV/.requirements.sha256"

if ! "$OSR_VENV/bin/python" -c 'import pip' 2>/dev/null; then
  rm -rf "$OSR_VENV"
  python3 -m venv "$OSR_VENV" ||
    die "python3 -m venv failed (on Debian: apt-get install python3-venv)"
  log "created $OSR_VENV"
fi

sum="$(sha256sum "$req" | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$sum" ]]; then
  log "venv up to date ($OSR_VENV)"
  exit 0
fi
"$OSR_VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
echo "$sum" >"$stamp"
log "installed infra/requirements.txt into $OSR_VENV"
