#!/usr/bin/env bash
# Brings up the local stack: Python venv, PostgreSQL and the AWS stand-in (each step is idempotent).
set -euo pipefail
here="$(dirname "$0")"
source "$here/lib.sh"

"$here/venv.sh"
"$here/postgres.sh"
"$here/postgres-tls.sh"
"$here/aws-standin.sh"
log "ready: DATABASE_URL=$DATABASE_URL AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL (source infra/lib.sh for the rest)"
