#!/usr/bin/env bash
# Load benchmark: the same small chat completion, in one run, against
#   direct    the stand-in OpenAI upstream itself (benches/standin_upstream.rs),
#   bare      a bare Pingora passthrough proxy in front of it (benches/bare_pingora.rs),
#   tollgate  Tollgate's gateway in front of it (auth, routing, credentials, usage, receipts, metrics).
# It prints req/s, p50 and p99 per target and the ratios; the headline is Tollgate vs bare
# Pingora, i.e. what Tollgate's own logic costs on top of Pingora. See benches/README.md.
#
# Three kinds of run, all in the same run of the script when asked for:
#   flat out     wrk, closed loop, CONC connections (the default): throughput and CPU per request
#   single-client  MODE=tail (or CONC=1): wrk -t1 -c1, the latency of one request at a time
#   fixed rate   RATES="500 3000": oha, open loop at each rate: the latency added at a given load
#
# Everything runs on 127.0.0.1 and every process it starts is stopped on exit.
#
# Settings (environment):
#   TARGETS="direct bare tollgate"  which targets to run, in this order
#   CONC=32  DURATION=10s  WARMUP=2s  connections, measured run and warm-up per target
#                       (CONC=1: one wrk thread, one connection: the single-client latency)
#   ROUNDS=1            repeat all targets N times (interleaved); the table shows medians
#   MODE=tail           the single-client preset: CONC=1 and ROUNDS=3 unless set
#   RATES="500 3000"    also run every target open loop at each fixed request rate (oha -q RATE
#                       --latency-correction) after its flat-out runs, and report p50/p99/p99.9
#                       per target and what Tollgate adds over bare Pingora at each rate
#   RATE_CONC=32        connections oha spreads a fixed-rate run over
#   FLAT=0              with RATES: skip the flat-out (wrk) runs
#   OHA=PATH            the oha binary; by default oha on PATH, else .bench-tools/bin/oha, which
#                       the script installs itself (cargo install oha --locked, once) when missing
#   BARE_THREADS=2      bare Pingora worker threads (2 = Tollgate's default server.threads)
#   TOLLGATE_LOG=warn   Tollgate's log filter during the run
#   STANDIN_PORT=18091 BARE_PORT=18092 TG_GATEWAY_PORT=18093 TG_MANAGEMENT_PORT=18094 TG_METRICS_PORT=18095
#   SKIP_BUILD=1        use the binaries already in target/release
#   TG_BIN=PATH         the Tollgate binary to run (default target/release/tollgate): with
#                       SKIP_BUILD=1, two builds compared back to back (a copy of the previous one)
#   RESULTS=FILE        also write the medians as TSV to FILE
#   PAGE=4096           SQLite page size of Tollgate's new database (default: the binary's, 2 KiB)
#   KEEP_LOGS=1         keep the temp dir (server logs, wrk outputs) after the run
#   TRACING=1           OpenTelemetry traces on: Tollgate exports a span per request (OTLP/HTTP
#                       batches) to the stand-in, which accepts POST /v1/traces. Off otherwise
#                       (TOLLGATE_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_ENDPOINT are cleared)
#   REDIS=1             shared-state mode: Tollgate keeps rate windows, budget reservations (and
#                       with CHECKS=1 every admission) in Redis (REDIS_URL, default the machine's
#                       redis://127.0.0.1:6379, under a key prefix of this run)
#   CHECKS=1            turn every check on for the tenant: benches/load-policy.yaml (rules,
#                       allowlist, guardrails on request and answer), rpm/tpm limits on the key
#                       and a tenant budget, all far above what the run uses
#
# NOTE on 2-core machines: wrk runs on the same cores as the servers it measures, so every
# target's figure includes contention with the load generator (and, for the proxies, with the
# stand-in upstream behind them). Absolute req/s are therefore low and the proxies are penalised
# more than `direct` (three busy processes instead of two). Compare ratios, not absolute numbers,
# and compare Tollgate with bare Pingora (same process layout, same threads) above all. We keep
# `wrk -t2` on purpose: one wrk thread cannot saturate even the direct target.
set -euo pipefail
cd "$(dirname "$0")/.."

HOST=127.0.0.1
MODE=${MODE:-flat}
case "$MODE" in
  flat) ;;
  tail)
    CONC=${CONC:-1}
    ROUNDS=${ROUNDS:-3}
    ;;
  *)
    echo "load.sh: unknown MODE '$MODE' (use flat or tail)" >&2
    exit 1
    ;;
