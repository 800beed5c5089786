#!/usr/bin/env bash
# Tests the Debian package on this machine (tests/deb_package.rs): dpkg -i, systemd-analyze
# verify on the unit, the packaged binary run the way the unit runs it (its user, environment and
# sandbox; migrate, then serve) answering a management and a gateway call, then dpkg --purge and
# nothing left. It installs a package and a system user for a few seconds, so it needs root
# and is not part of scripts/test; CI runs it (.ci/run).
#
#   bash packaging/test-deb.sh            packages the debug binary the tests build (after
#                                         scripts/test: nothing to compile) with the release
#                                         package's files, unit and scripts: no release
#                                         build (7 CPU-minutes)
#   bash packaging/test-deb.sh FILE.deb   tests the given package, e.g. the release one that
#                                         packaging/build-deb.sh made
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/setup.sh

if [ "$(id -u)" != 0 ] || ! command -v dpkg >/dev/null; then
  echo "test-deb: needs root on a Debian-like system (it installs and purges a package)" >&2
  exit 1
fi
ensure_deb_test_tools
ensure_build_tools

target="${CARGO_TARGET_DIR:-target}"
deb="${1:-}"
if [ -z "$deb" ]; then
  # The binary of the test build (`cargo build --bin` alone resolves dependency features
  # without the dev-dependencies and would compile a second set of crates).
  cargo test --test deb_package --no-run
  deb="$(bash packaging/build-deb.sh --binary "$target/debug/tollgate" --output "$target/debian-test" | tail -n 1)"
fi
TOLLGATE_DEB_TEST="$(realpath "$deb")" cargo test --test deb_package -- --nocapture
