#!/usr/bin/env bash
# The midnight-burst benchmark (`cargo bench --bench daemon -- ratio`) with PostgreSQL's statement
# statistics: starts a PostgreSQL server of its own (initdb in a temporary directory, 127.0.0.1,
# a free port, `pg_stat_statements` preloaded, otherwise the settings of the shared server on
# the development machine: fsync on, shared_buffers 128MB, autovacuum off), runs the benchmark
# against it, prints the statements that took the server's time, and stops the server.
#
#   scripts/bench-burst.sh                         # N = 1,000, 5,000, 20,000 on all three
#   SQLCRON_BENCH_SIZES=5000 SQLCRON_BENCH_DIALECTS=postgres scripts/bench-burst.sh
#   SQLCRON_BENCH_PG_SETTINGS="-c pg_stat_statements.track_planning=on" scripts/bench-burst.sh
#   SQLCRON_BENCH_REPEAT=1 SQLCRON_BENCH_WARM_UP=0 scripts/bench-burst.sh   # one cold burst each
#
# Each burst runs three times and a line of medians follows ("median of 3 bursts"): the lines
# the targets are read on (docs/benchmarks.md, "The midnight burst").
#
# MariaDB and SQLite are the usual ones (scripts/ensure-databases.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "bench-burst: PostgreSQL's server binaries are needed (apt-get install postgresql)" >&2
    exit 1
fi
run_pg() { # TOOL ARGS...: as the postgres user when we are root (initdb refuses root)
    local tool=$1; shift
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$bin/$tool" "$@"; else "$bin/$tool" "$@"; fi
}

dir=$(mktemp -d /tmp/sqlcron-bench-pg.XXXXXX)
chmod 755 "$dir"
if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
port=
for p in $(seq 55432 55532); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
done
[ -n "$port" ] || { echo "bench-burst: no free port in 55432-55532" >&2; exit 1; }

stop() {
    run_pg pg_ctl -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap stop EXIT

run_pg initdb -D "$dir/data" -A trust -U postgres --no-sync >/dev/null
run_pg pg_ctl -D "$dir/data" -l "$dir/server.log" -w start -o "-p $port \
    -c listen_addresses=127.0.0.1 -k $dir -c shared_buffers=128MB -c autovacuum=off \
    -c max_connections=100 -c shared_preload_libraries=pg_stat_statements ${SQLCRON_BENCH_PG_SETTINGS:-}" >/dev/null

export SQLCRON_BENCH_PG_PORT=$port
cargo bench --bench daemon -- ratio