esac
TARGETS=${TARGETS:-"direct bare tollgate"}
CONC=${CONC:-32}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
ROUNDS=${ROUNDS:-1}
RATES=${RATES:-}
RATE_CONC=${RATE_CONC:-32}
FLAT=${FLAT:-1}
OHA_VERSION=1.16.0
BARE_THREADS=${BARE_THREADS:-2}
STANDIN_PORT=${STANDIN_PORT:-18091}
BARE_PORT=${BARE_PORT:-18092}
TG_GATEWAY_PORT=${TG_GATEWAY_PORT:-18093}
TG_MANAGEMENT_PORT=${TG_MANAGEMENT_PORT:-18094}
TG_METRICS_PORT=${TG_METRICS_PORT:-18095}
SKIP_BUILD=${SKIP_BUILD:-0}
RESULTS=${RESULTS:-}
KEEP_LOGS=${KEEP_LOGS:-0}
BIN_DIR="${CARGO_TARGET_DIR:-target}/release"
LUA=benches/post_chat.lua
CHAT_BODY='{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}'

die() {
  echo "load.sh: $*" >&2
  exit 1
}
want() { [[ " $TARGETS " == *" $1 "* ]]; }

for t in $TARGETS; do
  case "$t" in direct | bare | tollgate) ;; *) die "unknown target '$t' in TARGETS (use direct, bare, tollgate)" ;; esac
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer"
[[ "$CONC" =~ ^[1-9][0-9]*$ ]] || die "CONC must be a positive integer"
[[ "$RATE_CONC" =~ ^[1-9][0-9]*$ ]] || die "RATE_CONC must be a positive integer"
for q in $RATES; do [[ "$q" =~ ^[1-9][0-9]*$ ]] || die "bad rate '$q' in RATES (requests per second, e.g. RATES=\"500 3000\")"; done
[ "$FLAT" = 1 ] || [ -n "$RATES" ] || die "FLAT=0 leaves nothing to run without RATES"
# Two wrk threads (one cannot saturate even `direct`), except for a single connection.
WRK_THREADS=$((CONC >= 2 ? 2 : 1))

# wrk durations: 10s, 2m, 1h or plain seconds. Used to bound each wrk run with `timeout`.
dur_secs() {
  case "$1" in
    *s) echo "${1%s}" ;;
    *m) echo $((${1%m} * 60)) ;;
    *h) echo $((${1%h} * 3600)) ;;
    *) echo "$1" ;;
  esac
}
for d in "$DURATION" "$WARMUP"; do
  [[ "$(dur_secs "$d")" =~ ^[0-9]+$ ]] || die "bad duration '$d' (use e.g. 10s, 1m)"
done

# ---- tools ----------------------------------------------------------------------------------
command -v curl >/dev/null || die "curl is required"
if ! command -v wrk >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    echo "load.sh: installing wrk"
    apt-get install -y -qq wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq wrk; }
  else
    die "wrk is not installed; install it (e.g. sudo apt-get install -y wrk) and run again"
  fi
fi
# oha (open-loop load with latency correction) only for RATES; built from crates.io into
# .bench-tools/ (git-ignored) the first time, so nothing is installed system-wide.
if [ -n "$RATES" ]; then
  command -v python3 >/dev/null || die "python3 is required with RATES (it reads oha's JSON)"
  if [ -z "${OHA:-}" ]; then
    OHA=$(command -v oha || echo "$PWD/.bench-tools/bin/oha")
  fi
  if [ ! -x "$OHA" ]; then
    [ "$OHA" = "$PWD/.bench-tools/bin/oha" ] || die "OHA=$OHA is not an executable"
    echo "load.sh: installing oha $OHA_VERSION into .bench-tools/ (cargo install, once; takes a few minutes)"
    cargo install oha --version "$OHA_VERSION" --locked --root "$PWD/.bench-tools" --quiet \
      || die "could not install oha (cargo install oha --locked)"
  fi
fi

# ---- processes and cleanup ------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-load.XXXXXX")
PIDS=()
declare -A PID_OF
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local pid
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do kill -TERM "$pid" 2>/dev/null || true; done
  # Pingora finishes within its grace period (0 s for the helpers, 1 s for Tollgate); then force.
  for _ in $(seq 50); do
    local alive=0
    for pid in ${PIDS[@]+"${PIDS[@]}"}; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "$rc" != 0 ] || [ "$KEEP_LOGS" = 1 ]; then
    echo "load.sh: logs kept in $WORK" >&2
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port_busy() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# start NAME CMD...: runs CMD in the background, output to $WORK/NAME.log; sets LAST_PID.
start() {
  local name=$1
  shift
  "$@" >"$WORK/$name.log" 2>&1 &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
  PID_OF[$name]=$LAST_PID
}

