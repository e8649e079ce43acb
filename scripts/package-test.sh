#!/usr/bin/env bash
# Tests the packages as an operator would (docs/packaging.md):
#   1. builds the .deb and .rpm (scripts/package.sh) and an older .deb (0.0.1-1) of the same binary;
#   2. lintian on the .deb: no errors (the remaining warnings are explained in docs/packaging.md);
#   3. a disposable Debian 12 root (mmdebstrap, cached under target/package-test/) in a temporary
#      directory, and in it: install the old package, edit the conffile, upgrade to the new one
#      (the edit kept), `sqlcron --version`, `check`, `migrate`, a job run by a short daemon,
#      `systemd-analyze verify` of the installed unit, remove (database kept), purge (user, state
#      and configuration gone);
#   4. the RPM: `rpm -qlp` and `rpm -qp --scripts`, then `rpm --root <tmp> -i --nodeps`;
#   5. a fresh copy of the root booted with systemd-nspawn: install (started), stop, upgrade
#      (stays stopped), start, upgrade (restarted: a new MainPID), reload, the manual's "Install as a
#      service" commands as written (as root, the sqlcron user and an operator in its group,
#      on a PostgreSQL database of the run's own), reload of a broken file (fails, the service
#      runs on) and of the repaired one, remove (stopped), purge.
# Exits non-zero with a message on the first failure; the chroot is unmounted and removed always.
#   SQLCRON_BIN=target/debug/sqlcron scripts/package-test.sh   # package a binary built already
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "package-test.sh: FAILED: $*" >&2; exit 1; }
step() { echo "== $*"; }

