#!/usr/bin/env bash
# Stops what infra/up.sh started itself (moto_server, private PostgreSQL clusters in .local/pg); never the machine's services.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

pidfile="$OSR_LOCAL/moto.pid"
if [[ -f "$pidfile" ]]; then
  pid="$(cat "$pidfile")"
  if grep -qa moto_server "/proc/$pid/cmdline" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    log "stopped moto_server (pid $pid)"
  fi
  rm -f "$pidfile"
fi

for data in "$OSR_LOCAL"/pg/*/; do
  data="${data%/}"
  [[ -f "$data/postmaster.pid" && -f "$data/PG_VERSION" ]] || continue
  pg_ctl="/usr/lib/postgresql/$(cat "$data/PG_VERSION")/bin/pg_ctl"
  [[ -x "$pg_ctl" ]] || pg_ctl="$(command -v pg_ctl)"
  if ((EUID == 0)); then
    (cd / && runuser -u postgres -- "$pg_ctl" -D "$(readlink -f "$data")" -m fast -w stop >/dev/null)
  else
    "$pg_ctl" -D "$data" -m fast -w stop >/dev/null
  fi
  log "stopped private PostgreSQL cluster $data"
done
log "done"
