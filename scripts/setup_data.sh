#!/usr/bin/env bash
# Install Fashion-MNIST for `dataset: fashion_mnist` (and the tests that read the real files):
# Debian's package dataset-fashion-mnist, which puts its four IDX files under
# /usr/share/datasets/fashion-mnist/ (TrialConfig's default data_root for fashion_mnist). Nothing
# is done where the four files are there already. Installing needs root: as root apt-get runs
# directly, otherwise through sudo; with neither, or without apt-get, this fails saying what to
# install. Nothing is downloaded from anywhere but the distribution's own archive.
set -euo pipefail
# shellcheck source=scripts/apt_install.sh
source "$(dirname "$0")/apt_install.sh"
PACKAGE=dataset-fashion-mnist
FOLDER=/usr/share/datasets/fashion-mnist
FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)

# the names of the four files (gzipped or plain) that are not under $FOLDER
absent() {
  local name
  for name in "${FILES[@]}"; do
    [ -f "$FOLDER/$name.gz" ] || [ -f "$FOLDER/$name" ] || echo "$name"
  done
}
fail() {
  echo "setup_data.sh: $*" >&2
  echo "setup_data.sh: dataset: fashion_mnist reads ${FILES[*]} (each .gz or plain) from" \
    "$FOLDER, which Debian's package $PACKAGE provides; install it, or copy the four files" \
    "into a folder of your own and set data_root to it" >&2
  exit 1
}

if [ -n "$(absent)" ]; then
  apt_install "$PACKAGE"
  missing=$(absent | paste -sd ' ')
  [ -z "$missing" ] || fail "apt-get installed $PACKAGE, but $FOLDER still lacks: $missing"
fi
echo "data ok: Fashion-MNIST in $FOLDER ($(ls "$FOLDER" | paste -sd " "))"
