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

# ensure_venv DIR REQUIREMENTS: a venv at DIR (made if missing or broken, kept out of git) with
# the pinned REQUIREMENTS installed from PyPI, skipped while the file is unchanged.
ensure_venv() {
  local venv="$1" req="$2"
  local stamp="$venv/.requirements.sha256" sum
  if ! "$venv/bin/python" -c 'import pip' 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv" || die "python3 -m venv failed (on Debian: apt-get install python3-venv)"
  fi
  [[ -f "$venv/.gitignore" ]] || echo '*' >"$venv/.gitignore"
  sum="$(sha256sum "$req" | cut -d' ' -f1)"
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$sum" ]]; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
    echo "$sum" >"$stamp"
    log "installed ${req#"$OSR_ROOT/"} into $venv"
  fi
}

# start_dev_server NAME [VAR=value ...]: builds osurender-local (and osurender-admin) and starts
# the dev server on a free port of 127.0.0.1 with its own database, bucket, limiter table and
# queue (named after NAME, the time and the pid), generous rate limits and 127.0.0.0/8 as the
# trusted proxy, plus the VAR=value settings given. They are left behind (the integration tests'
# databases are dropped at each test's end; here DROP DATABASE would wait for a checkpoint,
# minutes on a busy machine). Sets DEV_URL, DEV_DATABASE_URL, DEV_SERVER (the pid)
# and DEV_SERVER_LOG (.local/NAME-server.log). Set `trap stop_dev_server EXIT` first: it stops
# the server however the script ends.
start_dev_server() {
  local name="$1"
  shift
  # osurender-admin too (client-check makes its key with it): built together, the two share one
  # build of the core (with its `lambda` feature) instead of one each.
  (cd "$OSR_ROOT" && cargo build --locked -q -p osurender-local -p osurender-admin)
  local unique port
  unique="${name}_$(date +%s)_$$"
  psql -q "${DATABASE_URL%/*}/postgres" -c "CREATE DATABASE osurender_$unique"
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  DEV_URL="http://127.0.0.1:$port"
  DEV_DATABASE_URL="${DATABASE_URL%/*}/osurender_$unique"
  DEV_SERVER_LOG="$OSR_LOCAL/$name-server.log"
  env DATABASE_URL="$DEV_DATABASE_URL" \
    OSURENDER_LISTEN="127.0.0.1:$port" \
    REPLAY_BUCKET="replays-${unique//_/-}" RATE_LIMIT_TABLE="rate-limits-$unique" \
    RENDER_QUEUE_NAME="render-jobs-$unique" WEBHOOK_SECRET="$name-webhook-secret-0123456789" \
    RATE_LIMIT_RENDER="100000/hour" RATE_LIMIT_READ="100000/hour" \
    RATE_LIMIT_SKINS_UPLOAD="100000/hour" RATE_LIMIT_LEGACY_SKINS_UPLOAD="100000/hour" \
    TRUSTED_PROXY_CIDRS="127.0.0.0/8" \
    "$@" \
    "${CARGO_TARGET_DIR:-$OSR_ROOT/target}/debug/osurender-local" >"$DEV_SERVER_LOG" 2>&1 &
  DEV_SERVER=$!
  wait_for_port 127.0.0.1 "$port" 60 || { cat "$DEV_SERVER_LOG"; die "the dev server did not start"; }
  # The port opens before the migrations and provisioning are done; the first answer comes after.
  curl -s -o /dev/null --max-time 60 "$DEV_URL/health" ||
    { cat "$DEV_SERVER_LOG"; die "the dev server did not answer"; }
}

stop_dev_server() {
  if [[ -n "${DEV_SERVER:-}" ]]; then
    kill "$DEV_SERVER" 2>/dev/null || true
    wait "$DEV_SERVER" 2>/dev/null || true
  fi
}
