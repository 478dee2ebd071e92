#!/usr/bin/env bash
# Makes sure PostgreSQL answers on 127.0.0.1:$PGPORT (default 5432) with trust auth, then creates the DATABASE_URL database.
# Order: a server already there > the machine's Debian cluster on that port > a private cluster in .local/pg/<port>.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

port="${PGPORT:-5432}"
url="${DATABASE_URL%%\?*}"
db="${url##*/}"
admin_url="${url%/*}/postgres"

bindir="$pg_bindir"
pgtool() { if command -v "$1" >/dev/null; then command -v "$1"; elif [[ -n "$bindir" ]]; then echo "$bindir/$1"; else echo "$1"; fi; }
PSQL="$(pgtool psql)"

ready() { if command -v pg_isready >/dev/null; then pg_isready -q -h 127.0.0.1 -p "$port" 2>/dev/null; else port_open 127.0.0.1 "$port"; fi; }
wait_ready() { for _ in $(seq 1 100); do ready && return 0; sleep 0.2; done; return 1; }
can_login() { "$PSQL" "$admin_url" -wXqtAc 'select 1' >/dev/null 2>&1; }

start_debian_cluster() {
  command -v pg_lsclusters >/dev/null || return 1
  local ver name
  read -r ver name < <(pg_lsclusters -h 2>/dev/null | awk -v p="$port" '$3 == p { print $1, $2; exit }') || return 1
  pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start 2>/dev/null || return 1
  if wait_ready && can_login; then
    log "started the machine's PostgreSQL cluster $ver/$name on 127.0.0.1:$port"
    return 0
  fi
  log "cluster $ver/$name gives no trust login for postgres on 127.0.0.1:$port; stopping it again"
  pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" stop 2>/dev/null || true
  return 1
}

start_private_cluster() {
  [[ -n "$bindir" ]] || die "no PostgreSQL server binaries found (on Debian: apt-get install postgresql)"
  local base; base="$(pg_private_base)"
  local data="$base/$port"
  if [[ ! -f "$data/PG_VERSION" ]]; then
    as_pg "$bindir/initdb" -D "$data" -A trust -U postgres -E UTF8 --no-locale >"$base/initdb-$port.log" 2>&1 ||
      { cat "$base/initdb-$port.log" >&2; die "initdb failed"; }
    log "initialised private cluster $data"
  fi
  local sock="$data"; ((${#sock} > 90)) && sock=""   # unix socket path length limit: TCP only then
  as_pg "$bindir/pg_ctl" -D "$data" -l "$base/$port.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k '$sock'" start >/dev/null ||
    { tail -n 20 "$base/$port.log" >&2; die "private cluster did not start"; }
  wait_ready || die "private cluster started but 127.0.0.1:$port does not answer"
  log "started private cluster $data on 127.0.0.1:$port (log $base/$port.log)"
}

if ready; then
  log "PostgreSQL already answers on 127.0.0.1:$port"
elif ! start_debian_cluster; then
  ready && die "127.0.0.1:$port is taken by a server that gives no trust login for postgres"
  start_private_cluster
fi

can_login || die "cannot log in as $admin_url without a password (set DATABASE_URL or allow trust auth)"
if [[ "$("$PSQL" "$admin_url" -wXqtAc "select 1 from pg_database where datname = '$db'")" == 1 ]]; then
  log "database $db exists"
else
  "$PSQL" "$admin_url" -wXqc "create database \"$db\"" >/dev/null
  log "created database $db"
fi
