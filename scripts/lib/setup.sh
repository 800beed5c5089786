# Sourced (not run) by scripts/run, scripts/test, .ci/run and packaging/*.sh: installs what the
# build and the tests need when it is missing, so the README's commands work on a fresh machine.
# The one place that knows these tools; the callers only call ensure_build_tools /
# ensure_python_venv / ensure_cargo_deb / ensure_deb_test_tools / ensure_strace.
#
# Why cmake at all: pingora-core depends on flate2 with its `zlib-ng` feature, and libz-ng-sys
# (zlib-ng's native API) has one build script, which drives cmake. Cargo cannot switch a feature
# a dependency turns on, and no other backend offers that API (docs/decisions.md, "cmake").
#
# Where cmake comes from, first that works:
#   1. a `cmake` already on PATH;
#   2. the one this script put in .tools/ on an earlier run (the PyPI wheel in a venv);
#   3. Debian packages (`apt-get install cmake`) when running as root or with password-less sudo;
#   4. the `cmake` PyPI wheel into a venv in .tools/ (no root needed; python3 with venv), then
#      put on PATH for this run. A machine without `make` gets the `ninja` wheel too.
#
#   TOLLGATE_SETUP_APT=0       never use apt-get (a root shell without a reachable mirror)
#   TOLLGATE_TOOLS_DIR=PATH    where the venv of step 4 lives (default: .tools in the repository)

TOLLGATE_TOOLS_DIR="${TOLLGATE_TOOLS_DIR:-$PWD/.tools}"
_setup_apt_updated=""

_setup_say() { echo "setup: $*" >&2; }

# Runs a command as root: directly when root, else through sudo when it needs no password.
setup_as_root() {
  if [ "$(id -u)" = 0 ]; then
    "$@"
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo -n "$@"
  else
    return 1
  fi
}

# apt-get install when allowed and possible; returns non-zero (quietly) otherwise.
_setup_apt_install() {
  [ "${TOLLGATE_SETUP_APT:-1}" != 0 ] && command -v apt-get >/dev/null || return 1
  setup_as_root true 2>/dev/null || return 1
  _setup_say "installing $* from the Debian packages"
  if [ -z "$_setup_apt_updated" ]; then
    setup_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq || return 1
    _setup_apt_updated=1
  fi
  setup_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

# Puts the tools venv on PATH for this process and the ones it starts (cargo's build scripts).
_setup_use_tools() {
  case ":$PATH:" in
    *":$TOLLGATE_TOOLS_DIR/bin:"*) ;;
    *) export PATH="$TOLLGATE_TOOLS_DIR/bin:$PATH" ;;
  esac
  # The cmake crate uses cmake's default generator (Unix Makefiles) unless told otherwise.
  if ! command -v make >/dev/null && [ -x "$TOLLGATE_TOOLS_DIR/bin/ninja" ]; then
    export CMAKE_GENERATOR=Ninja
  fi
}

_setup_pip_cmake() {
  local wheels=("cmake>=3.14,<5")
  command -v make >/dev/null || wheels+=(ninja)
  _setup_say "installing ${wheels[*]} from PyPI into $TOLLGATE_TOOLS_DIR"
  if ! command -v python3 >/dev/null; then
    _setup_say "no python3: install cmake yourself (apt-get install cmake), or python3 with venv"
    return 1
  fi
  if ! { [ -x "$TOLLGATE_TOOLS_DIR/bin/pip" ] || python3 -m venv "$TOLLGATE_TOOLS_DIR"; }; then
    _setup_say "python3 -m venv failed (Debian: apt-get install python3-venv); or install cmake yourself"
    return 1
  fi
  "$TOLLGATE_TOOLS_DIR/bin/pip" install --quiet --disable-pip-version-check "${wheels[@]}" || return 1
  _setup_use_tools
}

ensure_cmake() {
  command -v cmake >/dev/null && return 0
  if [ -x "$TOLLGATE_TOOLS_DIR/bin/cmake" ]; then
    _setup_use_tools
    return 0
  fi
  _setup_say "cmake not found (Pingora's zlib-ng build needs it)"
  if _setup_apt_install cmake make && command -v cmake >/dev/null; then
    return 0
  fi
  _setup_pip_cmake && command -v cmake >/dev/null && return 0
  _setup_say "could not provide cmake; install it (apt-get install cmake, or pip install cmake) and retry"
  return 1
}

# Rust links through the system C compiler, and the C parts of the build (zlib-ng, SQLite,
# AWS-LC) compile with it.
ensure_cc() {
  command -v cc >/dev/null && return 0
  _setup_apt_install gcc libc6-dev && command -v cc >/dev/null && return 0
  _setup_say "no C compiler (cc): install gcc (Debian: apt-get install gcc libc6-dev) and retry"
  return 1
}

ensure_cargo() {
  command -v cargo >/dev/null && return 0
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
    return 0
  fi
  _setup_say "no Rust toolchain: install it with rustup (https://rustup.rs), then retry"
  return 1
}

