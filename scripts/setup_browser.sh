#!/usr/bin/env bash
# Install what the browser tests (tests/study/test_browser_review.py) drive: Debian's chromium and
# chromium-driver, at /usr/bin/chromium and /usr/bin/chromedriver. Nothing is done where both are
# there already. Installing needs root: as root apt-get runs directly, otherwise through sudo;
# with neither, or without apt-get, this fails saying what to install. Selenium itself comes with
# the dev extra (scripts/setup_env.sh).
set -euo pipefail
# shellcheck source=scripts/apt_install.sh
source "$(dirname "$0")/apt_install.sh"
CHROMIUM=/usr/bin/chromium
CHROMEDRIVER=/usr/bin/chromedriver

have() { [ -x "$CHROMIUM" ] && [ -x "$CHROMEDRIVER" ]; }
fail() {
  echo "setup_browser.sh: $*" >&2
  echo "setup_browser.sh: the browser tests need $CHROMIUM and $CHROMEDRIVER (Debian packages" \
    "chromium and chromium-driver); install them, or deselect the tests with -m 'not browser'" >&2
  exit 1
}

if ! have; then
  apt_install chromium chromium-driver fonts-liberation
  have || fail "apt-get installed chromium and chromium-driver, but $CHROMIUM or $CHROMEDRIVER" \
    "is still missing (a distribution that ships chromium as a snap has no usable one)"
fi
"$CHROMEDRIVER" --version >/dev/null || fail "$CHROMEDRIVER does not run"
echo "browser ok: $("$CHROMIUM" --version 2>/dev/null) | $("$CHROMEDRIVER" --version)"
