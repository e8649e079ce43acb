#!/usr/bin/env bash
# A throwaway two-node Patroni cluster with a one-member etcd (v3 API) on 127.0.0.1, for
# tests/it/patroni.rs (SQLCRON_LONG=1).
# Debian 12: apt-get install -y patroni etcd-server etcd-client (PG15 in /usr/lib/postgresql/15/bin).
# Run as root. Machine-readable KEY=VALUE lines go to stdout (use: eval "$(./up.sh)"),
# progress goes to stderr. Tear down with: ./down.sh "$LAB_DIR"
#
# Env knobs:
#   SYNC_MODE=true|false      bootstrap.dcs.synchronous_mode     (default false)
#   FAILSAFE_MODE=true|false  bootstrap.dcs.failsafe_mode        (default false)
#   SCOPE=name                Patroni scope / cluster name       (default sqlcron-test)
#   PG_BIN=dir                PostgreSQL bin dir                 (default /usr/lib/postgresql/15/bin)
#   UP_TIMEOUT=secs           deadline for healthy cluster       (default 180)
#   LAB_BASE=dir              parent of the temp dir             (default ${TMPDIR:-/tmp})
set -euo pipefail

SYNC_MODE=${SYNC_MODE:-false}
FAILSAFE_MODE=${FAILSAFE_MODE:-false}
SCOPE=${SCOPE:-sqlcron-test}
PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
UP_TIMEOUT=${UP_TIMEOUT:-180}
LAB_BASE=${LAB_BASE:-${TMPDIR:-/tmp}}
HERE=$(cd "$(dirname "$0")" && pwd)

