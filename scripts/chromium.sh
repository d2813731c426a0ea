#!/usr/bin/env bash
# scripts/chromium.sh: install headless Chromium from Debian's packages for
# tests that drive a browser (chromedp), and print the binary to run.
#
# Debian's `chromium` package (plus fonts-liberation, so pages asking for
# Arial/Helvetica/Times get metric-compatible fonts), installed with apt-get
# --no-install-recommends: the recommends (upower, udev, a notification
# daemon, mesa) are of no use to a headless browser. A browser download of a
# test tool's own (Playwright's, Puppeteer's) can't be fetched here.
#
# Usage: scripts/chromium.sh install
#   installs the packages if /usr/bin/chromium is not there yet (a no-op when
#   it is), then prints the binary's absolute path as the only line of
#   stdout; progress and errors go to stderr, and a failed install exits
#   non-zero. Needs root, or passwordless sudo.
#
# Run it headless with at least these flags (as root, and on a machine whose
# network reaches nothing but package registries):
#   --headless --no-sandbox --disable-gpu --disable-quic --no-first-run
#   --disable-background-networking --disable-component-update --disable-sync
#   --user-data-dir=<a fresh empty dir>
# --no-sandbox because Chromium refuses to start as root without it; the
# background-networking, component-update and sync flags because otherwise it
# keeps trying to reach Google's hosts, which this network refuses.
#
# Environment (all optional):
#   KORD_CHROMIUM   a Chromium/Chrome binary to use instead: when it is
#                   executable it is printed and nothing is installed
#   KORD_CACHE      cache root (default $HOME/.cache/kord), which holds the
#                   install lock and the apt-get log (chromium-install.log)
set -euo pipefail

BIN=/usr/bin/chromium
PACKAGES=(chromium fonts-liberation)
CACHE_ROOT=${KORD_CACHE:-${HOME:-/tmp}/.cache/kord}
LOGF=$CACHE_ROOT/chromium-install.log

log() { echo "chromium.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# The browser answers: --version starts the real binary behind Debian's
# wrapper script, so a missing shared library shows up here.
works() { "$1" --version >/dev/null 2>&1; }

# apt-get as root, or through sudo that asks no password.
SUDO=()
apt() {
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get -q -y \
        -o DPkg::Lock::Timeout=300 -o Dpkg::Use-Pty=0 "$@"
}

install() {
    if [[ -n ${KORD_CHROMIUM:-} ]]; then
        [[ -x $KORD_CHROMIUM ]] || die "KORD_CHROMIUM=$KORD_CHROMIUM is not an executable file"
        echo "$KORD_CHROMIUM"
        return 0
    fi
    if [[ ! -x $BIN ]]; then
        command -v apt-get >/dev/null || die "$BIN is missing and there is no apt-get to install Debian's chromium package"
        if ((EUID != 0)); then
            if ! command -v sudo >/dev/null || ! sudo -n true 2>/dev/null; then
                die "$BIN is missing; installing it needs root (or passwordless sudo): run as root, or apt-get install ${PACKAGES[*]}"
            fi
            SUDO=(sudo -n env DEBIAN_FRONTEND=noninteractive)
        fi
        mkdir -p "$CACHE_ROOT"
        # One install at a time; a concurrent caller waits, then finds the
        # binary there.
        exec 8>"$CACHE_ROOT/chromium-install.lock"
        flock 8
        if [[ ! -x $BIN ]]; then
            local t0=$SECONDS
            log "installing ${PACKAGES[*]} with apt-get (log: $LOGF)"
            : >"$LOGF"
            # Old package lists name versions the mirror no longer has (or
            # no chromium at all): on failure, update them and try again.
            if ! apt install --no-install-recommends "${PACKAGES[@]}" >>"$LOGF" 2>&1; then
                log "apt-get install failed; running apt-get update and retrying"
                if ! { apt update && apt install --no-install-recommends "${PACKAGES[@]}"; } >>"$LOGF" 2>&1; then
                    tail -n 40 "$LOGF" >&2
                    die "installing ${PACKAGES[*]} with apt-get failed (full output: $LOGF)"
                fi
            fi
            [[ -x $BIN ]] || die "apt-get installed ${PACKAGES[*]} but $BIN is still missing (full output: $LOGF)"
            log "installed $("$BIN" --version 2>/dev/null || echo chromium) in $((SECONDS - t0))s"
        fi
        exec 8>&-
    fi
    works "$BIN" || die "$BIN is installed but '$BIN --version' fails: try apt-get install --reinstall ${PACKAGES[*]}"
    echo "$BIN"
}

case ${1:-} in
install) install ;;
*)
    echo "usage: $0 install  (see the top of this file)" >&2
    exit 2
    ;;
esac
