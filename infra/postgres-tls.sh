#!/usr/bin/env bash
# Makes sure the TLS-only PostgreSQL of the DB_SSLMODE tests answers on 127.0.0.1:$PG_TLS_PORT
# (unset: a free port picked once for this checkout and kept in $PG_TLS_DIR/port): a private
# cluster (.local/pg/tls-<port>, stopped by infra/down.sh) with
# ssl=on and pg_hba accepting TLS connections only (`hostssl`: a plain one is refused), whose
# certificate is for the name `localhost` only and signed by a CA made here. In $PG_TLS_DIR
# (default .local/pg-tls) the tests find ca.pem (that CA) and other-ca.pem (a CA that signed
# nothing of this server). Logins: `postgres` by trust, `osurender_app` with the password in
# app-password (SCRAM: the password path, as from the database secret).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

port="$PG_TLS_PORT"
certs="$PG_TLS_DIR"
base="$(pg_private_base)"
command -v openssl >/dev/null || die "openssl is needed for the test certificates (apt-get install openssl)"
[[ -n "$pg_bindir" ]] || die "no PostgreSQL server binaries found (on Debian: apt-get install postgresql)"
ready() { "$pg_bindir/pg_isready" -q -h 127.0.0.1 -p "$port" 2>/dev/null; }
psql_tls() { "$pg_bindir/psql" "host=127.0.0.1 port=$port user=postgres dbname=postgres sslmode=require" -wXqtA "$@"; }

# ours PORT: this checkout's cluster is the one running on PORT.
ours() { [[ -f "$base/tls-$1/postmaster.pid" ]]; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# make_ca NAME: a self-signed CA, $certs/NAME.pem and NAME.key.
make_ca() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
    -keyout "$certs/$1.key" -out "$certs/$1.pem" -subj "/CN=osurender test $1" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

# The certificates, made once: a server certificate for `localhost`, signed by `ca`.
if [[ ! -f "$certs/ca.pem" || ! -f "$certs/server.crt" ]]; then
  rm -rf "$certs" && mkdir -p "$certs"
  make_ca ca
  make_ca other-ca
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$certs/server.key" \
    -out "$certs/server.csr" -subj "/CN=localhost" 2>/dev/null
  openssl x509 -req -in "$certs/server.csr" -CA "$certs/ca.pem" -CAkey "$certs/ca.key" -CAcreateserial \
    -days 3650 -out "$certs/server.crt" -extfile <(printf '%s\n' "subjectAltName=DNS:localhost" \
      "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth") 2>/dev/null
  openssl rand -hex 16 >"$certs/app-password"
  log "made the test CAs and a server certificate for localhost in $certs"
fi

# The port: as set, or this checkout's own; a remembered port another server took is given up.
if [[ -z "$PG_TLS_PORT" && -f "$certs/port" ]]; then port="$(cat "$certs/port")"; fi
if [[ -z "$port" ]] || { [[ -z "$PG_TLS_PORT" ]] && ready && ! ours "$port"; }; then
  port="$(free_port)"
  log "picked port $port for this checkout's TLS cluster"
fi
echo "$port" >"$certs/port"
data="$base/tls-$port"

if [[ ! -f "$data/PG_VERSION" ]]; then
  as_pg "$pg_bindir/initdb" -D "$data" -A trust -U postgres -E UTF8 --no-locale >"$base/initdb-tls-$port.log" 2>&1 ||
    { cat "$base/initdb-tls-$port.log" >&2; die "initdb failed"; }
  cat >"$data/pg_hba.conf" <<'HBA'
# TLS only over TCP: no `host` line, so a connection in the clear finds no entry.
local   all all                  trust
hostssl all postgres 127.0.0.1/32 trust
hostssl all all      127.0.0.1/32 scram-sha-256
HBA
  cat >>"$data/postgresql.conf" <<'CONF'
ssl = on
ssl_cert_file = 'server.crt'
ssl_key_file = 'server.key'
CONF
  log "initialised the TLS cluster $data"
fi
# The server's certificate and key, readable by the server only (it refuses a key others can read).
for file in server.crt server.key; do
  if ! cmp -s "$certs/$file" "$data/$file"; then
    install -m 600 "$certs/$file" "$data/$file"
    ((EUID == 0)) && chown postgres: "$data/$file"
    changed=1
  fi
done

if ready; then
  if [[ -n "${changed:-}" ]] && ours "$port"; then as_pg "$pg_bindir/pg_ctl" -D "$data" reload >/dev/null; fi
  log "the TLS cluster already answers on 127.0.0.1:$port"
else
  sock="$data"; ((${#sock} > 90)) && sock=""
  as_pg "$pg_bindir/pg_ctl" -D "$data" -l "$base/tls-$port.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k '$sock'" start >/dev/null ||
    { tail -n 20 "$base/tls-$port.log" >&2; die "the TLS cluster did not start"; }
  log "started the TLS cluster $data on 127.0.0.1:$port (log $base/tls-$port.log)"
fi
# What the tests rely on: TLS to `localhost` verified with ca.pem (not another checkout's server).
"$pg_bindir/psql" "host=localhost port=$port user=postgres dbname=postgres sslmode=verify-full sslrootcert=$certs/ca.pem" \
  -wXqtAc 'select 1' >/dev/null ||
  die "127.0.0.1:$port gives no TLS login for postgres verified with $certs/ca.pem (another checkout's TLS cluster? set PG_TLS_PORT)"
password="$(cat "$certs/app-password")"
psql_tls -c "DO \$\$ BEGIN CREATE ROLE osurender_app LOGIN CREATEDB; EXCEPTION WHEN duplicate_object THEN NULL; END \$\$" >/dev/null
psql_tls -c "ALTER ROLE osurender_app PASSWORD '$password'" >/dev/null