if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
missing=()
command -v lintian >/dev/null || missing+=(lintian)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
command -v rpm >/dev/null || missing+=(rpm)
command -v systemd-analyze >/dev/null || missing+=(systemd)
if [ ${#missing[@]} -gt 0 ]; then
    echo "package-test.sh: installing ${missing[*]}" >&2
    # An installation cut short earlier (a run stopped mid-way) leaves dpkg refusing every
    # other until it is finished.
    DEBIAN_FRONTEND=noninteractive $SUDO dpkg --configure -a
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

step "building the packages"
scripts/package.sh >/dev/null || fail "scripts/package.sh"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
deb=target/packages/sqlcron_${version}-1_amd64.deb
rpm_file=$(ls target/packages/sqlcron-"${version}"-1.*.rpm 2>/dev/null | head -n1)
[ -f "$deb" ] || fail "no $deb"
[ -n "$rpm_file" ] || fail "no RPM in target/packages"
old_deb=target/packages/sqlcron_0.0.1-1_amd64.deb
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s) \
    cargo deb --no-build --no-strip --deb-version 0.0.1-1 --output "$old_deb" >/dev/null \
    || fail "building the older package"

step "lintian"
lintian_out=$(lintian --no-tag-display-limit "$deb" 2>&1 || true)
echo "$lintian_out"
if grep -q '^E:' <<<"$lintian_out"; then fail "lintian reports errors"; fi

step "the RPM's files and scriptlets"
files=$(rpm -qlp "$rpm_file")
for f in /usr/bin/sqlcron /usr/lib/systemd/system/sqlcron.service /etc/sqlcron/sqlcron.toml \
    /usr/lib/sysusers.d/sqlcron.conf /usr/lib/tmpfiles.d/sqlcron.conf \
    /usr/share/man/man8/sqlcron.8.gz /usr/share/man/man8/sqlcron-daemon.8.gz \
    /usr/share/man/man1/sqlcron-status.1.gz /usr/share/man/man5/sqlcron.toml.5.gz \
    /usr/share/bash-completion/completions/sqlcron \
    /usr/share/sqlcron/run-as-users.conf; do
    grep -qx "$f" <<<"$files" || fail "the RPM lacks $f"
done
scripts=$(rpm -qp --scripts "$rpm_file")
for s in preinstall postinstall preuninstall postuninstall; do
    grep -q "^$s scriptlet" <<<"$scripts" || fail "the RPM lacks its $s scriptlet"
done
rpm -qp --qf '[%{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILEFLAGS:fflags} %{FILENAMES}\n]' \
    "$rpm_file" | grep -q '^-rw-r----- root:sqlcron c.*n.* /etc/sqlcron/sqlcron.toml$' \
    || fail "the RPM's sqlcron.toml is not a 0640 root:sqlcron noreplace config file"

work=$(mktemp -d /tmp/sqlcron-package-test.XXXXXX)
root=$work/root
cleanup() {
    for m in "$root/proc" "$root/dev/pts" "$root/dev"; do
        mountpoint -q "$m" 2>/dev/null && $SUDO umount -l "$m"
    done
    $SUDO rm -rf "$work"
}
trap cleanup EXIT

step "the RPM installed into a temporary root (rpm --root, no scriptlets' dependencies)"
mkdir -p "$work/rpmroot"
rpm --root "$work/rpmroot" --dbpath /var/lib/rpm -i --nodeps --noscripts "$rpm_file" \
    || fail "rpm --root -i"
[ -x "$work/rpmroot/usr/bin/sqlcron" ] || fail "rpm --root: no /usr/bin/sqlcron"
"$work/rpmroot/usr/bin/sqlcron" --version | grep -q "commit" || fail "the RPM's sqlcron --version"

# The Debian root: mmdebstrap from the machine's Debian mirror, cached (delete the tarball to
# refresh it). systemd is in it as on any Debian server (it provides systemd-sysusers).
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
mirror=${mirror:-http://deb.debian.org/debian}
# sudo: README's commands are written with it; dbus: an ordinary user's `systemctl status`
# talks to systemd through it (a Recommends of systemd, which mmdebstrap leaves out). The cache
# is named by its package list.
include=systemd,ca-certificates,sudo,dbus
tarball=target/package-test/bookworm-$(echo "$include" | md5sum | cut -c1-8).tar
if [ ! -s "$tarball" ]; then
    step "making the Debian 12 root ($mirror)"
    mkdir -p target/package-test
    $SUDO mmdebstrap --quiet --format=tar --variant=apt --include="$include" bookworm \
        "$tarball.part" "deb $mirror bookworm main" || fail "mmdebstrap"
    mv "$tarball.part" "$tarball"
fi
mkdir -p "$root"
$SUDO tar -C "$root" -xf "$tarball"
$SUDO mount -t proc proc "$root/proc"
$SUDO mount --bind /dev "$root/dev"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$deb" "$old_deb" "$root/tmp/"
in_root() { $SUDO chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    DEBIAN_FRONTEND=noninteractive "$@"; }
as_sqlcron() { in_root runuser -u sqlcron -- env STATE_DIRECTORY=/var/lib/sqlcron "$@"; }

# File owners are read inside the root: its sqlcron user and group have ids the host may give
# to other names.
step "install the older package"
in_root apt-get install -y -qq "/tmp/$(basename "$old_deb")" >"$work/apt.log" 2>&1 \
    || { cat "$work/apt.log"; fail "apt install of the older package"; }
in_root getent passwd sqlcron >/dev/null || fail "no sqlcron user after install"
[ "$(in_root stat -c '%a %U:%G' /etc/sqlcron/sqlcron.toml)" = "640 root:sqlcron" ] \
    || fail "sqlcron.toml is $(in_root stat -c '%a %U:%G' /etc/sqlcron/sqlcron.toml), not 640 root:sqlcron"
[ "$(in_root stat -c '%a %U' /var/lib/sqlcron)" = "750 sqlcron" ] \
    || fail "/var/lib/sqlcron is $(in_root stat -c '%a %U' /var/lib/sqlcron), not 750 sqlcron"
[ -L "$root/etc/systemd/system/multi-user.target.wants/sqlcron.service" ] \
    || fail "the unit is not enabled after install"

step "edit the conffile, upgrade"
cat >>"$root/etc/sqlcron/sqlcron.toml" <<'TOML'

# operator's edit
[[job]]
name = "hello"
schedule = "0 0 1 1 *"
command = "echo hello from the package"
TOML
in_root apt-get install -y -qq "/tmp/$(basename "$deb")" >"$work/apt.log" 2>&1 \
    || { cat "$work/apt.log"; fail "apt install (upgrade) of the new package"; }
in_root dpkg-query -W -f '${Version}' sqlcron | grep -qx "${version}-1" || fail "upgrade: not ${version}-1"
grep -q "operator's edit" "$root/etc/sqlcron/sqlcron.toml" || fail "upgrade lost the edited conffile"
[ "$(in_root stat -c '%a %U:%G' /etc/sqlcron/sqlcron.toml)" = "640 root:sqlcron" ] \
    || fail "sqlcron.toml mode after upgrade: $(in_root stat -c '%a %U:%G' /etc/sqlcron/sqlcron.toml)"

step "the conffile's own advice, as written (as root)"
# Each command its comments show, taken from the file itself, so that the test runs what an
# operator reads: the password file the service can read, the check as the service reads the
# file, then (no systemd in the chroot) the reload is left to the booted test below.
advice_install=$(sed -n 's/^#   \(install -m 0640 .*database-password\)$/\1/p' "$root/etc/sqlcron/sqlcron.toml")
advice_check=$(sed -n 's/^#   \(runuser -u sqlcron -- sqlcron check\) && systemctl reload sqlcron$/\1/p' "$root/etc/sqlcron/sqlcron.toml")
[ -n "$advice_install" ] && [ -n "$advice_check" ] || fail "the conffile's advice is not where the test reads it"
in_root sh -c "$advice_install" || fail "conffile advice: $advice_install"
echo 'not-a-real-password' >"$root/etc/sqlcron/database-password"
in_root runuser -u sqlcron -- test -r /etc/sqlcron/database-password \
    || fail "the service's user cannot read the password file made as the conffile says"
! in_root runuser -u nobody -- test -r /etc/sqlcron/database-password \
    || fail "others can read the password file made as the conffile says"
rm "$root/etc/sqlcron/database-password"
in_root sh -c "$advice_check" || fail "conffile advice: $advice_check"

step "sqlcron --version, check, migrate, a job run"
in_root sqlcron --version | tee "$work/version"
grep -q "^sqlcron ${version} (commit " "$work/version" || fail "sqlcron --version"
as_sqlcron sqlcron check || fail "sqlcron check"
as_sqlcron sqlcron migrate || fail "sqlcron migrate"
[ -f "$root/var/lib/sqlcron/sqlcron.db" ] || fail "no database in /var/lib/sqlcron"
as_sqlcron sh -c 'echo $$ >/tmp/sqlcron-daemon.pid; exec sqlcron daemon' >"$work/daemon.log" 2>&1 &
daemon=$!
ran=
deadline=$((SECONDS + 60))
while [ $SECONDS -lt $deadline ]; do
    if as_sqlcron sqlcron run hello >/dev/null 2>&1; then break; fi
    sleep 0.5
done
while [ $SECONDS -lt $deadline ]; do
    if as_sqlcron sqlcron history hello 2>/dev/null | grep -qw ok; then ran=1; break; fi
    sleep 0.5
done
# The daemon's own pid (the chroot shares the host's pid namespace): SIGTERM, then wait.
if [ -s "$root/tmp/sqlcron-daemon.pid" ]; then
    $SUDO kill -TERM "$(cat "$root/tmp/sqlcron-daemon.pid")" 2>/dev/null || true
fi
wait "$daemon" 2>/dev/null || true
[ -n "$ran" ] || { cat "$work/daemon.log"; fail "the job hello did not run ok under the packaged daemon"; }
as_sqlcron sqlcron history hello

step "systemd-analyze verify of the installed unit"
# Its Documentation= names the man page: checked here as a file, not by the host's `man`.
for page in man8/sqlcron.8.gz man5/sqlcron.toml.5.gz man1/sqlcron-status.1.gz man1/sqlcron-import-crontab.1.gz; do
    [ -f "$root/usr/share/man/$page" ] || fail "no man page $page installed"
done
systemd-analyze verify --man=no --root="$root" /usr/lib/systemd/system/sqlcron.service 2>&1 | tee "$work/verify" \
    || fail "systemd-analyze verify"
if grep -v -e 'Failed to .* environment' -e '^$' "$work/verify" | grep -qi 'sqlcron.service'; then
    fail "systemd-analyze verify reports problems with the unit"
fi

step "remove: the database, configuration and user stay"
in_root apt-get remove -y -qq sqlcron >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt remove"; }
[ ! -e "$root/usr/bin/sqlcron" ] || fail "remove left /usr/bin/sqlcron"
[ -f "$root/var/lib/sqlcron/sqlcron.db" ] || fail "remove deleted the database"
[ -f "$root/etc/sqlcron/sqlcron.toml" ] || fail "remove deleted the configuration"
in_root getent passwd sqlcron >/dev/null || fail "remove deleted the user"

step "purge: user, state and configuration gone"
in_root apt-get purge -y -qq sqlcron >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt purge"; }
[ ! -e "$root/var/lib/sqlcron" ] || fail "purge left /var/lib/sqlcron"
[ ! -e "$root/etc/sqlcron" ] || fail "purge left /etc/sqlcron"
! in_root getent passwd sqlcron >/dev/null || fail "purge left the sqlcron user"
! in_root getent group sqlcron >/dev/null || fail "purge left the sqlcron group"
[ ! -e "$root/etc/systemd/system/multi-user.target.wants/sqlcron.service" ] || fail "purge left the unit enabled"

step "the RPM's scriptlets in the same root (rpm --root: %pre's user, erase leaves no directory)"
rpm --root "$root" --dbpath /var/lib/rpm -i --nodeps "$rpm_file" >"$work/rpm.log" 2>&1 \
    || { cat "$work/rpm.log"; fail "rpm --root -i with its scriptlets"; }
in_root getent passwd sqlcron >/dev/null || fail "the RPM's %pre made no sqlcron user"
[ "$(in_root stat -c '%a %U:%G' /etc/sqlcron/sqlcron.toml)" = "640 root:sqlcron" ] \
    || fail "the RPM's sqlcron.toml is $(in_root stat -c '%a %U:%G' /etc/sqlcron/sqlcron.toml)"
[ -f "$root/usr/share/doc/sqlcron/README.md" ] || fail "the RPM ships no README"
rpm -qp --requires "$rpm_file" >"$work/requires"
for r in systemd /usr/sbin/useradd /usr/sbin/groupadd; do
    grep -q "^$r" "$work/requires" || fail "the RPM does not require $r: $(cat "$work/requires")"
done
rpm --root "$root" --dbpath /var/lib/rpm -e sqlcron >"$work/rpm.log" 2>&1 \
    || { cat "$work/rpm.log"; fail "rpm --root -e"; }
for d in /etc/sqlcron /usr/share/doc/sqlcron /usr/share/licenses/sqlcron /usr/share/sqlcron; do
    [ ! -e "$root$d" ] || fail "rpm -e left $d behind: $(ls -A "$root$d")"
done

# The same packages under a booted systemd (what a chroot cannot show: the maintainer scripts'
# start, restart and stop of the unit): the root booted with systemd-nspawn, commands run in
# it through its init's namespaces.
step "under a booted systemd: install starts, an upgrade keeps a stopped node stopped and restarts a running one, remove stops"
command -v systemd-nspawn >/dev/null || {
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq systemd-container >/dev/null
}
broot=$work/booted
mkdir -p "$broot"
$SUDO tar -C "$broot" -xf "$tarball"
cp /etc/resolv.conf "$broot/etc/resolv.conf"
# Not /tmp: the booted system mounts a tmpfs over it.
cp "$deb" "$old_deb" "$broot/root/"
SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 $SUDO systemd-nspawn --quiet --register=no --keep-unit \
    --console=passive -b -D "$broot" >"$work/console.log" 2>&1 &
nspawn=$!
stop_boot() {
    if kill -0 "$nspawn" 2>/dev/null; then
        $SUDO kill -TERM "$nspawn" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.2; done
        $SUDO kill -KILL "$nspawn" 2>/dev/null || true
    fi
}
trap 'stop_boot; cleanup' EXIT
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
[ -n "$leader" ] || { cat "$work/console.log"; fail "the booted root did not start"; }
inside() { $SUDO nsenter -t "$leader" -a /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    DEBIAN_FRONTEND=noninteractive "$@"; }
state=
for _ in $(seq 600); do
    state=$(inside systemctl is-system-running 2>/dev/null || true)
    case "$state" in running | degraded) break ;; esac
    sleep 0.2
done
case "$state" in running | degraded) ;; *) cat "$work/console.log"; fail "boot: '$state' after 120 s" ;; esac
active() { inside systemctl is-active sqlcron.service 2>/dev/null || true; }
# Waits up to 30 s for the unit's state to become $1.
until_state() {
    local want=$1 i
    for i in $(seq 150); do [ "$(active)" = "$want" ] && return 0; sleep 0.2; done
    inside journalctl -u sqlcron --no-pager | tail -20
    fail "sqlcron.service is '$(active)', not '$want' ($2)"
}
inside apt-get install -y -qq "/root/$(basename "$old_deb")" >"$work/apt.log" 2>&1 \
    || { cat "$work/apt.log"; fail "booted: apt install of the older package"; }
