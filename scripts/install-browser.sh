#!/usr/bin/env bash
# Install Debian's headless-capable Chromium for the browser test of the HTML
# report (tests/report/test_report_browser.py), if it is missing.
#
#   sudo scripts/install-browser.sh
#
# Needs root and apt-get; exits 1 with one line on stderr when it cannot
# install (no root, no apt-get, no network, no package): the browser test
# then skips, saying why.  AIHPC_CHROMIUM=/path/to/chromium points the test
# at another build instead.
set -u

fail() { echo "install-browser: $*" >&2; exit 1; }

for name in chromium chromium-browser google-chrome; do
    command -v "$name" >/dev/null && exit 0
done
[ "$(id -u)" = 0 ] || fail "Chromium is missing and installing it needs root"
command -v apt-get >/dev/null || fail "Chromium is missing and there is no apt-get to install it"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || fail "apt-get update failed"
apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 \
    || fail "apt-get install chromium failed"
command -v chromium >/dev/null || fail "the chromium package installed no chromium command"