# wait_http NAME PID URL: until URL answers 200 (30 s), failing early if the process died.
wait_http() {
  local name=$1 pid=$2 url=$3 code
  for _ in $(seq 300); do
    kill -0 "$pid" 2>/dev/null || { tail -n 20 "$WORK/$name.log" >&2; die "$name exited during start-up"; }
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url" || true)
    [ "$code" = 200 ] && return 0
    sleep 0.1
  done
  tail -n 20 "$WORK/$name.log" >&2
  die "$name did not answer 200 on $url within 30 s (last status: $code)"
}

# check_chat NAME URL: one request like wrk's; must be 200 with a usage object (10 s of retries).
check_chat() {
  local name=$1 url=$2 code
  for _ in $(seq 100); do
    code=$(curl -s -o "$WORK/$name.check" -w '%{http_code}' --max-time 5 -X POST \
      -H 'Content-Type: application/json' -H "Authorization: Bearer $KEY" --data "$CHAT_BODY" "$url" || true)
    if [ "$code" = 200 ] && grep -q '"prompt_tokens"' "$WORK/$name.check"; then return 0; fi
    sleep 0.1
  done
  echo "last answer ($code): $(head -c 400 "$WORK/$name.check" 2>/dev/null)" >&2
  die "$name: POST /v1/chat/completions does not answer 200 with usage"
}

# ---- build ----------------------------------------------------------------------------------
if [ "$SKIP_BUILD" != 1 ]; then
  build=()
  want tollgate && build+=(--bin tollgate)
  build+=(--example standin_upstream)
  want bare && build+=(--example bare_pingora)
  echo "load.sh: cargo build --release ${build[*]}"
  cargo build --release "${build[@]}"
fi
STANDIN_BIN="$BIN_DIR/examples/standin_upstream"
BARE_BIN="$BIN_DIR/examples/bare_pingora"
TG_BIN="${TG_BIN:-$BIN_DIR/tollgate}"
[ -x "$STANDIN_BIN" ] || die "missing $STANDIN_BIN (build it or unset SKIP_BUILD)"
want bare && { [ -x "$BARE_BIN" ] || die "missing $BARE_BIN"; }
want tollgate && { [ -x "$TG_BIN" ] || die "missing $TG_BIN"; }

ports=("$STANDIN_PORT")
want bare && ports+=("$BARE_PORT")
want tollgate && ports+=("$TG_GATEWAY_PORT" "$TG_MANAGEMENT_PORT" "$TG_METRICS_PORT")
for p in "${ports[@]}"; do
  port_busy "$p" && die "port $p on $HOST is already in use (set STANDIN_PORT, BARE_PORT, TG_*_PORT)"
done

# ---- start the targets ----------------------------------------------------------------------
# Same bearer header size on every target; the stand-in and bare Pingora ignore its value.
KEY="tollgate_sk_$(printf '%040d' 0)"
declare -A URL
STANDIN="$HOST:$STANDIN_PORT"

start standin "$STANDIN_BIN" "$STANDIN"
wait_http standin "$LAST_PID" "http://$STANDIN/v1/models"
URL[direct]="http://$STANDIN/v1/chat/completions"

if want bare; then
  start bare "$BARE_BIN" "$HOST:$BARE_PORT" "$STANDIN" "$BARE_THREADS"
  wait_http bare "$LAST_PID" "http://$HOST:$BARE_PORT/v1/models"
  URL[bare]="http://$HOST:$BARE_PORT/v1/chat/completions"
fi

