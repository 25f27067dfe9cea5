#!/usr/bin/env bash
# Makes sure a headless-capable Chromium is installed and prints its path, for
# the HTML report's browser test (cmd/lockfree/internal/report) and for screenshots.
#
#   scripts/chromium.sh          install it when missing (as root), print its path
#   eval "$(scripts/chromium.sh env)"   export LOCKFREE_CHROMIUM=<path>
#
# Browser: LOCKFREE_CHROMIUM when set, else chromium (Debian's package) or
# chromium-browser on PATH. When it is missing and we are root, it installs
# Debian's chromium package with apt-get, updating the package lists first
# when they do not know it (a new machine). Not root: one line says how.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
me=chromium.sh
# shellcheck source-path=SCRIPTDIR source=lib/service.sh
. "$root/scripts/lib/service.sh"

# find_browser prints the browser on PATH, or fails.
find_browser() {
	command -v chromium 2>/dev/null || command -v chromium-browser 2>/dev/null
}

install_browser() {
	local out=$root/.services/chromium-install.log
	mkdir -p "$root/.services"
	say "chromium not found: installing it (apt-get install chromium; log: $out)"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y --no-install-recommends chromium >"$out" 2>&1; then
		{ apt-get update && apt-get install -y --no-install-recommends chromium; } >>"$out" 2>&1 ||
			die "apt-get install chromium failed: $(tail -n 1 "$out")"
	fi
}

if [ -n "${LOCKFREE_CHROMIUM:-}" ]; then
	if [ ! -x "$LOCKFREE_CHROMIUM" ] || [ -d "$LOCKFREE_CHROMIUM" ]; then
		die "LOCKFREE_CHROMIUM=$LOCKFREE_CHROMIUM is not a program: unset it, or apt-get install chromium"
	fi
	path=$LOCKFREE_CHROMIUM
elif ! path=$(find_browser); then
	if ! is_root || ! command -v apt-get >/dev/null 2>&1; then
		die "chromium not found: run as root (or: sudo apt-get install chromium), or set LOCKFREE_CHROMIUM"
	fi
	install_browser
	path=$(find_browser) || die "apt-get installed chromium but it is not on PATH"
fi
case "${1:-}" in
env) printf 'export LOCKFREE_CHROMIUM=%q\n' "$path" ;;
"") echo "$path" ;;
*) die "usage: scripts/chromium.sh [env]" ;;
esac
