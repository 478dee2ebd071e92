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
# The TLS-only PostgreSQL of the DB_SSLMODE tests (infra/postgres-tls.sh) and its CAs. Its port
# is PG_TLS_PORT when set, else a free one postgres-tls.sh picks once for this checkout and keeps
# in $PG_TLS_DIR/port (where the tests read it), so two checkouts on one machine never collide.
: "${PG_TLS_DIR:=$OSR_LOCAL/pg-tls}"
PG_TLS_PORT="${PG_TLS_PORT:-}"
export DATABASE_URL AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY OSURENDER_PYTHON
export PG_TLS_PORT PG_TLS_DIR

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

# PostgreSQL server binaries: Debian's newest /usr/lib/postgresql/<ver>/bin, else whatever is on PATH.
pg_bindir="$(find /usr/lib/postgresql -path '*/bin/initdb' 2>/dev/null | sort -V | tail -n1 | xargs -r dirname)"
[[ -z "$pg_bindir" ]] && command -v initdb >/dev/null && pg_bindir="$(dirname "$(command -v initdb)")"

# as_pg CMD...: run a server command as the postgres OS user when we are root (postgres refuses root).
as_pg() { if ((EUID == 0)); then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }

# pg_private_base: prints the directory of the private clusters (.local/pg, which infra/down.sh
# stops), made reachable for the postgres OS user: if the repo is not (e.g. under /root), a
# symlink to a directory in /var/tmp.
pg_private_base() {
  local base="$OSR_LOCAL/pg"
  if ((EUID == 0)) && [[ ! -e "$base" ]] && ! runuser -u postgres -- test -x "$OSR_LOCAL"; then
    local alt; alt="/var/tmp/osurender-pg-$(printf %s "$OSR_ROOT" | sha256sum | cut -c1-12)"
    mkdir -p "$alt" && ln -s "$alt" "$base"
  fi
  mkdir -p "$base"
  base="$(readlink -f "$base")"
  if ((EUID == 0)); then chown postgres: "$base"; fi
  printf '%s\n' "$base"
}