if want tollgate; then
  # A fresh SQLite database in the temp dir; nothing from the caller's Tollgate setup is used.
  unset TOLLGATE_CONFIG TOLLGATE_DATABASE_URL TOLLGATE_MASTER_KEY TOLLGATE_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_ENDPOINT
  if [ "${TRACING:-0}" = 1 ]; then export TOLLGATE_OTLP_ENDPOINT="http://$STANDIN"; fi
  if [ "${REDIS:-0}" = 1 ]; then
    export TOLLGATE_REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}" TOLLGATE_REDIS_PREFIX="tollgate-load-$$:"
    echo "load.sh: REDIS=1: shared state in $TOLLGATE_REDIS_URL (prefix $TOLLGATE_REDIS_PREFIX)"
  else
    unset TOLLGATE_REDIS_URL
  fi
  export TOLLGATE_DATA_DIR="$WORK/data"
  export TOLLGATE_GATEWAY_LISTEN="$HOST:$TG_GATEWAY_PORT"
  export TOLLGATE_MANAGEMENT_LISTEN="$HOST:$TG_MANAGEMENT_PORT"
  export TOLLGATE_METRICS_LISTEN="$HOST:$TG_METRICS_PORT"
  export TOLLGATE_LOG="${TOLLGATE_LOG:-warn}"
  mkdir -p "$TOLLGATE_DATA_DIR"
  [ -n "${PAGE:-}" ] && sqlite3 "$TOLLGATE_DATA_DIR/tollgate.db" "PRAGMA page_size=$PAGE; PRAGMA journal_mode=WAL;" >/dev/null
  created=$("$TG_BIN" tenant create --name load --json 2>"$WORK/tenant.log") \
    || { cat "$WORK/tenant.log" >&2; die "tollgate tenant create failed"; }
  KEY=$(printf '%s\n' "$created" | sed -n 's/.*"key"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' | head -n1)
  [ -n "$KEY" ] || die "could not read the key from: $created"

  start tollgate "$TG_BIN" serve
  MGMT="http://$HOST:$TG_MANAGEMENT_PORT"
  wait_http tollgate "$LAST_PID" "$MGMT/status"
  code=$(curl -s -o "$WORK/provider.json" -w '%{http_code}' --max-time 10 -X PUT \
    -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    --data "{\"api_key\":\"sk-load\",\"base_url\":\"http://$STANDIN\"}" "$MGMT/v1/providers/openai" || true)
  case "$code" in 200 | 201) ;; *) cat "$WORK/provider.json" >&2 2>/dev/null || true; die "PUT /v1/providers/openai answered $code" ;; esac
  URL[tollgate]="http://$HOST:$TG_GATEWAY_PORT/v1/chat/completions"
  if [ "${CHECKS:-0}" = 1 ]; then
    mgmt_call() { # METHOD PATH BODY
      code=$(curl -s -o "$WORK/mgmt.json" -w '%{http_code}' --max-time 10 -X "$1" -H "Authorization: Bearer $KEY" \
        -H 'Content-Type: application/json' --data "$3" "$MGMT$2" || true)
      case "$code" in 2??) ;; *) cat "$WORK/mgmt.json" >&2 2>/dev/null || true; die "$1 $2 answered $code" ;; esac
    }
    policy_json=$(python3 -c 'import json,sys; print(json.dumps({"name":"load","enabled":True,"yaml":open(sys.argv[1]).read()}))' \
      benches/load-policy.yaml)
    mgmt_call POST /v1/policies "$policy_json"
    key_id=$(curl -s -H "Authorization: Bearer $KEY" "$MGMT/v1/keys" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
    mgmt_call PATCH "/v1/keys/$key_id/limits" '{"rpmLimit": 1000000000, "tpmLimit": 1000000000000}'
    mgmt_call POST /v1/budgets '{"scope": "tenant", "amountUsd": 1000000, "period": "monthly"}'
    echo "load.sh: CHECKS=1: policy, key limits and a tenant budget are on"
  fi
fi

for t in $TARGETS; do check_chat "$t" "${URL[$t]}"; done

# ---- load -----------------------------------------------------------------------------------
# parse_wrk FILE -> "rps p50_ms p99_ms non2xx socket_errors requests p999_ms"
# The percentiles are post_chat.lua's LOAD_US line: exact microseconds from wrk's histogram
# (wrk's printed table rounds to two decimals of its unit and has no p99.9).
parse_wrk() {
  awk '
    $1 == "LOAD_US" { for (i = 2; i <= NF; i++) { split($i, kv, "="); us[kv[1]] = kv[2] } }
    /^Requests\/sec:/ { rps = $2 }
    /Non-2xx or 3xx responses:/ { non2xx = $5 }
    /Socket errors:/ { gsub(",", ""); err = $4 + $6 + $8 + $10 }
    / requests in / { n = $1 }
    END {
      if (rps == "" || !("p50" in us)) exit 1
      printf "%s %.3f %.3f %d %d %d %.3f\n", rps, us["p50"] / 1000, us["p99"] / 1000, non2xx, err, n, us["p999"] / 1000
    }' "$1"
}

# parse_oha FILE -> "rps p50_ms p99_ms p999_ms non2xx errors requests" from oha's JSON
# (latencies in seconds, corrected for coordinated omission with --latency-correction).
parse_oha() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = r["latencyPercentiles"]
codes = r.get("statusCodeDistribution") or {}
errors = sum((r.get("errorDistribution") or {}).values())
ok = sum(n for c, n in codes.items() if c.startswith("2"))
print("%.1f %.3f %.3f %.3f %d %d %d" % (r["summary"]["requestsPerSec"], p["p50"] * 1e3, p["p99"] * 1e3,
      p["p99.9"] * 1e3, sum(codes.values()) - ok, errors, sum(codes.values()) + errors))
PY
}