until_state active "started by a first install"
inside systemctl stop sqlcron.service
inside apt-get install -y -qq "/root/$(basename "$deb")" >"$work/apt.log" 2>&1 \
    || { cat "$work/apt.log"; fail "booted: apt install (upgrade) of the new package"; }
[ "$(active)" = inactive ] || fail "an upgrade started the service its operator had stopped ($(active))"
inside systemctl start sqlcron.service
until_state active "started by its operator"
before=$(inside systemctl show -p MainPID --value sqlcron.service)
inside apt-get install -y -qq --reinstall "/root/$(basename "$deb")" >"$work/apt.log" 2>&1 \
    || { cat "$work/apt.log"; fail "booted: apt reinstall (an upgrade's scripts) of the new package"; }
until_state active "restarted after an upgrade"
after=$(inside systemctl show -p MainPID --value sqlcron.service)
[ "$before" != "$after" ] || fail "an upgrade did not restart the running service (MainPID $before)"
inside systemctl reload sqlcron.service || fail "systemctl reload under a booted systemd"
until_state active "after a reload"

step "the manual's 'Install as a service' (docs/src/how-to/install.md), as written, under a booted systemd (root, sqlcron, an operator)"
# The edit README shows (its [database] url and [node] name into the installed file's tables,
# its [[job]] appended), the one change being the database: this machine's PostgreSQL (the
# booted root shares the host's network), a database of this run's own.
readme_block() { # the first block of kind $1 after the line matching $2
    awk -v kind="$1" -v after="$2" '
        index($0, after) { found = 1 }
        found && !inside && $0 == "```" kind { inside = 1; next }
        inside && $0 == "```" { exit }
        inside { print }' docs/src/how-to/install.md
}
pgdb=sqlcron_pkgtest_$$
psql -q -h 127.0.0.1 -U postgres -d postgres -c "CREATE DATABASE $pgdb" \
    || fail "cannot create a PostgreSQL database for the booted test (scripts/ensure-databases.sh)"
