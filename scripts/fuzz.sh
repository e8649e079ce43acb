#!/usr/bin/env bash
# Runs each fuzz target (fuzz/fuzz_targets) for a bounded time: the schedule parser, the
# configuration, and the decoding of a cron_table row. Installs cargo-fuzz if it is missing.
# SQLCRON_FUZZ_SECS sets the time per target (default 20); --build-only only builds them. Any crash fails the script; the input
# is left in fuzz/artifacts/TARGET/ and becomes a regular test.
#
# cargo fuzz needs nightly-only compiler flags (sanitizer coverage): RUSTC_BOOTSTRAP=1 lets the
# machine's stable toolchain accept them, so no second toolchain is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${SQLCRON_FUZZ_SECS:-20}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install --locked cargo-fuzz >/dev/null
fi

export RUSTC_BOOTSTRAP=1
cargo fuzz build -O --sanitizer none
if [ "${1:-}" = "--build-only" ]; then
    exit 0
fi
for target in schedule config row; do
    mkdir -p "fuzz/corpus/$target"
    echo "fuzz.sh: $target for ${secs}s" >&2
    log="fuzz/corpus/$target.log"
    if ! cargo fuzz run -O --sanitizer none "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
        -max_total_time="$secs" -max_len=4096 -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "fuzz.sh: $target crashed; the input is in fuzz/artifacts/$target/" >&2
        exit 1
    fi
    grep -E '^(stat::number_of_executed_units|stat::new_units_added)' "$log" >&2 || true
done
echo "fuzz.sh: no crash in ${secs}s per target"