# CPU accounting (Linux /proc, clock ticks) to detect other work during a measured run:
# cpu_ticks -> "busy total" for the whole machine: user + nice + system + irq + softirq + steal
# (steal: the host gave the CPU to someone else). With tick-based accounting, irq/softirq ticks
# (the loopback traffic) are also charged to the task that was running, so they match our_ticks.
# our_ticks -> CPU used by the servers we started plus our reaped children (wrk or oha, via
# `timeout`). The difference is other work on the machine, give or take a few % of rounding.
cpu_ticks() { awk '$1 == "cpu" { b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6; exit }' /proc/stat; }
our_ticks() {
  local total=0 pid f
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do
    # fields after "pid (comm) ": 12 utime, 13 stime
    f=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
    total=$((total + $(awk '{ print $12 + $13 }' <<<"$f")))
  done
  # this shell: 14 cutime, 15 cstime (children that were waited for, i.e. wrk once it has finished)
  f=$(sed 's/^.*) //' "/proc/$$/stat")
  echo $((total + $(awk '{ print $14 + $15 }' <<<"$f")))
}
# other_cpu BEFORE AFTER -> % of all CPU time used by processes we did not start
other_cpu() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    split(a, x, " "); split(b, y, " "); d = y[2] - x[2]
    o = (y[1] - x[1]) - (y[3] - x[3]); if (o < 0) o = 0
    printf "%.1f", (d > 0 ? 100 * o / d : 0) }'
}

# proc_ticks PID -> user + system clock ticks the process has used so far
proc_ticks() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{ print $12 + $13 }'; }
# The process serving a target (the stand-in serves `direct` itself).
server_of() { case "$1" in direct) echo standin ;; *) echo "$1" ;; esac; }
# us_per_req TICKS REQUESTS -> CPU microseconds per request
us_per_req() { awk -v t="$1" -v n="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", (n > 0 ? t * 1e6 / hz / n : 0) }'; }

run_wrk() { # run_wrk OUT DURATION URL
  local out=$1 dur=$2 url=$3
  KEY="$KEY" timeout --signal=INT --kill-after=5 $(($(dur_secs "$dur") + 30)) \
    wrk -t"$WRK_THREADS" -c"$CONC" -d"$dur" -s "$LUA" "$url" >"$out" 2>&1 \
    || { cat "$out" >&2; die "wrk failed against $url"; }
}

# Open loop: oha sends RATE requests per second on schedule whatever the answers take, and
# --latency-correction measures each from its scheduled time, so a stall shows in the
# percentiles instead of just pausing the load (wrk's coordinated omission). -w lets the
# requests in flight at the deadline finish instead of counting them as errors.
run_oha() { # run_oha OUT RATE DURATION URL
  local out=$1 rate=$2 dur=$3 url=$4
  timeout --signal=INT --kill-after=5 $(($(dur_secs "$dur") + 30)) \
    "$OHA" --no-tui --output-format json -z "$dur" -w -q "$rate" --latency-correction -c "$RATE_CONC" \
    -m POST -H 'Content-Type: application/json' -H "Authorization: Bearer $KEY" -d "$CHAT_BODY" "$url" \
    >"$out" 2>"$out.err" || { cat "$out.err" >&2; die "oha failed against $url"; }
}

