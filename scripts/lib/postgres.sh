# Starts a throwaway PostgreSQL cluster on a free loopback port and stops it when the calling
# script exits. Source this file, then call `start_throwaway_postgres DIR`; it exports PGPORT,
# RR_PG_ADMIN_URL (key/value connection string of the `postgres` database), RR_PG_BIN and RR_PG_LOG.
# initdb refuses root, so as root the cluster runs as the `postgres` user.
# Durability is off (fsync, synchronous_commit, full_page_writes) for the tests' speed, unless
# RR_PG_DURABLE=1 (the benchmark): then PostgreSQL's defaults, what a production server runs with.
# RR_PG_OPTIONS: more server options (`-c name=value ...`).

find_postgres_bin() {
    local candidate
    for candidate in /usr/lib/postgresql/*/bin; do
        [ -x "$candidate/initdb" ] && RR_PG_BIN="$candidate"
    done
    if [ -z "${RR_PG_BIN:-}" ] && command -v initdb >/dev/null; then RR_PG_BIN=$(dirname "$(command -v initdb)"); fi
    [ -n "${RR_PG_BIN:-}" ] || { echo "PostgreSQL server binaries not found: apt-get install postgresql" >&2; return 1; }
    export RR_PG_BIN
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

as_cluster_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_throwaway_postgres() {
    local dir=$1
    find_postgres_bin || return 1
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
    RR_PG_DATA="$dir/data"
    as_cluster_owner "$RR_PG_BIN/initdb" -D "$RR_PG_DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; return 1; }
    PGPORT=$(free_port)
    local durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    [ "${RR_PG_DURABLE:-0}" = 1 ] && durability="-c fsync=on -c synchronous_commit=on -c full_page_writes=on"
    as_cluster_owner "$RR_PG_BIN/pg_ctl" -D "$RR_PG_DATA" -l "$dir/server.log" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -p $PGPORT -k $dir $durability -c max_connections=300 ${RR_PG_OPTIONS:-}" \
        >/dev/null || { cat "$dir/server.log" >&2; return 1; }
    export PGPORT RR_PG_DATA
    # The server's log: QueryPlanTests reads the plans auto_explain writes there.
    export RR_PG_LOG="$dir/server.log"
    export RR_PG_ADMIN_URL="host=127.0.0.1 port=$PGPORT user=postgres dbname=postgres"
    trap stop_throwaway_postgres EXIT
}

stop_throwaway_postgres() {
    if [ -n "${RR_PG_DATA:-}" ] && [ -d "$RR_PG_DATA" ]; then
        as_cluster_owner "$RR_PG_BIN/pg_ctl" -D "$RR_PG_DATA" -m fast -w stop >/dev/null 2>&1 || true
    fi
}
