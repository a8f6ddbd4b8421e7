#!/usr/bin/env bash
# Sourced by the setup scripts: apt_install PACKAGE... installs Debian packages with apt-get, as
# root directly or otherwise through sudo. Each caller defines fail() (its own message, exit 1)
# before calling it; without root or sudo, or without apt-get, fail says what to install.
apt_install() {
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null ||
      fail "installing $* needs root, and this is user $(id -un) without sudo"
    sudo=(sudo)
  fi
  command -v apt-get >/dev/null || fail "no apt-get here to install $*"
  echo "installing $* with apt-get"
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "$@" >/dev/null || fail "apt-get could not install $*"
}
