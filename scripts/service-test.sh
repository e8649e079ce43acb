#!/usr/bin/env bash
# The shipped unit in a booted systemd: a Debian 12 root made with mmdebstrap, booted with
# systemd-nspawn (cgroup v2, as on a current host), sqlcron installed as scripts/install.sh does.
#
# Checks, for the unit as shipped (User=sqlcron) and with systemd/run-as-users.conf (a root
# daemon running jobs as other users):
#   - `systemd-analyze security` scores at most 3.0 and 5.0;
#   - a job runs (as `nobody` under the root daemon), reaches the network, and `systemctl
#     reload` works on a Debian without procps (no /bin/kill);
#   - processes a run left behind (setsid, a forged SQLCRON_RUN_ID, a cleared environment) end
#     with the run, while another run is still going (each run has a control group of its own,
#     ended with cgroup.kill).
#
#   SQLCRON_BIN=target/debug/sqlcron scripts/service-test.sh
#
# The root is kept in target/service-root (made again when this script's package list
# changes); each run boots a fresh copy and removes it.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${SQLCRON_BIN:-target/debug/sqlcron}
PACKAGES=systemd,systemd-sysv,dbus,python3-minimal
fail() { echo "service-test.sh: FAIL: $*" >&2; exit 1; }
say() { echo "== $*"; }

need=()
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v systemd-nspawn >/dev/null || need+=(systemd-container)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
    echo "service-test.sh: installing ${need[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

cache=target/service-root
stamp="bookworm minbase $PACKAGES"
if [ "$(cat "$cache/.stamp" 2>/dev/null)" != "$stamp" ]; then
    say "making the Debian 12 root ($PACKAGES)"
    rm -rf "$cache"
    mmdebstrap --quiet --variant=minbase --include="$PACKAGES" bookworm "$cache.new" >/dev/null
    mv "$cache.new" "$cache"
    echo "$stamp" >"$cache/.stamp"
fi

work=$(mktemp -d /var/tmp/sqlcron-service-test.XXXXXX)
root="$work/root"
nspawn=
listener=
cleanup() {
    [ -n "$listener" ] && kill "$listener" 2>/dev/null || true
    if [ -n "$nspawn" ] && kill -0 "$nspawn" 2>/dev/null; then
        kill -TERM "$nspawn" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$nspawn" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
cp -a "$cache" "$root"

# Installed as scripts/install.sh does (its DESTDIR mode), plus the system user.
SQLCRON_BIN="$BIN" DESTDIR="$root" scripts/install.sh >/dev/null
install -D -m 0644 packaging/debian/sqlcron.sysusers "$root/usr/lib/sysusers.d/sqlcron.conf"
[ ! -e "$root/bin/kill" ] || fail "the root has /bin/kill: the reload check would prove nothing"
# What the escaping job uses to forge its id: the run id of the other job's run.
cat >"$root/usr/local/bin/forge-run-id" <<'FORGE'
#!/usr/bin/python3
import os
for p in filter(str.isdigit, os.listdir("/proc")):
    try:
        if open(f"/proc/{p}/cmdline", "rb").read() == b"sleep\x003004\x00":
            for e in open(f"/proc/{p}/environ", "rb").read().split(b"\0"):
                if e.startswith(b"SQLCRON_RUN_ID="):
                    print(e.split(b"=", 1)[1].decode())
                    raise SystemExit
    except OSError:
        pass
print("none-found")
FORGE
chmod 0755 "$root/usr/local/bin/forge-run-id"

# A listener on the host's loopback, which the container shares: what "the network" is here.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', $port)); s.listen(16)
while True:
    c, _ = s.accept(); c.sendall(b'hello from the network\n'); c.close()
" &
listener=$!

say "booting"
SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 systemd-nspawn --quiet --register=no --keep-unit --console=passive \
    -b -D "$root" >"$work/console.log" 2>&1 &
nspawn=$!
# The container's init: a descendant of systemd-nspawn that is PID 1 in its own namespace.
leader=
for _ in $(seq 150); do
    for p in $(cat "/proc/$nspawn/task/$nspawn/children" 2>/dev/null); do
        for q in "$p" $(cat "/proc/$p/task/$p/children" 2>/dev/null); do
            if [ "$(awk '/^NSpid:/ {print $3}' "/proc/$q/status" 2>/dev/null)" = 1 ]; then
                leader=$q
            fi
        done
    done
    [ -n "$leader" ] && break
    sleep 0.2
done
[ -n "$leader" ] || { cat "$work/console.log"; fail "the container did not start"; }
inside() { nsenter -t "$leader" -a "$@"; }
# Until the boot is over: early on, systemctl cannot reach systemd yet ("Failed to connect to
# bus"), then it says "starting".
state=
for _ in $(seq 600); do
    state=$(inside systemctl is-system-running 2>/dev/null || true)
    case "$state" in running | degraded) break ;; esac
    sleep 0.2
