# Sourced by the wrappers of cron/ (run-nightly.sh, process-notifications.sh,
# answer-consumption-requests.sh), which are installed together: loads the environment file into
# the environment and sets `bin` and `data` from RECEIPT_RECONCILER_BIN and RECEIPT_RECONCILER_DATA.
# An unreadable file stops the wrapper with exit 2 (configuration), named after the wrapper.
env_file=${RECEIPT_RECONCILER_ENV:-/etc/receipt-reconciler.env}
bin=${RECEIPT_RECONCILER_BIN:-receipt-reconciler}
data=${RECEIPT_RECONCILER_DATA:-/var/lib/receipt-reconciler}

if [ ! -r "$env_file" ]; then
    echo "$(basename "$0" .sh): cannot read the environment file $env_file" >&2
    exit 2
fi
set -a
# shellcheck source=/dev/null
source "$env_file"
set +a