trap 'stop_boot; psql -q -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS $pgdb WITH (FORCE)" >/dev/null 2>&1; cleanup' EXIT
readme_toml=$(readme_block toml "For a cluster, set the shared database" \
    | sed "s#postgres://sqlcron@db.internal/sqlcron?sslmode=verify-full#postgres://postgres@127.0.0.1:5432/$pgdb#")
grep -q "127.0.0.1:5432/$pgdb" <<<"$readme_toml" || fail "README's cluster TOML has another database URL now"
python3 - "$broot/etc/sqlcron/sqlcron.toml" "$readme_toml" <<'PY' || fail "applying README's edit"
import re, sys
path, edit = sys.argv[1], sys.argv[2]
text = open(path).read()
table, extra = None, []
for line in edit.splitlines():
    m = re.match(r"^\[([a-z]+)\]$", line.strip())
    if m:
        table = m.group(1)
        continue
    if line.startswith("[[") or table is None or extra:
        extra.append(line)
        continue
    if line.strip():
        header = "[" + table + "]\n"
        assert header in text, header
        text = text.replace(header, header + line + "\n", 1)
open(path, "w").write(text + "\n" + "\n".join(extra) + "\n")
PY
readme_sh=$(readme_block sh "For a cluster, set the shared database")
[ -n "$readme_sh" ] || fail "no sh block after README's cluster TOML"
inside useradd --create-home --shell /bin/bash alice
inside adduser --quiet alice sqlcron
# Each line as README writes it, a line's comment being README's and not the command's: the
# `sudo` lines as root (an admin's), the others as root and as alice, an operator in the sqlcron
# group.
# The status line is the daemon's own (sd_notify), written a moment after the restart: that
# line is asked again for up to 15 s.
readme_run() { # WHO CMD: runs CMD as README writes it, prints it, checks what README says of it
    local who=$1 cmd=$2 out i
    for i in $(seq 30); do
        # stdin from /dev/null: the README lines are read from this loop's.
        if [ "$who" = root ]; then
            out=$(inside sh -c "$cmd" 2>&1 </dev/null) || fail "README, as root: '$cmd' failed: $out"
        else
            out=$(inside runuser -l "$who" -c "$cmd" 2>&1 </dev/null) \
                || fail "README, as $who (an operator in the sqlcron group): '$cmd' failed: $out"
        fi
        [ "$cmd" = "systemctl status sqlcron" ] && ! grep -q "next: nightly-backup in" <<<"$out" \
            && { sleep 0.5; continue; }
        break
    done
    echo "$who\$ $cmd"; sed 's/^/    /' <<<"$out" | head -12
    case "$cmd" in
        "systemctl status sqlcron")
            grep -q "next: nightly-backup in" <<<"$out" || fail "README's status line: $out" ;;
        "sqlcron status")
            grep -q "nightly-backup" <<<"$out" || fail "sqlcron status shows no nightly-backup: $out"
            if grep -qi "no live node" <<<"$out"; then
                fail "sqlcron status: no live node after README's steps: $out"
            fi ;;
    esac
}
while IFS= read -r line; do
    cmd=${line%%#*}
    cmd=$(sed 's/[[:space:]]*$//' <<<"$cmd")
    [ -n "$cmd" ] || continue
    readme_run root "$cmd"
    case "$cmd" in sudo*) ;; *) readme_run alice "$cmd" ;; esac
