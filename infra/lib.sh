# Shared helpers and the local environment's defaults for the infra/ scripts (source it, don't run it).
# shellcheck shell=bash

OSR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OSR_LOCAL="$OSR_ROOT/.local"   # logs, pid files, private PostgreSQL clusters (gitignored)
OSR_VENV="$OSR_ROOT/.venv"
mkdir -p "$OSR_LOCAL"

# Defaults of the local environment, in this one place; a value already set wins.
: "${DATABASE_URL:=postgres://postgres@127.0.0.1:${PGPORT:-5432}/osurender}"
: "${AWS_ENDPOINT_URL:=http://127.0.0.1:4566}"
: "${AWS_REGION:=us-east-1}"
: "${AWS_ACCESS_KEY_ID:=test}"
: "${AWS_SECRET_ACCESS_KEY:=test}"
: "${OSURENDER_PYTHON:=$OSR_VENV/bin/python}"
export DATABASE_URL AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY OSURENDER_PYTHON

log() { printf '[%s] %s\n' "$(basename "$0" .sh)" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }

# port_open HOST PORT: true when something accepts TCP connections there.
port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }

# wait_for_port HOST PORT SECONDS: wait until port_open, fail after SECONDS.
wait_for_port() {
  local deadline=$((SECONDS + $3))
  until port_open "$1" "$2"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}
