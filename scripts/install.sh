#!/usr/bin/env bash
# Installs sqlcron as a systemd service: the binary, the unit, an example configuration (kept if
# one exists), the man pages, shell completions and the `sqlcron` system user.
#
#   scripts/install.sh                 # build (release) and install under /
#   DESTDIR=/tmp/stage scripts/install.sh   # stage the files only (no user, no systemctl)
#   SQLCRON_BIN=path/to/sqlcron scripts/install.sh   # install a binary built elsewhere
#
# Then: edit /etc/sqlcron/sqlcron.toml, `systemctl enable --now sqlcron`, `sqlcron status`.
set -euo pipefail
cd "$(dirname "$0")/.."

DESTDIR=${DESTDIR:-}
BIN=${SQLCRON_BIN:-}
if [ -z "$BIN" ]; then
    cargo build --release --locked 2>/dev/null || cargo build --release
    BIN=target/release/sqlcron
fi

install -D -m 0755 "$BIN" "$DESTDIR/usr/bin/sqlcron"
install -D -m 0644 systemd/sqlcron.service "$DESTDIR/lib/systemd/system/sqlcron.service"
install -D -m 0644 systemd/run-as-users.conf "$DESTDIR/usr/share/sqlcron/run-as-users.conf"
install -d -m 0755 "$DESTDIR/etc/sqlcron"
if [ ! -e "$DESTDIR/etc/sqlcron/sqlcron.toml" ]; then
    # The example with its sample jobs commented out, so a fresh install runs nothing by surprise.
    sed -e '/^\[\[job\]\]/,$ s/^/# /' config/sqlcron.example.toml \
        | sed -e 's/^name = "web-1".*$/# name = "web-1"              # default: the host name/' \
              -e 's/^heavy = 2 .*$/# heavy = 2/' \
        > "$DESTDIR/etc/sqlcron/sqlcron.toml"
    chmod 0640 "$DESTDIR/etc/sqlcron/sqlcron.toml"
fi
install -d "$DESTDIR/usr/share/man/man1" "$DESTDIR/usr/share/man/man5" "$DESTDIR/usr/share/man/man8" "$DESTDIR/usr/share/bash-completion/completions" \
    "$DESTDIR/usr/share/zsh/vendor-completions" "$DESTDIR/usr/share/fish/vendor_completions.d"
pages=$(mktemp -d)
"$BIN" man --out "$pages"
for page in "$pages"/*; do
    section=${page##*.}
    gzip -9n < "$page" > "$DESTDIR/usr/share/man/man$section/$(basename "$page").gz"
done
rm -r "$pages"
"$BIN" completions bash > "$DESTDIR/usr/share/bash-completion/completions/sqlcron"
"$BIN" completions zsh > "$DESTDIR/usr/share/zsh/vendor-completions/_sqlcron"
"$BIN" completions fish > "$DESTDIR/usr/share/fish/vendor_completions.d/sqlcron.fish"

if [ -z "$DESTDIR" ]; then
    if ! id sqlcron >/dev/null 2>&1; then
        useradd --system --home-dir /var/lib/sqlcron --no-create-home --shell /usr/sbin/nologin sqlcron
    fi
    chgrp sqlcron /etc/sqlcron/sqlcron.toml
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload
    fi
    echo "installed; next: edit /etc/sqlcron/sqlcron.toml, then systemctl enable --now sqlcron"
fi
