#!/usr/bin/env bash
# Tear down a cluster made by up.sh:  ./down.sh LAB_DIR   (or LAB_DIR=... ./down.sh)
# Stops exactly the recorded PIDs (patroni first -> it stops its postgres; then any
# surviving postmaster; then etcd), verifying each PID still belongs to LAB_DIR
# (guards against PID reuse), then removes LAB_DIR (KEEP_DIR=1 keeps it).
set -uo pipefail
LAB_DIR=${1:-${LAB_DIR:-}}
log() { echo "[down $(date +%T)] $*" >&2; }
[ -n "$LAB_DIR" ] && [ -f "$LAB_DIR/.patroni-lab" ] || { log "not a patroni-lab dir: '$LAB_DIR'"; exit 1; }
ETCD_PID= PATRONI1_PID= PATRONI2_PID=
# shellcheck disable=SC1091
[ -f "$LAB_DIR/state.env" ] && . "$LAB_DIR/state.env"
# the pid files are authoritative (etcd-start.sh rewrites etcd.pid when etcd is restarted)
[ -s "$LAB_DIR/etcd.pid" ] && ETCD_PID=$(cat "$LAB_DIR/etcd.pid")
[ -s "$LAB_DIR/patroni1.pid" ] && PATRONI1_PID=$(cat "$LAB_DIR/patroni1.pid")
[ -s "$LAB_DIR/patroni2.pid" ] && PATRONI2_PID=$(cat "$LAB_DIR/patroni2.pid")

# true if pid is alive (not a zombie) and its command line mentions LAB_DIR
ours() {
  local pid=$1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline" | grep -qF -- "$LAB_DIR"
}
# wait until none of the given pids is ours, up to $1 seconds
wait_gone() {
  local t=$1; shift; local deadline=$((SECONDS + t)) p alive
  while :; do
    alive=""; for p in "$@"; do ours "$p" && alive="$alive $p"; done
    [ -z "$alive" ] && return 0
    [ $SECONDS -lt $deadline ] || { echo "$alive"; return 1; }
    sleep 0.2
  done
}
# signal pids (only if ours); SIGCONT too, so a SIGSTOPped process can act on it
sig() { local s=$1 p; shift; for p in "$@"; do ours "$p" && { kill -s "$s" "$p"; kill -CONT "$p"; } 2>/dev/null; done; return 0; }
postmasters() { local f; for f in "$LAB_DIR"/pg*/postmaster.pid; do [ -f "$f" ] && head -n1 "$f"; done; }

PM=$(postmasters | tr '\n' ' ')
# remember postmaster children as pid:starttime so orphans can be identified exactly later
starttime() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null; }
PM_CHILDREN=""; for p in $PM; do ours "$p" || continue
  for c in $(ps -o pid= --ppid "$p"); do PM_CHILDREN="$PM_CHILDREN $c:$(starttime "$c")"; done; done

# 1. patroni (SIGTERM = graceful: stops postgres, releases leader key)
log "stopping patroni: $PATRONI1_PID $PATRONI2_PID"
sig CONT $PM                      # a SIGSTOPped postmaster would block patroni's shutdown
sig TERM "$PATRONI1_PID" "$PATRONI2_PID"
if left=$(wait_gone 60 "$PATRONI1_PID" "$PATRONI2_PID"); then :; else
  log "patroni still alive after 60s:$left -> SIGKILL"; sig KILL $left; wait_gone 5 $left >/dev/null; fi

# 2. postmasters that survived (e.g. patroni was SIGKILLed): fast, then immediate, then KILL
for p in $PM; do ours "$p" || continue
  log "postmaster $p still running -> SIGINT"; sig INT "$p"
  wait_gone 20 "$p" >/dev/null || { sig QUIT "$p"; wait_gone 10 "$p" >/dev/null || sig KILL "$p"; }
done
# orphaned postgres children of those postmasters (they normally exit on postmaster death)
for pc in $PM_CHILDREN; do c=${pc%%:*}
  for _ in 1 2 3 4 5 6 7 8 9 10; do [ "$(starttime "$c")" = "${pc#*:}" ] || break; sleep 0.5; done
  [ "$(starttime "$c")" = "${pc#*:}" ] && { log "killing orphan postgres $c"; kill -KILL "$c" 2>/dev/null; }
done

# 3. etcd
log "stopping etcd: $ETCD_PID"
sig TERM "$ETCD_PID"
wait_gone 15 "$ETCD_PID" >/dev/null || { log "etcd -> SIGKILL"; sig KILL "$ETCD_PID"; wait_gone 5 "$ETCD_PID" >/dev/null; }

# 4. safety net: any process of user postgres still naming LAB_DIR in its command line
stray=$(pgrep -u postgres -f -- "$LAB_DIR" | tr '\n' ' ')
if [ -n "$stray" ]; then log "stray processes: $stray-> SIGKILL"; sig KILL $stray; sleep 0.5; fi

# 5. ports should now be free
for port in ${ETCD_CLIENT_PORT:-} ${ETCD_PEER_PORT:-} ${PG1_PORT:-} ${PG2_PORT:-} ${API1_PORT:-} ${API2_PORT:-}; do
  ss -Hltn "sport = :$port" | grep -q . && log "WARNING: port $port still listening"
done

if [ "${KEEP_DIR:-0}" = 1 ]; then log "kept $LAB_DIR"; else rm -rf -- "$LAB_DIR"; log "removed $LAB_DIR"; fi
