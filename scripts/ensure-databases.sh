#!/usr/bin/env bash
# Makes sure PostgreSQL (127.0.0.1:5432, trust auth for user postgres) and MariaDB/MySQL
# (127.0.0.1:3306, root with an empty password) answer, installing and starting them from
# Debian's packages when they are missing. Safe to run repeatedly.
set -euo pipefail

log() { echo "ensure-databases: $*" >&2; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_updated=
apt_install() {
    if [ -z "$apt_updated" ]; then
        as_root apt-get update -qq
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

wait_for() { # NAME COMMAND...
    local name=$1; shift
    for _ in $(seq 1 60); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    log "$name did not come up"
    return 1
}

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 && psql -h 127.0.0.1 -U postgres -d postgres -tAc 'select 1' >/dev/null; }
my_up() { mysqladmin --protocol=tcp -h 127.0.0.1 -P 3306 -uroot ping >/dev/null 2>&1; }

if ! command -v pg_isready >/dev/null || ! pg_up 2>/dev/null; then
    if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
        log "installing PostgreSQL"
        apt_install postgresql postgresql-client
    fi
    log "starting PostgreSQL"
    for version in $(ls /etc/postgresql); do
        as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
    done
    wait_for PostgreSQL pg_isready -q -h 127.0.0.1 -p 5432
    if ! pg_up; then
        # A fresh Debian cluster asks for passwords over TCP: trust loopback, as the tests expect.
        hba=$(ls /etc/postgresql/*/main/pg_hba.conf | head -n1)
        log "enabling trust authentication on loopback in $hba"
        as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
        for version in $(ls /etc/postgresql); do
            as_root pg_ctlcluster --skip-systemctl-redirect "$version" main reload || true
        done
        wait_for PostgreSQL pg_up
    fi
fi

if ! command -v mysqladmin >/dev/null || ! my_up; then
    if ! command -v mariadbd >/dev/null && ! [ -x /usr/sbin/mariadbd ]; then
        log "installing MariaDB"
        apt_install mariadb-server mariadb-client
    fi
    log "starting MariaDB"
    as_root mkdir -p /run/mysqld
    as_root chown mysql:mysql /run/mysqld 2>/dev/null || true
    as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql --bind-address=127.0.0.1
    wait_for MariaDB my_up
fi

log "PostgreSQL and MariaDB are up"