log() { echo "[up $(date +%T)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (daemons are started as postgres via setpriv)"
for b in etcd etcdctl patroni patronictl psql python3 curl setpriv setsid; do
  command -v "$b" >/dev/null || die "missing $b"
done
[ -x "$PG_BIN/initdb" ] || die "no initdb in $PG_BIN"

# --- free ports: bind 6 sockets to port 0 at once so they are distinct, then release
read -r ETCD_CLIENT ETCD_PEER PG1 PG2 API1 API2 < <(python3 - <<'EOF'
import socket
ss = []
for _ in range(6):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ss.append(s)
print(*[s.getsockname()[1] for s in ss])
for s in ss: s.close()
EOF
)

# --- temp dir owned by postgres (0700)
LAB_DIR=$(mktemp -d "$LAB_BASE/patroni-lab.XXXXXX")
touch "$LAB_DIR/.patroni-lab"          # marker: down.sh refuses to rm -rf a dir without it
chmod 700 "$LAB_DIR"
STATE="$LAB_DIR/state.env"
cat > "$STATE" <<EOF
LAB_DIR=$LAB_DIR
SCOPE=$SCOPE
ETCD_CLIENT_PORT=$ETCD_CLIENT
ETCD_PEER_PORT=$ETCD_PEER
PG1_PORT=$PG1
PG2_PORT=$PG2
API1_PORT=$API1
API2_PORT=$API2
PATRONI1_CONF=$LAB_DIR/pg1.yml
PATRONI2_CONF=$LAB_DIR/pg2.yml
EOF

# On any failure from here on, tear down whatever was started.
trap 'rc=$?; if [ $rc -ne 0 ]; then log "failed (rc=$rc), logs kept in $LAB_DIR until teardown:"; tail -n 20 "$LAB_DIR"/*.log >&2 || true; KEEP_DIR=${KEEP_DIR:-0} "$HERE/down.sh" "$LAB_DIR" >&2 || true; fi' EXIT

# Start a daemon in its own session as postgres with a clean environment
# (PATRONI_* / ETCD_* env vars would silently override the config).
# setpriv (not runuser/su) because it exec()s: no root wrapper process stays behind.
# runuser forks and waits; when the daemon is SIGSTOPped it SIGSTOPs itself and stays
# stopped after the daemon is SIGCONTed. The daemon writes its own PID ($$ survives exec).
start_daemon() { # name pidfile logfile cmd...
  local name=$1 pidfile=$2 logfile=$3; shift 3
  setsid setpriv --reuid=postgres --regid=postgres --init-groups env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/var/lib/postgresql \
      LANG=C.UTF-8 LC_ALL=C.UTF-8 \
      bash -c 'echo $$ > "$0"; exec "$@"' "$pidfile" "$@" </dev/null >"$logfile" 2>&1 &
  local deadline=$((SECONDS + 10))
  until [ -s "$pidfile" ]; do
    [ $SECONDS -lt $deadline ] || die "$name did not start"; sleep 0.1
  done
  log "$name pid $(cat "$pidfile")"
}

mkdir -p "$LAB_DIR/etcd" "$LAB_DIR/run"
chown -R postgres:postgres "$LAB_DIR"

# --- etcd (single member, v3 API, loopback only). The start command goes to
# $LAB_DIR/etcd-start.sh so a fault test can restart etcd on the same ports/data dir.
cat > "$LAB_DIR/etcd-start.sh" <<EOS
#!/usr/bin/env bash
# (re)start this lab's etcd in the background as postgres; writes etcd.pid, prints the PID
set -eu
rm -f "$LAB_DIR/etcd.pid"
setsid setpriv --reuid=postgres --regid=postgres --init-groups env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/var/lib/postgresql \\
  bash -c 'echo \$\$ > "\$0"; exec "\$@"' "$LAB_DIR/etcd.pid" \\
  etcd --name lab --data-dir "$LAB_DIR/etcd/data" \\
    --listen-client-urls http://127.0.0.1:$ETCD_CLIENT --advertise-client-urls http://127.0.0.1:$ETCD_CLIENT \\
    --listen-peer-urls http://127.0.0.1:$ETCD_PEER --initial-advertise-peer-urls http://127.0.0.1:$ETCD_PEER \\
    --initial-cluster lab=http://127.0.0.1:$ETCD_PEER --initial-cluster-state new \\
    --initial-cluster-token lab-$ETCD_CLIENT --logger zap --log-outputs stderr \\
  </dev/null >>"$LAB_DIR/etcd.log" 2>&1 &
for _ in \$(seq 100); do [ -s "$LAB_DIR/etcd.pid" ] && break; sleep 0.1; done
cat "$LAB_DIR/etcd.pid"
EOS
chmod 755 "$LAB_DIR/etcd-start.sh"
log "starting etcd client=$ETCD_CLIENT peer=$ETCD_PEER"
"$LAB_DIR/etcd-start.sh" >/dev/null
[ -s "$LAB_DIR/etcd.pid" ] || die "etcd did not start"
ETCD_PID=$(cat "$LAB_DIR/etcd.pid"); echo "ETCD_PID=$ETCD_PID" >> "$STATE"

deadline=$((SECONDS + 30))
until ETCDCTL_API=3 etcdctl --endpoints="http://127.0.0.1:$ETCD_CLIENT" --command-timeout=1s endpoint health >/dev/null 2>&1; do
  kill -0 "$ETCD_PID" 2>/dev/null || die "etcd exited"
  [ $SECONDS -lt $deadline ] || die "etcd not healthy after 30s"; sleep 0.2
done
log "etcd pid $ETCD_PID healthy"

# --- Patroni configs
write_conf() { # n pgport apiport
  local n=$1 pgport=$2 apiport=$3
  cat > "$LAB_DIR/pg$n.yml" <<EOF
scope: $SCOPE
name: pg$n
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$apiport
  connect_address: 127.0.0.1:$apiport
etcd3:
  hosts: 127.0.0.1:$ETCD_CLIENT
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 2
    retry_timeout: 5
    maximum_lag_on_failover: 1048576
    primary_start_timeout: 0
    synchronous_mode: $SYNC_MODE
    failsafe_mode: $FAILSAFE_MODE
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        max_connections: 100
        shared_buffers: 32MB
        wal_keep_size: 128MB
  initdb:
  - encoding: UTF8
  - locale: C.UTF-8
  - data-checksums
postgresql:
  listen: 127.0.0.1:$pgport
  connect_address: 127.0.0.1:$pgport
  data_dir: $LAB_DIR/pg$n
  bin_dir: $PG_BIN
  pgpass: $LAB_DIR/run/pgpass$n
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: $LAB_DIR/run
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
watchdog:
  mode: off
EOF
  chown postgres:postgres "$LAB_DIR/pg$n.yml"
}
write_conf 1 "$PG1" "$API1"
write_conf 2 "$PG2" "$API2"

# --- Patroni x2: either node may win the initialize race (both were seen); the other clones it
start_daemon patroni1 "$LAB_DIR/patroni1.pid" "$LAB_DIR/patroni1.log" patroni "$LAB_DIR/pg1.yml"
start_daemon patroni2 "$LAB_DIR/patroni2.pid" "$LAB_DIR/patroni2.log" patroni "$LAB_DIR/pg2.yml"
P1_PID=$(cat "$LAB_DIR/patroni1.pid"); P2_PID=$(cat "$LAB_DIR/patroni2.pid")
echo "PATRONI1_PID=$P1_PID" >> "$STATE"; echo "PATRONI2_PID=$P2_PID" >> "$STATE"

# --- wait: one leader (REST GET /leader == 200) and a streaming replica (pg_stat_replication on leader)
t0=$SECONDS; deadline=$((SECONDS + UP_TIMEOUT)); LEADER=""
while :; do
  for p in "$P1_PID" "$P2_PID"; do kill -0 "$p" 2>/dev/null || die "patroni pid $p exited"; done
  LEADER=""; LPORT=""; RPORT=""
  if curl -fsS -o /dev/null "http://127.0.0.1:$API1/leader" 2>/dev/null; then LEADER=pg1; LPORT=$PG1; REPLICA=pg2; RPORT=$PG2
  elif curl -fsS -o /dev/null "http://127.0.0.1:$API2/leader" 2>/dev/null; then LEADER=pg2; LPORT=$PG2; REPLICA=pg1; RPORT=$PG1; fi
  if [ -n "$LEADER" ]; then
    # leader sees the replica's walsender streaming (pg_basebackup's stream alone also shows up
    # here, so also require a running standby with a streaming walreceiver on the replica side)
    a=$(psql -XAtq -h 127.0.0.1 -p "$LPORT" -U postgres -d postgres -c \
        "select count(*) from pg_stat_replication where state='streaming' and application_name='$REPLICA'" 2>/dev/null || true)
    b=$(psql -XAtq -h 127.0.0.1 -p "$RPORT" -U postgres -d postgres -c \
        "select pg_is_in_recovery() and exists(select 1 from pg_stat_wal_receiver where status='streaming')" 2>/dev/null || true)
    # ...and Patroni itself must see both members 'running' (else switchover refuses the candidate)
    # (with SYNC_MODE=true the replica must also have been made sync_standby)
    c=$(curl -fsS "http://127.0.0.1:$API1/cluster" 2>/dev/null | SYNC_MODE=$SYNC_MODE python3 -c '
import json, os, sys
m = json.load(sys.stdin)["members"]
roles = sorted(x["role"] for x in m)
want = ["leader", "sync_standby"] if os.environ["SYNC_MODE"].lower() in ("true", "on", "1", "yes") else ["leader", "replica"]
print(int(len(m) == 2 and all(x.get("state") == "running" for x in m) and roles == want))' 2>/dev/null || true)
    [ "$a" = 1 ] && [ "$b" = t ] && [ "$c" = 1 ] && break
  fi
  [ $SECONDS -lt $deadline ] || die "cluster not healthy after ${UP_TIMEOUT}s"
  sleep 0.5
done
log "cluster healthy after $((SECONDS - t0))s (leader=$LEADER, replica=$REPLICA streaming)"
patronictl -c "$LAB_DIR/pg1.yml" list >&2 || true

URL="postgres://postgres@127.0.0.1:$PG1,127.0.0.1:$PG2/postgres?target_session_attrs=read-write"
echo "PG_URL='$URL'" >> "$STATE"
trap - EXIT
cat "$STATE"
echo "LEADER=$LEADER"
