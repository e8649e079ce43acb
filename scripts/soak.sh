#!/usr/bin/env bash
# An hour with nothing growing (issue 52, point 9; outside the suite, which keeps its short
# chaos soak): three nodes and 208 jobs per database, the dashboards and /metrics read every 5 s,
# each daemon's RSS, descriptors and threads, the database's connections, the schema's size, the
# history's rows and the per-second jobs' p99 lateness sampled each minute
# (tests/it/long_soak.rs). The tables land in target/long-soak/DATABASE.tsv.
#
#   scripts/soak.sh --minutes 60                 # the three databases at once
#   scripts/soak.sh --minutes 30 --db postgres   # one
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=60
dbs="sqlite postgres mysql"
while [ $# -gt 0 ]; do
    case $1 in
        --minutes) minutes=$2; shift 2 ;;
        --db) dbs=$2; shift 2 ;;
        *) echo "usage: scripts/soak.sh [--minutes N] [--db sqlite|postgres|mysql]" >&2; exit 2 ;;
    esac
done
scripts/ensure-databases.sh
filters=()
for db in $dbs; do filters+=("long_soak::$db"); done
SQLCRON_LONG_SOAK_MINUTES=$minutes cargo test --test it -- \
    --exact --nocapture --test-threads=3 "${filters[@]}"
