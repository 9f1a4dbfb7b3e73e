#!/usr/bin/env bash
# Runs the nightly reconciliation from cron (or by hand): loads the environment file, writes the
# report under a dated directory and the Prometheus metrics for node_exporter's textfile
# collector, and passes receipt-reconciler's exit status on (0 completed, 1 failed or
# interrupted, 2 configuration, 3 aborted by the safety limit, 4 another run holds the lock).
#
#   RECEIPT_RECONCILER_ENV   environment file (default /etc/receipt-reconciler.env) holding
#                            DATABASE_URL, APPLE_SHARED_SECRET, and optionally the Apple URLs
#   RECEIPT_RECONCILER_BIN   the binary (default: receipt-reconciler on PATH)
#   RECEIPT_RECONCILER_DATA  reports and metrics go here (default /var/lib/receipt-reconciler)
# Extra arguments go to `receipt-reconciler run` (e.g. --shard 0/2, --dry-run).
set -euo pipefail

# The environment file, `bin` and `data`.
source "$(dirname "$0")/environment.sh"

stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
mkdir -p "$data/reports" "$data/metrics"
exec "$bin" run \
    --report-dir "$data/reports/$stamp" \
    --metrics-file "$data/metrics/receipt_reconciler.prom" \
    --log-format json \
    "$@"