done
case "$state" in running | degraded) ;; *) cat "$work/console.log"; fail "boot: '$state' after 120 s" ;; esac
inside systemd-sysusers >/dev/null
# As the package's postinst and install.sh do.
inside chown root:sqlcron /etc/sqlcron/sqlcron.toml

# The newest run of JOB as JSON fields "outcome output", waiting up to 180 s for a finished one
# (the suite runs this beside its own tests, at the lowest priority: on two cores a run of the
# container's daemon once took longer than 60 s).
finished() {
    local job=$1 i out
    for i in $(seq 360); do
        out=$(inside sqlcron history "$job" --json 2>/dev/null | python3 -c '
import json, sys
runs = [r for r in json.load(sys.stdin) if r["outcome"] not in ("running",)]
if runs: print(runs[0]["outcome"], " ".join((runs[0].get("output") or "").split()))
' 2>/dev/null || true)
        [ -n "$out" ] && { echo "$out"; return 0; }
        sleep 0.5
    done
    return 1
}

score() {
    inside systemd-analyze security sqlcron.service 2>/dev/null \
        | sed -n 's/.*Overall exposure level for sqlcron.service: \([0-9.]*\).*/\1/p'
}

check_variant() {
    local variant=$1 limit=$2 user=$3
    say "$variant: score"
    local s
    s=$(score)
    [ -n "$s" ] || fail "$variant: no score"
    python3 -c "import sys; sys.exit(0 if float('$s') <= $limit else 1)" \
        || fail "$variant: systemd-analyze security scores $s, above $limit"
    echo "$variant: systemd-analyze security: $s (at most $limit)"

    say "$variant: a job runs as $user and reaches the network"
    # A fresh database: no run of the other variant is read as this one's.
    inside rm -f /var/lib/sqlcron/sqlcron.db /var/lib/sqlcron/sqlcron.db-wal /var/lib/sqlcron/sqlcron.db-shm
    inside systemctl restart sqlcron || { inside journalctl -u sqlcron --no-pager | tail -30; fail "$variant: the daemon did not start"; }
    inside sqlcron run whoami >/dev/null
    local got
    got=$(finished whoami) || fail "$variant: whoami never finished"
    [ "$got" = "ok $user hello from the network" ] || fail "$variant: whoami: '$got'"
    echo "$variant: whoami: $got"

    say "$variant: systemctl reload without /bin/kill"
    inside systemctl reload sqlcron || { inside journalctl -u sqlcron --no-pager | tail -20; fail "$variant: reload failed"; }
    inside systemctl is-active --quiet sqlcron || fail "$variant: not active after the reload"

    say "$variant: what a run leaves behind ends with it"
    inside sqlcron run other >/dev/null
    inside sqlcron run escape >/dev/null
    got=$(finished escape) || fail "$variant: escape never finished"
    case "$got" in timeout*) ;; *) fail "$variant: escape: '$got' (expected a timeout)" ;; esac
    local left=
    for _ in $(seq 50); do
        left=$(pgrep -af 'sleep 300[123]' || true)
        [ -z "$left" ] && break
        sleep 0.1
    done
    [ -z "$left" ] || fail "$variant: left behind after the run's end: $left"
    pgrep -f 'sleep 3004' >/dev/null || fail "$variant: the other run did not go on"
    echo "$variant: the escaped processes ended with their run; the other run goes on"
    inside systemctl stop sqlcron
    # A clean stop leaves nothing for systemd to kill (issue 51: the reaper was SIGKILLed at
    # every stop).
    if inside journalctl -u sqlcron --no-pager | grep -q 'with signal SIGKILL'; then
        inside journalctl -u sqlcron --no-pager | tail -20
        fail "$variant: systemd killed a process of the service at its stop"
    fi
}

jobs() {
    cat <<EOF
[[job]]
name = "whoami"
schedule = "0 0 1 1 *"
command = "id -un; python3 -c 'import socket; s = socket.create_connection((\"127.0.0.1\", $port)); print(s.recv(100).decode().strip())'"

[[job]]
name = "other"
schedule = "0 0 1 1 *"
command = "sleep 3004"

# Three ways out of a run: a new session, a new session with another run's id, and no
# environment at all. The run itself times out.
[[job]]
name = "escape"
schedule = "0 0 1 1 *"
timeout = "2s"
command = "setsid -f sleep 3001; SQLCRON_RUN_ID=\$(forge-run-id) setsid -f sleep 3002; env -i setsid -f /bin/sleep 3003; sleep 60"
EOF
}

jobs >"$root/etc/sqlcron/sqlcron.toml"
inside systemctl daemon-reload
check_variant "sqlcron.service (User=sqlcron)" 3.0 sqlcron

install -D -m 0644 systemd/run-as-users.conf "$root/etc/systemd/system/sqlcron.service.d/run-as-users.conf"
{
    printf '[daemon]\ndefault_user = "nobody"\n\n'
    jobs
} >"$root/etc/sqlcron/sqlcron.toml"
inside systemctl daemon-reload
check_variant "with run-as-users.conf (root daemon)" 5.0 nobody

echo "service-test.sh: all checks passed"
