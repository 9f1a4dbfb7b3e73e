#!/usr/bin/env bash
# Answers Apple's CONSUMPTION_REQUESTs (docs/consumption.md) from cron, the systemd timer or by
# hand, every 15 to 60 minutes: loads the environment file, writes the Prometheus metrics of the
# answers to a file of their own for node_exporter's textfile collector, and passes
# receipt-reconciler's exit status on (0 completed, 1 failed, 2 configuration or Apple refusing the
# key, 4 another answering process runs).
#
#   RECEIPT_RECONCILER_ENV   environment file (default /etc/receipt-reconciler.env) holding
#                            DATABASE_URL, APPSTORE_ISSUER_ID, APPSTORE_KEY_ID,
#                            APPSTORE_PRIVATE_KEY_FILE, APPSTORE_BUNDLE_ID, APPSTORE_APP_APPLE_ID
#   RECEIPT_RECONCILER_BIN   the binary (default: receipt-reconciler on PATH)
#   RECEIPT_RECONCILER_DATA  metrics go here (default /var/lib/receipt-reconciler)
# Extra arguments go to `receipt-reconciler answer-consumption-requests` (e.g. --dry-run).
set -euo pipefail

# The environment file, `bin` and `data`.
source "$(dirname "$0")/environment.sh"

mkdir -p "$data/metrics"
exec "$bin" answer-consumption-requests \
    --metrics-file "$data/metrics/receipt_reconciler_consumption.prom" \
    --log-format json \
    "$@"