done <<<"$readme_sh"
# The service runs on README's database now: its node is alive there.
psql -h 127.0.0.1 -U postgres -d "$pgdb" -tAc "SELECT count(*) FROM cron_nodes WHERE stopped IS NULL" \
    | grep -qx 1 || fail "after README's steps the service is not a live node on its database"

step "reload under a booted systemd: a broken file fails the reload, the old configuration runs on"
pid_before=$(inside systemctl show -p MainPID --value sqlcron.service)
cp "$broot/etc/sqlcron/sqlcron.toml" "$work/good.toml"
printf '\n[[job]]\nname = "broken"\nschedule = "every now and then"\ncommand = "true"\n' \
    >>"$broot/etc/sqlcron/sqlcron.toml"
if inside systemctl reload sqlcron 2>"$work/reload.err"; then
    fail "systemctl reload of a broken file succeeded"
fi
[ "$(active)" = active ] || fail "a failed reload left the service '$(active)'"
[ "$(inside systemctl show -p MainPID --value sqlcron.service)" = "$pid_before" ] \
    || fail "a failed reload restarted the service"
inside systemctl status sqlcron --no-pager -n 20 >"$work/status.txt" 2>&1 || true
grep -q "broken" "$work/status.txt" \
    || { cat "$work/status.txt"; fail "systemctl status does not show the broken file's error"; }
cp "$work/good.toml" "$broot/etc/sqlcron/sqlcron.toml"
inside systemctl reload sqlcron || fail "systemctl reload of the repaired file"
# `systemctl reload` returns once the file is checked and the signal sent; the daemon reports
# RELOADING=1 ... READY=1 around applying it, so the unit may be `reloading` for a moment after
# (docs/service.md). It must come back to `active`, not fail.
until_state active "after the repaired reload"
inside apt-get remove -y -qq sqlcron >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "booted: apt remove"; }
[ "$(active)" != active ] || fail "remove left the service running"
inside apt-get purge -y -qq sqlcron >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "booted: apt purge"; }
stop_boot

echo "package-test.sh: all package checks passed"
