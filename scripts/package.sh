#!/usr/bin/env bash
# Builds the Debian and RPM packages of sqlcron into target/packages/:
#
#   scripts/package.sh              # sqlcron_<version>-1_<arch>.deb and sqlcron-<version>-1.<arch>.rpm
#
# The binary is built with the `dist` profile (release, stripped; docs/packaging.md), or taken
# from SQLCRON_BIN. SQLCRON_DEB_VERSION / SQLCRON_RPM_VERSION override the packages' versions (the
# package test builds an older one to upgrade from). Installs cargo-deb and cargo-generate-rpm
# with `cargo install --locked` when they are missing. Reproducible: file times are the last
# commit's (SOURCE_DATE_EPOCH), the man page is gzipped without a name or time.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH

for tool in cargo-deb cargo-generate-rpm; do
    if ! command -v "$tool" >/dev/null; then
        echo "package.sh: installing $tool" >&2
        # A debug build: a packaging tool gains nothing from optimisation, and this one
        # compiles in a third of the time on a fresh machine.
        cargo install --locked --quiet --debug "$tool"
    fi
done

BIN=${SQLCRON_BIN:-}
if [ -z "$BIN" ]; then
    # A target directory of its own: cargo locks a target directory while it builds, and the
    # test suite runs this beside `cargo test`.
    CARGO_TARGET_DIR=target/dist-build cargo build --profile dist --locked --quiet
    BIN=target/dist-build/dist/sqlcron
fi

# What the packages install besides the checked-in files: the binary and what it writes of itself.
stage=target/packaging
rm -rf "$stage"
mkdir -p "$stage" target/packages
install -m 0755 "$BIN" "$stage/sqlcron"
# A binary given in SQLCRON_BIN (the test build) carries its line tables: the package ships none.
strip --strip-unneeded "$stage/sqlcron"
# The man pages, by section: sqlcron(8), sqlcron-COMMAND(1), sqlcron-daemon(8), sqlcron.toml(5).
"$BIN" man --out "$stage/man"
for section in 1 5 8; do
    mkdir -p "$stage/man$section"
    for page in "$stage"/man/*."$section"; do
        gzip -9n < "$page" > "$stage/man$section/$(basename "$page").gz"
    done
    touch -d "@$SOURCE_DATE_EPOCH" "$stage/man$section"/*
done
rm -r "$stage/man"
"$BIN" completions bash > "$stage/sqlcron.bash"
"$BIN" completions zsh > "$stage/_sqlcron"
"$BIN" completions fish > "$stage/sqlcron.fish"
touch -d "@$SOURCE_DATE_EPOCH" "$stage"/*

deb_args=()
[ -n "${SQLCRON_DEB_VERSION:-}" ] && deb_args+=(--deb-version "$SQLCRON_DEB_VERSION")
cargo deb --no-build --no-strip --output target/packages/ "${deb_args[@]}"

rpm_args=()
[ -n "${SQLCRON_RPM_VERSION:-}" ] && rpm_args+=(-s "version = \"$SQLCRON_RPM_VERSION\"")
cargo generate-rpm --output target/packages/ "${rpm_args[@]}"

ls -1 target/packages/
