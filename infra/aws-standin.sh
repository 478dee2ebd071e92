#!/usr/bin/env bash
# Makes sure an AWS stand-in answers at $AWS_ENDPOINT_URL: reuses one (LocalStack, moto) or starts
# moto's server through infra/moto_server_atomic.py (DynamoDB requests serialized: conditional
# writes atomic, as on AWS).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

hostport="${AWS_ENDPOINT_URL#*://}"; hostport="${hostport%%/*}"
host="${hostport%:*}"; port="${hostport##*:}"
pidfile="$OSR_LOCAL/moto.pid"
logfile="$OSR_LOCAL/moto.log"

answers() { curl -s -o /dev/null --max-time 2 "$AWS_ENDPOINT_URL/moto-api/" || curl -s -o /dev/null --max-time 2 "$AWS_ENDPOINT_URL/"; }

if port_open "$host" "$port" && answers; then
  log "AWS stand-in already answers at $AWS_ENDPOINT_URL"
  exit 0
fi
port_open "$host" "$port" && die "$host:$port is taken but gives no HTTP answer"

"$(dirname "$0")/venv.sh" >/dev/null
nohup "$OSR_VENV/bin/python" "$OSR_ROOT/infra/moto_server_atomic.py" -H "$host" -p "$port" \
  >>"$logfile" 2>&1 </dev/null &
echo $! >"$pidfile"
for _ in $(seq 1 150); do
  answers && { log "started moto_server (pid $(cat "$pidfile")) at $AWS_ENDPOINT_URL, log $logfile"; exit 0; }
  kill -0 "$(cat "$pidfile")" 2>/dev/null || break
  sleep 0.2
done
tail -n 20 "$logfile" >&2
die "moto_server did not come up at $AWS_ENDPOINT_URL"
