#!/bin/sh
# Runs the chaos soak of one database many times, a few at once, and keeps each failed run's
# records (the daemons' logs, the jobs' own records, history.tsv, events.tsv, unaccounted.txt):
#
#   scripts/soak-campaign.sh mysql 30 3 105     # database, runs, at once, seconds of faults
#
# Each run's output goes to target/soak-campaign/DATABASE-N.log (a campaign clears its
# database's logs first: run one campaign per database at a time); a failed run's log names the
# folder its records were kept in (under target/tmp/). The last line sums up the campaign.
set -eu
cd "$(dirname "$0")/.."
db=${1:-mysql}
runs=${2:-30}
parallel=${3:-3}
secs=${4:-105}
case "$db" in
    sqlite | postgres | mysql) ;;
    *)
        echo "soak-campaign.sh: the database is sqlite, postgres or mysql, not $db" >&2
        exit 2
        ;;
esac
cargo test --test it --no-run 2>/dev/null
bin=$(cargo test --test it --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\/it-[^"]*\)".*/\1/p' | tail -1)
out=target/soak-campaign
mkdir -p "$out"
rm -f "$out/$db"-*.log
one() {
    n=$1
    if SQLCRON_SOAK_SECS=$secs "$bin" --exact "soak::chaos_soak_$db" --nocapture \
        >"$out/$db-$n.log" 2>&1; then
        echo "run $n: $(grep -o 'faults .*' "$out/$db-$n.log" | tail -1)"
    else
        echo "run $n FAILED: $(grep -o 'faults .*' "$out/$db-$n.log" | tail -1) (log $out/$db-$n.log)"
    fi
}
n=0
while [ "$n" -lt "$runs" ]; do
    pids=
    i=0
    while [ "$i" -lt "$parallel" ] && [ "$n" -lt "$runs" ]; do
        n=$((n + 1))
        i=$((i + 1))
        one "$n" &
        pids="$pids $!"
    done
    for p in $pids; do wait "$p"; done
done
failed=$(grep -L 'test result: ok. 1 passed' "$out/$db"-*.log | wc -l)
echo "soak-campaign.sh: $db, $runs runs of $secs s, $parallel at once: $failed failed"
[ "$failed" = 0 ]
