#!/usr/bin/env bash
# Processes the stored server notifications between nights (docs/operating.md, "Running it
# unattended"): loads the environment file, runs `backfill --notifications-only` (the
# notifications, then just the accounts they made due) with a dated report and the Prometheus
# metrics in a file of their own, and passes the exit status on (4: the night holds the lock).
#
#   RECEIPT_RECONCILER_ENV   environment file (default /etc/receipt-reconciler.env)
#   RECEIPT_RECONCILER_BIN   the binary (default: receipt-reconciler on PATH)
#   RECEIPT_RECONCILER_DATA  reports and metrics go here (default /var/lib/receipt-reconciler)
# Extra arguments go to `receipt-reconciler backfill` (e.g. --dry-run).
set -euo pipefail

# The environment file, `bin` and `data`.
source "$(dirname "$0")/environment.sh"

stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
mkdir -p "$data/reports/notifications" "$data/metrics"
exec "$bin" backfill --notifications-only \
    --report-dir "$data/reports/notifications/$stamp" \
    --metrics-file "$data/metrics/receipt_reconciler_notifications.prom" \
    --log-format json \
    "$@"
