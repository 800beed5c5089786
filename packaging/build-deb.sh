#!/usr/bin/env bash
# Builds the Debian package tollgate_<version>_amd64.deb with cargo-deb (the package is described
# by [package.metadata.deb] in Cargo.toml) and prints its path as the last line of output.
#
#   bash packaging/build-deb.sh                 release build (`cargo build --release`: fat LTO,
#                                               about 7 CPU-minutes from scratch), packaged
#   bash packaging/build-deb.sh --binary PATH   packages an already built `tollgate` binary
#                                               instead: same files, unit and maintainer scripts
#                                               (packaging/test-deb.sh packages the debug build
#                                               the tests have already made)
#   --output DIR                                where the .deb goes (default: <target>/debian)
#
# <target> is CARGO_TARGET_DIR when set, else ./target; the release build goes there too.
# cmake and a C compiler (release build) and cargo-deb itself are installed when missing
# (scripts/lib/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/setup.sh

binary=""
output="${CARGO_TARGET_DIR:-target}/debian"
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --output) output="$2"; shift 2 ;;
    *) echo "usage: $0 [--binary PATH] [--output DIR]" >&2; exit 2 ;;
  esac
done
mkdir -p "$output"
output="$(cd "$output" && pwd)"

ensure_cargo
ensure_cargo_deb

if [ -z "$binary" ]; then
  ensure_build_tools
  exec cargo deb --output "$output"
fi

# cargo-deb takes binaries only from <target>/release (the `target/release/` prefix of the
# assets), so a prebuilt binary is packaged from a scratch target directory that holds it there.
[ -x "$binary" ] || { echo "build-deb: $binary is not an executable" >&2; exit 1; }
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/release"
cp "$binary" "$stage/release/tollgate"
# --fast: lighter compression; this package is for a test, not for distribution.
CARGO_TARGET_DIR="$stage" cargo deb --no-build --fast --output "$output"
