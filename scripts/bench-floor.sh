#!/usr/bin/env bash
# The database's floor under a run: what the least a scheduler must write per run costs the
# database, with no sqlcron in the way. A narrow job table (id, name, command, schedule and the
# five columns a claim and a release change) and a narrow run table (its key, the run's
# identity, start, end and outcome); per batch of 16 due jobs, two transactions: the claim with
# the start records, then the finish with the release. Nothing else: no triggers, no policy
# columns, no audit, no heartbeat, no lease extension. Prints the CPU the database spends per
# job (the server's processes; for SQLite, the sqlite3 process itself), to set beside the
# burst benchmark's scheduler CPU per job and `xargs`'s own CPU per body (docs/benchmarks.md,
# "The database's floor under a run").
#
#   scripts/bench-floor.sh                  # N = 20,000, three passes of each
#   FLOOR_N=5000 FLOOR_PASSES=1 scripts/bench-floor.sh
#
# Uses the shared servers (PostgreSQL 127.0.0.1:5432 as postgres, MariaDB 127.0.0.1:3306 as
# root), whose processes it must be able to read in /proc (the same machine); each gets a
# database of its own, `sqlcron_floor_<pid>`, dropped at the end.
set -euo pipefail
n=${FLOOR_N:-20000}
passes=${FLOOR_PASSES:-3}
batch=16
db=sqlcron_floor_$$
work=$(mktemp -d /tmp/sqlcron-floor.XXXXXX)
pg() { psql -h 127.0.0.1 -U postgres -X -q -v ON_ERROR_STOP=1 "$@"; }
my() { mysql -h 127.0.0.1 -u root "$@"; }
cleanup() {
    pg -d postgres -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
    my -e "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
hz=$(getconf CLK_TCK)

# CPU ticks of a process and of the children it reaped; with `tree`, of its living children too.
ticks() { # PID [tree]
    local t p
    t=$(awk '{print $14+$15+$16+$17}' "/proc/$1/stat")
    if [ "${2:-}" = tree ]; then
        for p in $(pgrep -P "$1"); do
            t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
        done
    fi
    echo "$t"
}
per_job() { # TICKS JOBS
    awk -v t="$1" -v j="$2" -v hz="$hz" 'BEGIN { printf "%.4f", t / hz * 1000 / j }'
}

# The statement stream of one session: batch k takes the 16 due jobs first in `next_exec`
# order under token k, records their starts, then finishes and releases them.
stream() { # DIALECT
    local k begin
    case $1 in sqlite) begin="BEGIN IMMEDIATE;" ;; *) begin="BEGIN;" ;; esac
    for ((k = 1; k <= n / batch; k++)); do
        case $1 in
        sqlite) echo "$begin UPDATE jobs SET exec_by = 'node', token = $k, lease_until = 2000 WHERE id IN (SELECT id FROM jobs WHERE next_exec <= 1500 AND exec_by IS NULL ORDER BY next_exec LIMIT $batch) RETURNING name, slot, command;" ;;
        mysql) echo "$begin UPDATE jobs SET exec_by = 'node', token = $k, lease_until = 2000 WHERE next_exec <= 1500 AND exec_by IS NULL ORDER BY next_exec LIMIT $batch; SELECT name, slot, command FROM jobs WHERE token = $k;" ;;
        esac
        echo "INSERT INTO runs (job_name, slot, attempt, token, node, started) SELECT name, slot, 1, token, exec_by, 1500 FROM jobs WHERE token = $k; COMMIT;"
        echo "$begin UPDATE runs SET ended = 1600, outcome = 'ok' WHERE token = $k;"
        echo "UPDATE jobs SET next_exec = 999999, slot = 999999, exec_by = NULL, token = NULL, lease_until = NULL WHERE token = $k; COMMIT;"
    done
}

schema() { # DIALECT: the two narrow tables and N due jobs
    local serial=integer text=text
    case $1 in
    postgres) serial="bigserial" ;;
    mysql) serial="bigint AUTO_INCREMENT"; text="varchar(200)" ;;
    sqlite) serial="integer" ;;
    esac
    cat <<EOF
DROP TABLE IF EXISTS jobs; DROP TABLE IF EXISTS runs;
CREATE TABLE jobs (id $serial PRIMARY KEY, name $text NOT NULL UNIQUE, command $text NOT NULL,
  schedule $text NOT NULL, next_exec bigint, slot bigint, exec_by $text, token bigint,
  lease_until bigint);
CREATE INDEX jobs_due ON jobs (next_exec);
CREATE INDEX jobs_token ON jobs (token);
CREATE TABLE runs (id $serial PRIMARY KEY, job_name $text NOT NULL, slot bigint NOT NULL,
  attempt int NOT NULL, token bigint NOT NULL, node $text NOT NULL, started bigint NOT NULL,
  ended bigint, outcome $text, UNIQUE (job_name, slot, attempt));
CREATE INDEX runs_token ON runs (token);
EOF
    for ((i = 1; i <= n; i += 1000)); do
        echo "INSERT INTO jobs (name, command, schedule, next_exec, slot) VALUES"
        seq "$i" $((i + 999 < n ? i + 999 : n)) | sed "s/.*/('job-&', 'true', '* * * * *', 1000, 1000)/" | paste -sd, -
        echo ";"
    done
}

