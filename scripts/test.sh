#!/usr/bin/env bash
# Runs the whole sqlcron test suite: formatting, lints, unit and integration tests, against real
# SQLite, PostgreSQL and MariaDB servers. Starts (or installs) the database servers if they are not
# running on 127.0.0.1; under CI (CI=true) an unreachable server is a failure, never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/ensure-databases.sh

# The unit file test runs `systemd-analyze verify`. The service test (scripts/service-test.sh,
# beside the database tests) boots a Debian 12 root made with mmdebstrap in systemd-nspawn and
# runs the shipped unit there (it installs mmdebstrap and systemd-container if missing).
if ! command -v systemd-analyze >/dev/null; then
    echo "test.sh: installing systemd (for systemd-analyze)" >&2
    if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq systemd >/dev/null
fi

# The database topology tests start PgBouncer in front of a throwaway server of their own, and
# a three-node MariaDB Galera cluster (galera-4, rsync state transfers).
missing=()
[ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null || missing+=(pgbouncer)
[ -e /usr/lib/galera/libgalera_smm.so ] || missing+=(galera-4)
command -v rsync >/dev/null || missing+=(rsync)
# The distribution's own SQLite command edits a live daemon's database in one test.
command -v sqlite3 >/dev/null || missing+=(sqlite3)
# A throwaway PostgreSQL whose clock steps back runs under libfaketime.
compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null || missing+=(faketime)
# The dashboard's browser test drives Debian's Chromium through Debian's chromedriver.
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
# SQLCRON_LONG=1: the Patroni test's cluster (Debian's patroni and etcd; tests/patroni/up.sh).
if [ "${SQLCRON_LONG:-}" = 1 ]; then
    command -v patroni >/dev/null || missing+=(patroni)
    command -v etcd >/dev/null || missing+=(etcd-server)
    command -v etcdctl >/dev/null || missing+=(etcd-client)
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "test.sh: installing ${missing[*]} (for the database topology, SQLite command, clock, browser and service tests)" >&2
    if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

cargo fmt --check
# A failing test's own message, not a backtrace, is what the end of a CI log shows.
export RUST_BACKTRACE=0
# The lints need a build of their own (check mode, its own target directory so that it does not
# wait for the tests' build lock): at the lowest CPU priority beside the tests, which mostly wait
# on daemons and databases; a lint failure fails the suite at the end.
clippy_log=$(mktemp)
CARGO_TARGET_DIR=target/clippy nice -n 19 cargo clippy --all-targets --quiet -- -D warnings >"$clippy_log" 2>&1 &
clippy=$!
package_log=$(mktemp)
package_test=
trap 'kill "$clippy" ${package_test:+"$package_test"} ${service_test:+"$service_test"} 2>/dev/null || true; rm -f "$clippy_log" "$package_log" "${service_log:-}"' EXIT
# Each part's wall time goes to stderr, to see where the suite's time goes.
phase() { echo "test.sh: $1 done after ${SECONDS}s" >&2; }
cargo test --all-targets --no-run
phase "build"
# The manual (docs/, an mdBook) is built into target/book/; its links, anchors and examples are
# checked by tests/it/manual.rs and tests/it/manual_examples.rs. Debian has no mdBook package:
# it comes from crates.io, built once into cargo's bin directory.
mdbook=$(command -v mdbook || echo "${CARGO_HOME:-$HOME/.cargo}/bin/mdbook")
if [ ! -x "$mdbook" ]; then
    echo "test.sh: installing mdbook (cargo install, once)" >&2
    cargo install mdbook --locked --version '^0.4' --quiet
fi
book_log=$(mktemp)
if ! "$mdbook" build docs >"$book_log" 2>&1 || grep -E '(ERROR|WARN)' "$book_log"; then
    cat "$book_log" >&2
    echo "test.sh: mdbook build docs failed or warned" >&2
    exit 1
fi
rm -f "$book_log"
phase "the manual's build"
# SQLCRON_LONG=1: the long tests too (README). The rolling upgrade needs the previous release's
# binary, built once under target/previous-release/ (a few minutes; before the tests start, so
# that it does not compete with them).
if [ "${SQLCRON_LONG:-}" = 1 ]; then
    SQLCRON_PREVIOUS_BIN=$(scripts/previous-release.sh)
    export SQLCRON_PREVIOUS_BIN
    phase "the previous release's build"
fi
# The package test (docs/packaging.md): packs the binary the tests just built (stripped; the
# release build that `scripts/package.sh` makes by default would cost the suite a second full
# build), runs lintian, and installs, upgrades, removes and purges the .deb in a throwaway
# Debian 12 root; at the lowest CPU priority beside the database tests.
# SQLCRON_SKIP_PACKAGE_TEST=1 leaves it out (a quick local run).
if [ "${SQLCRON_SKIP_PACKAGE_TEST:-}" != 1 ]; then
    (
        rc=0
        SQLCRON_BIN=target/debug/sqlcron nice -n 19 scripts/package-test.sh || rc=$?
        echo "package-test.sh: ended after ${SECONDS}s of the suite"
        exit $rc
    ) >"$package_log" 2>&1 &
    package_test=$!
fi
# Everything but the chaos soak, in parallel; then the soak alone, its three databases at once
# (three daemons and a throwaway server each, light on CPU: about 30 CPU seconds in 90 s;
# SQLCRON_SOAK_SECS sets its length, default 60 s).
service_log=$(mktemp)
service_test=
if [ "${SQLCRON_SKIP_SERVICE_TEST:-}" != 1 ]; then
    (
        rc=0
        SQLCRON_BIN=target/debug/sqlcron nice -n 19 scripts/service-test.sh || rc=$?
        echo "service-test.sh: ended after ${SECONDS}s of the suite"
        exit $rc
    ) >"$service_log" 2>&1 &
    service_test=$!
fi
cargo test --all-targets -- --skip soak::
phase "unit and integration tests"
if ! wait "$clippy"; then
    cat "$clippy_log" >&2
    echo "test.sh: cargo clippy --all-targets -- -D warnings failed" >&2
    exit 1
fi
# The fuzz targets' checks run in the suite as property tests (tests/fuzz_inputs.rs); the
# coverage-guided runs need an instrumented build of their own and run only when asked:
# SQLCRON_FUZZ_SECS=20 scripts/test.sh (seconds per target).
if [ -n "${SQLCRON_FUZZ_SECS:-}" ] && [ "$SQLCRON_FUZZ_SECS" != 0 ]; then
    scripts/fuzz.sh
fi
cargo test --test it soak:: -- --test-threads=3
phase "chaos soak"
if [ -n "$service_test" ]; then
    if ! wait "$service_test"; then
        cat "$service_log" >&2
        echo "test.sh: the service test (booted container) failed" >&2
        exit 1
    fi
    grep -E '^(service-test.sh:|.*systemd-analyze security:)' "$service_log" || true
fi
if [ -n "$package_test" ]; then
    if ! wait "$package_test"; then
        cat "$package_log" >&2
        echo "test.sh: the package test failed" >&2
        exit 1
    fi
    grep -E '^(== |W: |E: |package-test.sh:)' "$package_log" || true
fi