# thread_ticks PID -> one line per thread name: "name ticks" (user + system), names with their
# spaces as underscores; threads of one name (Pingora's workers) are summed.
thread_ticks() {
  local t
  for t in /proc/"$1"/task/*; do
    printf '%s %s\n' "$(tr ' ' '_' <"$t/comm")" "$(sed 's/^.*) //' "$t/stat" 2>/dev/null | awk '{ print $12 + $13 }')"
  done 2>/dev/null | awk '$2 != "" { a[$1] += $2 } END { for (k in a) print k, a[k] }' | sort
}
# by_thread BEFORE AFTER REQUESTS -> "name us, name us ..." CPU per request of each thread name
# that used at least 0.5 us a request, largest first
by_thread() {
  join <(echo "$1") <(echo "$2") | awk -v n="$3" -v hz="$(getconf CLK_TCK)" '
    n > 0 { us = ($3 - $2) * 1e6 / hz / n; if (us >= 0.5) printf "%.1f %s\n", us, $1 }' |
    sort -rg | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $2, $1 } END { print "" }'
}

# measure TARGET CMD...: runs CMD (a measured run) and sets CPU_TICKS (the target's server
# process during it), OTHER (% of the machine's CPU used by processes we did not start) and
# THREADS0/THREADS1 (its threads' ticks before and after, for `by_thread`).
measure() {
  local srv=${PID_OF[$(server_of "$1")]} before after srv0
  shift
  before="$(cpu_ticks) $(our_ticks)"
  srv0=$(proc_ticks "$srv")
  THREADS0=$(thread_ticks "$srv")
  "$@"
  CPU_TICKS=$(($(proc_ticks "$srv") - srv0))
  THREADS1=$(thread_ticks "$srv")
  after="$(cpu_ticks) $(our_ticks)"
  OTHER=$(other_cpu "$before" "$after")
}

if [ "$FLAT" = 1 ]; then
  echo "load.sh: $(nproc) CPUs; flat out: wrk -t$WRK_THREADS -c$CONC -d$DURATION (warm-up $WARMUP) x $ROUNDS round(s); targets: $TARGETS"
fi
if [ -n "$RATES" ]; then
  echo "load.sh: fixed rate: oha -q RATE --latency-correction -c$RATE_CONC -z$DURATION at RATES=\"$RATES\" req/s (warm-up $WARMUP at the rate) x $ROUNDS round(s)"
fi
# Anything else busy on the machine (a cargo build...) skews every figure; say so.
c0=$(cpu_ticks)
sleep 1
c1=$(cpu_ticks)
busy=$(awk -v a="$c0" -v b="$c1" 'BEGIN { split(a, x, " "); split(b, y, " "); d = y[2] - x[2]; printf "%.0f", (d > 0 ? 100 * (y[1] - x[1]) / d : 0) }')
if [ "$busy" -gt 10 ]; then
  echo "load.sh: WARNING: the CPUs are already ${busy}% busy before the run; other work competes with the benchmark" >&2
fi
echo "load.sh: load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
# raw:       target rps p50 p99 non2xx sockerr requests p999 other% round cpu_us/req
# rate_raw:  target rate rps p50 p99 p999 non2xx errors requests other% round cpu_us/req
: >"$WORK/raw"
: >"$WORK/rate_raw"
for r in $(seq "$ROUNDS"); do
  if [ "$FLAT" = 1 ]; then
    for t in $TARGETS; do
      run_wrk "$WORK/$t.warmup.$r" "$WARMUP" "${URL[$t]}"
      measure "$t" run_wrk "$WORK/$t.wrk.$r" "$DURATION" "${URL[$t]}"
      line=$(parse_wrk "$WORK/$t.wrk.$r") || { cat "$WORK/$t.wrk.$r" >&2; die "could not parse wrk output for $t"; }
      read -r rps p50 p99 non2xx err n p999 <<<"$line"
      cpu=$(us_per_req "$CPU_TICKS" "$n")
      echo "$t $line $OTHER $r $cpu" >>"$WORK/raw"
      printf '  round %d  %-9s %10s req/s  p50 %8s ms  p99 %8s ms  p99.9 %8s ms  %7s us CPU/req  (%s requests, %s non-2xx, %s socket errors, other CPU %s%%)\n' \
        "$r" "$t" "$rps" "$p50" "$p99" "$p999" "$cpu" "$n" "$non2xx" "$err" "$OTHER"
      printf '           %-9s CPU us/req by thread: %s\n' "$t" "$(by_thread "$THREADS0" "$THREADS1" "$n")"
    done
  fi
  # Each rate runs every target back to back, so their difference is measured minutes apart at most.
  for q in $RATES; do
    for t in $TARGETS; do
      run_oha "$WORK/$t.oha-warmup.$q.$r" "$q" "$WARMUP" "${URL[$t]}"
      measure "$t" run_oha "$WORK/$t.oha.$q.$r" "$q" "$DURATION" "${URL[$t]}"
      line=$(parse_oha "$WORK/$t.oha.$q.$r") || { cat "$WORK/$t.oha.$q.$r" >&2; die "could not parse oha output for $t"; }
      read -r rps p50 p99 p999 non2xx err n <<<"$line"
      cpu=$(us_per_req "$CPU_TICKS" "$n")
      echo "$t $q $line $OTHER $r $cpu" >>"$WORK/rate_raw"
      printf '  round %d  %-9s at %5s req/s: %8s req/s  p50 %7s ms  p99 %7s ms  p99.9 %7s ms  %7s us CPU/req  (%s requests, %s non-2xx, %s errors, other CPU %s%%)\n' \
        "$r" "$t" "$q" "$rps" "$p50" "$p99" "$p999" "$cpu" "$n" "$non2xx" "$err" "$OTHER"
    done
  done
done

# ---- report ---------------------------------------------------------------------------------
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
col() { awk -v t="$1" -v c="$2" '$1 == t { print $c }' "$WORK/raw"; }
sum() { awk -v t="$1" -v c="$2" '$1 == t { s += $c } END { print s + 0 }' "$WORK/raw"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else printf "-" }'; }
declare -A RPS P50 P99 P999 BAD ERR OTHER CPU
for t in $TARGETS; do
  BAD[$t]=0 ERR[$t]=0 OTHER[$t]=0
done

if [ "$FLAT" = 1 ]; then
  for t in $TARGETS; do
    RPS[$t]=$(col "$t" 2 | median)
    P50[$t]=$(col "$t" 3 | median)
    P99[$t]=$(col "$t" 4 | median)
    P999[$t]=$(col "$t" 8 | median)
    BAD[$t]=$(sum "$t" 5)
    ERR[$t]=$(sum "$t" 6)
    OTHER[$t]=$(col "$t" 9 | sort -g | tail -n1)
    CPU[$t]=$(col "$t" 11 | median)
  done

  echo
  echo "flat out: wrk -t$WRK_THREADS -c$CONC, closed loop$([ "$ROUNDS" -gt 1 ] && echo ", medians of $ROUNDS rounds")"
  printf '%-10s %11s %9s %9s %9s %10s %8s %8s %7s   %-9s %-9s %-9s\n' target req/s p50_ms p99_ms p99.9_ms cpu_us/req non-2xx sockerr other% \
    "rps/dir" "p50/dir" "p99/dir"
  for t in $TARGETS; do
    if want direct; then
      r1=$(ratio "${RPS[$t]}" "${RPS[direct]}")
      r2=$(ratio "${P50[$t]}" "${P50[direct]}")
      r3=$(ratio "${P99[$t]}" "${P99[direct]}")
    else
      r1=- r2=- r3=-
    fi
    printf '%-10s %11.0f %9.3f %9.3f %9.3f %10s %8d %8d %7s   %-9s %-9s %-9s\n' "$t" "${RPS[$t]}" "${P50[$t]}" "${P99[$t]}" "${P999[$t]}" \
      "${CPU[$t]}" "${BAD[$t]}" "${ERR[$t]}" "${OTHER[$t]}" "$r1" "$r2" "$r3"
  done

  if want bare && want tollgate; then
    echo
    awk -v tr="${RPS[tollgate]}" -v br="${RPS[bare]}" -v t50="${P50[tollgate]}" -v b50="${P50[bare]}" \
      -v t99="${P99[tollgate]}" -v b99="${P99[bare]}" -v t999="${P999[tollgate]}" -v b999="${P999[bare]}" \
      -v tc="${CPU[tollgate]}" -v bc="${CPU[bare]}" -v conc="$CONC" 'BEGIN {
        printf "HEADLINE Tollgate vs bare Pingora (%s): throughput %.2fx (%+.1f%%), p50 %.2fx (%+.3f ms), p99 %.2fx (%+.3f ms), p99.9 %+.3f ms\n",
          (conc == 1 ? "single client, c=1" : "flat out, c=" conc), tr / br, (tr / br - 1) * 100, t50 / b50, t50 - b50, t99 / b99, t99 - b99, t999 - b999
        printf "CPU per request in the proxy process: Tollgate %.1f us, bare Pingora %.1f us (Tollgate adds %.1f us)\n", tc, bc, tc - bc
      }'
    if [ "$ROUNDS" -gt 1 ]; then
      # The same figures within each round (the two runs are minutes apart at most), and their median.
      awk '$1 == "bare" { b[$10] = $2; b50[$10] = $3; b99[$10] = $4 } $1 == "tollgate" { t[$10] = $2; t50[$10] = $3; t99[$10] = $4 }
        END { for (r in t) if (b[r] > 0) print r, t[r] / b[r], t50[r] - b50[r], t99[r] - b99[r] }' "$WORK/raw" | sort -n >"$WORK/ratios"
      printf 'per-round Tollgate/bare throughput: %s (median %.2fx)\n' \
        "$(awk '{ printf "%s%.2fx", (NR > 1 ? " " : ""), $2 }' "$WORK/ratios")" "$(awk '{ print $2 }' "$WORK/ratios" | median)"
      printf 'per-round added p50: %s ms (median %+.3f); added p99: %s ms (median %+.3f)\n' \
        "$(awk '{ printf "%s%+.3f", (NR > 1 ? " " : ""), $3 }' "$WORK/ratios")" "$(awk '{ print $3 }' "$WORK/ratios" | median)" \
        "$(awk '{ printf "%s%+.3f", (NR > 1 ? " " : ""), $4 }' "$WORK/ratios")" "$(awk '{ print $4 }' "$WORK/ratios" | median)"
    fi
  fi
fi

# Fixed-rate report: per rate, medians over rounds; what Tollgate adds is the median of the
# per-round differences (each round runs bare and Tollgate back to back at the same rate).
rate_col() { awk -v t="$1" -v q="$2" -v c="$3" '$1 == t && $2 == q { print $c }' "$WORK/rate_raw"; }
declare -A RATE_LINE
short_rate=0
if [ -n "$RATES" ]; then
  echo
  echo "fixed rate: oha -q RATE --latency-correction -c$RATE_CONC, open loop$([ "$ROUNDS" -gt 1 ] && echo ", medians of $ROUNDS rounds")"
  printf '%-7s %-10s %9s %9s %9s %9s %10s %8s %8s %7s\n' rate target req/s p50_ms p99_ms p99.9_ms cpu_us/req non-2xx errors other%
  for q in $RATES; do
    for t in $TARGETS; do
      rps=$(rate_col "$t" "$q" 3 | median)
      p50=$(rate_col "$t" "$q" 4 | median)
      p99=$(rate_col "$t" "$q" 5 | median)
      p999=$(rate_col "$t" "$q" 6 | median)
      bad=$(rate_col "$t" "$q" 7 | awk '{ s += $1 } END { print s + 0 }')
      err=$(rate_col "$t" "$q" 8 | awk '{ s += $1 } END { print s + 0 }')
      other=$(rate_col "$t" "$q" 10 | sort -g | tail -n1)
      cpu=$(rate_col "$t" "$q" 12 | median)
      BAD[$t]=$((BAD[$t] + bad))
      ERR[$t]=$((ERR[$t] + err))
      OTHER[$t]=$(printf '%s\n%s\n' "${OTHER[$t]}" "$other" | sort -g | tail -n1)
      RATE_LINE[$t.$q]="$rps $p50 $p99 $p999"
      printf '%-7s %-10s %9.0f %9.3f %9.3f %9.3f %10s %8d %8d %7s\n' "$q" "$t" "$rps" "$p50" "$p99" "$p999" "$cpu" "$bad" "$err" "$other"
      # A target that cannot keep up measures its queue, not its latency at this rate.
      if awk -v a="$rps" -v q="$q" 'BEGIN { exit !(a < 0.95 * q) }'; then
        echo "load.sh: WARNING: $t sustained only $rps of $q req/s; its latencies at this rate include queueing" >&2
        short_rate=1
      fi
    done
  done
  if want bare && want tollgate; then
    echo
    for q in $RATES; do
      awk -v q="$q" '$2 == q && $1 == "bare" { b50[$11] = $4; b99[$11] = $5; b999[$11] = $6; bc[$11] = $12 }
        $2 == q && $1 == "tollgate" { t50[$11] = $4; t99[$11] = $5; t999[$11] = $6; tc[$11] = $12 }
        END { for (r in t50) if (r in b50) print t50[r] - b50[r], t99[r] - b99[r], t999[r] - b999[r], tc[r] - bc[r] }' \
        "$WORK/rate_raw" >"$WORK/added.$q"
      printf 'ADDED by Tollgate over bare Pingora at %s req/s: p50 %+.3f ms, p99 %+.3f ms, p99.9 %+.3f ms, CPU %+.1f us/req\n' "$q" \
        "$(cut -d' ' -f1 "$WORK/added.$q" | median)" "$(cut -d' ' -f2 "$WORK/added.$q" | median)" \
        "$(cut -d' ' -f3 "$WORK/added.$q" | median)" "$(cut -d' ' -f4 "$WORK/added.$q" | median)"
    done
  fi
fi

if [ -n "$RESULTS" ]; then
  {
    printf 'target\tmode\treq_s\tp50_ms\tp99_ms\tp999_ms\tnon2xx\tsocket_errors\tmax_other_cpu_pct\n'
    if [ "$FLAT" = 1 ]; then
      for t in $TARGETS; do
        printf '%s\tc=%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$CONC" "${RPS[$t]}" "${P50[$t]}" "${P99[$t]}" "${P999[$t]}" \
          "$(sum "$t" 5)" "$(sum "$t" 6)" "$(col "$t" 9 | sort -g | tail -n1)"
      done
    fi
    for q in $RATES; do
      for t in $TARGETS; do
        read -r rps p50 p99 p999 <<<"${RATE_LINE[$t.$q]}"
        printf '%s\tq=%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$q" "$rps" "$p50" "$p99" "$p999" \
          "$(rate_col "$t" "$q" 7 | awk '{ s += $1 } END { print s + 0 }')" \
          "$(rate_col "$t" "$q" 8 | awk '{ s += $1 } END { print s + 0 }')" "$(rate_col "$t" "$q" 10 | sort -g | tail -n1)"
      done
    done
  } >"$RESULTS"
  echo "load.sh: medians written to $RESULTS"
fi

failed=0
for t in $TARGETS; do
  if [ "${BAD[$t]}" -gt 0 ]; then
    echo "load.sh: WARNING: $t answered ${BAD[$t]} non-2xx responses; its figures are not comparable" >&2
    failed=1
  fi
  if awk -v o="${OTHER[$t]}" 'BEGIN { exit !(o > 10) }'; then
    echo "load.sh: WARNING: other processes used up to ${OTHER[$t]}% of the CPU during the $t runs; rerun on a quiet machine" >&2
  fi
done
[ "$short_rate" = 0 ] || echo "load.sh: WARNING: some fixed-rate runs fell short of their rate (see above)" >&2
echo "load.sh: load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$failed"
