#!/usr/bin/env bash
# Builds the sqlcron a rolling upgrade comes from (the commit in packaging/previous-release),
# once: its sources from git (`git archive`, no worktree), its build in a target directory of its
# own under target/previous-release/COMMIT/, kept for the next run. Prints the binary's path.
#
#   SQLCRON_PREVIOUS_BIN=$(scripts/previous-release.sh) cargo test --test it rolling_upgrade
set -euo pipefail
cd "$(dirname "$0")/.."
commit=$(grep -v '^#' packaging/previous-release | grep -m1 -oE '^[0-9a-f]{40}')
out=target/previous-release/$commit
bin=$out/target/debug/sqlcron
if [ ! -x "$bin" ]; then
    if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
        echo "previous-release.sh: commit $commit is not in this clone's history (a shallow clone? git fetch --unshallow)" >&2
        exit 1
    fi
    rm -rf "$out/src"
    mkdir -p "$out/src"
    git archive "$commit" | tar -x -C "$out/src"
    echo "previous-release.sh: building $commit (a few minutes, once)" >&2
    (cd "$out/src" && SQLCRON_GIT_COMMIT=${commit:0:12} CARGO_TARGET_DIR="$PWD/../target" \
        cargo build --quiet --bin sqlcron)
fi
echo "$PWD/$bin"