ensure_build_tools() {
  ensure_cargo && ensure_cc && ensure_cmake
}

# cargo-deb builds the Debian package (packaging/build-deb.sh). When `cargo deb` is missing it is
# compiled from crates.io into TOLLGATE_TOOLS_DIR (about a minute, once), with the versions of
# its own lock file (--locked), and put on PATH.
TOLLGATE_CARGO_DEB_VERSION="${TOLLGATE_CARGO_DEB_VERSION:-3.8.0}"
ensure_cargo_deb() {
  [ -x "$TOLLGATE_TOOLS_DIR/bin/cargo-deb" ] && _setup_use_tools
  cargo deb --version >/dev/null 2>&1 && return 0
  _setup_say "installing cargo-deb $TOLLGATE_CARGO_DEB_VERSION from crates.io into $TOLLGATE_TOOLS_DIR"
  cargo install --quiet --locked --root "$TOLLGATE_TOOLS_DIR" cargo-deb --version "$TOLLGATE_CARGO_DEB_VERSION" \
    || { _setup_say "could not install cargo-deb (cargo install cargo-deb)"; return 1; }
  _setup_use_tools
}

# What packaging/test-deb.sh needs beside the build: `systemd-analyze` (Debian's systemd package,
# which installs in a container where systemd does not run) and the package's own dependencies,
# which `dpkg -i` does not fetch.
ensure_deb_test_tools() {
  local missing=() pkg
  command -v systemd-analyze >/dev/null || missing+=(systemd)
  for pkg in adduser ca-certificates; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} = 0 ] && return 0
  _setup_apt_install "${missing[@]}" && return 0
  _setup_say "could not install ${missing[*]} (apt-get install ${missing[*]}); retry after installing them"
  return 1
}

# The SDK test suite makes a venv in .venv; Debian splits venv/ensurepip into python3-venv.
# Without root this only reports: scripts/test then skips the SDK tests unless they are required.
ensure_python_venv() {
  python3 -c 'import venv, ensurepip' 2>/dev/null && return 0
  _setup_apt_install python3-venv || _setup_say "python3 venv support missing (Debian: apt-get install python3-venv)"
}

# tests/go_tlog.rs checks the tenant log with Go's reference packages (golang.org/x/mod/sumdb/note
# and tlog), built in GOPATH mode from Debian's golang-golang-x-mod-dev (no Go module proxy is
# needed). Without root this only reports: the test then skips unless TOLLGATE_REQUIRE_GO=1.
ensure_go_tlog() {
  command -v go >/dev/null && [ -d /usr/share/gocode/src/golang.org/x/mod/sumdb/tlog ] && return 0
  _setup_apt_install golang-go golang-golang-x-mod-dev \
    || _setup_say "Go's sumdb packages missing (Debian: apt-get install golang-go golang-golang-x-mod-dev)"
}

# tests/durability.rs runs the gateway under `strace -f` to show that, with
# `receipts.durability: fsync`, no answer ends before the fdatasync of its receipt. Without root
# this only reports: the test then skips unless TOLLGATE_REQUIRE_STRACE=1.
ensure_strace() {
  command -v strace >/dev/null && return 0
  _setup_apt_install strace || _setup_say "strace is missing (Debian: apt-get install strace)"
}

# tests/log_timestamps.rs runs OpenSSL's own RFC 3161 TSA (`openssl ts -reply`, `-verify`) and
# makes its certificates with `openssl req` / `openssl x509`: the `openssl` command line tool.
ensure_openssl() {
  command -v openssl >/dev/null && return 0
  _setup_apt_install openssl || _setup_say "the openssl command is missing (Debian: apt-get install openssl)"
}

# tests/end_users.rs moves the server's wall clock with libfaketime (LD_PRELOAD; the product has
# no clock setting: tests/support/clock.rs). Without root this only reports: those tests then
# skip unless TOLLGATE_REQUIRE_FAKETIME=1.
ensure_faketime() {
  local lib
  for lib in /usr/lib/*/faketime/libfaketimeMT.so.1 /usr/lib/faketime/libfaketimeMT.so.1; do
    [ -e "$lib" ] && return 0
  done
  _setup_apt_install libfaketime || _setup_say "libfaketime missing (Debian: apt-get install libfaketime)"
}

# tests/console_browser.rs drives Debian's chromium headless through Playwright (Playwright's own
# browser download is not used: the system executable is). Without root this only reports: the
# test then skips unless TOLLGATE_REQUIRE_BROWSER_TESTS=1.
ensure_chromium() {
  [ -x /usr/bin/chromium ] && return 0
  _setup_apt_install chromium || _setup_say "chromium missing (Debian: apt-get install chromium)"
}

# The console's SSO test (tests/console_browser.rs) runs oidc-provider on Node.js, installed by
# `npm ci` in tests/console/oidc. Without root this only reports.
ensure_node() {
  command -v node >/dev/null && command -v npm >/dev/null && return 0
  _setup_apt_install nodejs npm || _setup_say "node/npm missing (Debian: apt-get install nodejs npm)"
}
