#!/usr/bin/env bash
# The fleet benchmark (`cargo bench --bench daemon -- fleet`, benches/daemon/fleet.rs) against
# servers of its own: a PostgreSQL (pg_stat_statements preloaded, its default autovacuum) and a
# MariaDB, each in a temporary directory on a free port of 127.0.0.1, allowing
# ${FLEET_MAX_CONNECTIONS:-1000} connections (a default server allows 100 and 151: 200 nodes
# would not fit). Stopped, and their directories removed, at the end.
#
#   scripts/bench-fleet.sh                                  # N = 3, 50, 200; PostgreSQL, MariaDB, SQLite (N = 3)
#   SQLCRON_BENCH_FLEET=3,50 SQLCRON_BENCH_DIALECTS=postgres scripts/bench-fleet.sh
#   FLEET_MAX_CONNECTIONS=100 SQLCRON_BENCH_FLEET=50 scripts/bench-fleet.sh   # a default server's limit
#   FLEET_MAX_CONNECTIONS=100 FLEET_PGBOUNCER=20 SQLCRON_BENCH_FLEET_WAKEUPS=false \
#       SQLCRON_BENCH_DIALECTS=postgres scripts/bench-fleet.sh  # through PgBouncer (transaction
#       # pooling, 20 server connections); LISTEN needs the server itself, hence no wake-ups
#   SQLCRON_BENCH_FLEET=3,200 SQLCRON_BENCH_FLEET_AT_ONCE=48 scripts/bench-fleet.sh
#       # each node's max_parallel 48 / N (at least 1): as many bodies at once for every N
#   FLEET_MY_SETTINGS="--transaction-isolation=READ-COMMITTED" SQLCRON_BENCH_DIALECTS=mysql \
#       scripts/bench-fleet.sh                              # MariaDB started with extra options
set -euo pipefail
cd "$(dirname "$0")/.."

max=${FLEET_MAX_CONNECTIONS:-1000}
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$pgbin" ] || [ ! -x "$pgbin/initdb" ]; then
    echo "bench-fleet: PostgreSQL's server binaries are needed (apt-get install postgresql)" >&2
    exit 1
fi
command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || {
    echo "bench-fleet: MariaDB's server is needed (apt-get install mariadb-server)" >&2
    exit 1
}
mariadbd=$(command -v mariadbd || echo /usr/sbin/mariadbd)
run_pg() { # TOOL ARGS...: as the postgres user when we are root (initdb refuses root)
    local tool=$1; shift
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$pgbin/$tool" "$@"; else "$pgbin/$tool" "$@"; fi
}
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

dir=$(mktemp -d /tmp/sqlcron-bench-fleet.XXXXXX)
chmod 755 "$dir"
mkdir "$dir/pg" "$dir/my" "$dir/my/tmp"
if [ "$(id -u)" = 0 ]; then chown postgres "$dir/pg"; fi
pg_port=$(free_port)
my_port=$(free_port)
my_pid=

stop() {
    run_pg pg_ctl -D "$dir/pg/data" -m fast -w stop >/dev/null 2>&1 || true
    if [ -n "$my_pid" ]; then kill "$my_pid" 2>/dev/null || true; wait "$my_pid" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap stop EXIT

run_pg initdb -D "$dir/pg/data" -A trust -U postgres --no-sync >/dev/null
run_pg pg_ctl -D "$dir/pg/data" -l "$dir/pg/server.log" -w start -o "-p $pg_port \
    -c listen_addresses=127.0.0.1 -k $dir/pg -c shared_buffers=128MB \
    -c max_connections=$max -c shared_preload_libraries=pg_stat_statements" >/dev/null

mariadb-install-db --no-defaults --datadir="$dir/my/data" --tmpdir="$dir/my/tmp" \
    --auth-root-authentication-method=normal --skip-test-db --user=root >/dev/null
"$mariadbd" --no-defaults --datadir="$dir/my/data" --socket="$dir/my/sock" \
    --pid-file="$dir/my/pid" --port="$my_port" --tmpdir="$dir/my/tmp" \
    --bind-address=127.0.0.1 --user=root --skip-log-bin --max-connections="$max" \
    --log-error="$dir/my/err.log" ${FLEET_MY_SETTINGS:-} </dev/null >/dev/null 2>&1 &
my_pid=$!
for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$my_port") 2>/dev/null && break
    sleep 0.1
done

if [ -n "${FLEET_PGBOUNCER:-}" ]; then
    bouncer=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
    bouncer_port=$(free_port)
    mkdir "$dir/bouncer"
    echo '"postgres" ""' > "$dir/bouncer/users.txt"
    cat > "$dir/bouncer/pgbouncer.ini" <<EOF
[databases]
* = host=127.0.0.1 port=$pg_port
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = trust
auth_file = $dir/bouncer/users.txt
pool_mode = transaction
default_pool_size = $FLEET_PGBOUNCER
max_client_conn = 5000
ignore_startup_parameters = extra_float_digits
logfile = $dir/bouncer/pgbouncer.log
EOF
    as_user=()
    if [ "$(id -u)" = 0 ]; then chown -R postgres "$dir/bouncer"; as_user=(-u postgres); fi
    "$bouncer" "${as_user[@]}" "$dir/bouncer/pgbouncer.ini" </dev/null >/dev/null 2>&1 &
    bouncer_pid=$!
    trap 'kill $bouncer_pid 2>/dev/null; stop' EXIT
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$bouncer_port") 2>/dev/null && break
        sleep 0.1
    done
    export SQLCRON_BENCH_PG_POOLER_PORT=$bouncer_port SQLCRON_BENCH_PG_POOLER_PID=$bouncer_pid
fi

export SQLCRON_BENCH_PG_PORT=$pg_port SQLCRON_BENCH_MY_PORT=$my_port
cargo bench --bench daemon -- fleet