finished() { # DIALECT CLIENT...: the count of finished runs
    shift
    "$@" <<<"SELECT count(*) FROM runs WHERE ended IS NOT NULL;" | tail -1
}

echo "floor      N=$n, batches of $batch, $passes pass(es) each: the database's CPU per job"

# SQLite: the engine runs in the sqlite3 process; WAL and synchronous = NORMAL, as sqlcron's.
for ((p = 1; p <= passes; p++)); do
    rm -f "$work/floor.db"*
    schema sqlite | sqlite3 "$work/floor.db" >/dev/null
    sqlite3 "$work/floor.db" "PRAGMA journal_mode = WAL" >/dev/null
    stream sqlite >"$work/sqlite.sql"
    { echo "PRAGMA synchronous = NORMAL;"; cat "$work/sqlite.sql"; } >"$work/sqlite-run.sql"
    /usr/bin/time -f "%U %S" -o "$work/time" sqlite3 "$work/floor.db" <"$work/sqlite-run.sql" >/dev/null
    jobs=$(sqlite3 "$work/floor.db" "SELECT count(*) FROM runs WHERE ended IS NOT NULL")
    t=$(awk -v hz="$hz" '{ printf "%d", ($1 + $2) * hz }' "$work/time")
    echo "floor      sqlite   1 session : $(per_job "$t" "$jobs") ms per job ($jobs runs)"
done

# PostgreSQL: pgbench, prepared statements (as sqlcron sends them), 1 and 3 sessions racing
# for the same rows with SKIP LOCKED, the claim and the start records in one statement.
pg -d postgres -c "CREATE DATABASE $db"
pm=$(head -1 "$(pg -d "$db" -Atc "SELECT current_setting('data_directory')")/postmaster.pid")
cat >"$work/pg.sql" <<EOF
\set tok random(1, 4000000000000000000)
WITH c AS (UPDATE jobs SET exec_by = 'node-' || :client_id, token = :tok, lease_until = 2000 WHERE id IN (SELECT id FROM jobs WHERE next_exec <= 1500 AND exec_by IS NULL ORDER BY next_exec LIMIT $batch FOR UPDATE SKIP LOCKED) RETURNING name, slot, command, exec_by), i AS (INSERT INTO runs (job_name, slot, attempt, token, node, started) SELECT name, slot, 1, :tok, exec_by, 1500 FROM c RETURNING job_name) SELECT coalesce(array_agg(job_name), '{}') AS names FROM i
\gset
WITH f AS (UPDATE runs SET ended = 1600, outcome = 'ok' WHERE job_name = ANY (:names::text[]) AND slot = 1000 AND attempt = 1 AND token = :tok RETURNING job_name) UPDATE jobs SET next_exec = 999999, slot = 999999, exec_by = NULL, token = NULL, lease_until = NULL WHERE name IN (SELECT job_name FROM f) AND token = :tok;
EOF
for sessions in 1 3; do
    for ((p = 1; p <= passes; p++)); do
        schema postgres | pg -d "$db" >/dev/null 2>&1
        pg -d "$db" -c "VACUUM ANALYZE jobs" -c "CHECKPOINT"
        before=$(ticks "$pm" tree)
        pgbench -h 127.0.0.1 -U postgres -n -M prepared -c "$sessions" -j 1 \
            -t $(((n / batch + 10) / sessions + 1)) -f "$work/pg.sql" "$db" >/dev/null 2>&1
        after=$(ticks "$pm" tree)
        jobs=$(finished postgres pg -d "$db" -At)
        echo "floor      postgres $sessions session(s): $(per_job $((after - before)) "$jobs") ms per job ($jobs runs)"
    done
done

# MariaDB: one session (MariaDB's UPDATE has no SKIP LOCKED: sessions racing for the same rows
# wait on each other), the mysql client's text protocol.
my -e "CREATE DATABASE $db"
mpid=$(cat "$(my -N -e "SELECT @@pid_file")")
for ((p = 1; p <= passes; p++)); do
    schema mysql | my "$db"
    my "$db" -e "ANALYZE TABLE jobs" >/dev/null
    stream mysql >"$work/mysql.sql"
    before=$(ticks "$mpid")
    my "$db" <"$work/mysql.sql" >/dev/null
    after=$(ticks "$mpid")
    jobs=$(finished mysql my -N "$db")
    echo "floor      mysql    1 session : $(per_job $((after - before)) "$jobs") ms per job ($jobs runs)"
done

# What starting a body costs with no scheduler: `xargs -P16`'s own CPU per body.
printf '#!/bin/sh\nexit 0\n' >"$work/body"
chmod +x "$work/body"
seq "$n" >"$work/list"
if ! command -v perf >/dev/null; then
    echo "floor      xargs: not measured (perf is needed: apt-get install linux-perf)"
    exit 0
fi
for ((p = 1; p <= passes; p++)); do
    perf stat -i -x, -e task-clock -o "$work/xargs" xargs -P16 -n1 "$work/body" <"$work/list"
    awk -F, -v n="$n" '/task-clock/ { printf "floor      xargs -P16 own CPU: %.4f ms per body\n", $1 / n }' "$work/xargs"
done
