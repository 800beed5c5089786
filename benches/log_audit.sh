#!/usr/bin/env bash
# `tollgate log audit` over the 1 000 000-receipt log of `cargo bench --bench log` (issue 41):
# a server on a copy of that database, an auditor key, the first pass timed, then
# APPEND (default 5 000) receipts appended through the real append path and the second pass timed.
#
#   cargo build --release && cargo bench --bench log      # makes the database
#   bash benches/log_audit.sh                            # PASSES=3 repeats both passes
#
# TOLLGATE_BIN (default target/release/tollgate), LOG_DB (default
# <tmp>/tollgate-bench-log/log-1000000.db), APPEND, PASSES. The chain auditor is off
# (TOLLGATE_CHAIN_AUDIT_SECONDS=0) so it does not share the two cores with the audit.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TOLLGATE_BIN:-target/release/tollgate}
TMP=${TMPDIR:-/tmp}
SRC=${LOG_DB:-$TMP/tollgate-bench-log/log-1000000.db}
APPEND=${APPEND:-5000}
PASSES=${PASSES:-1}
BENCH=$(ls -t target/release/deps/log-* 2>/dev/null | grep -v '\.d$' | head -1)
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release" >&2; exit 1; }
[ -f "$SRC" ] || { echo "no $SRC: cargo bench --bench log" >&2; exit 1; }
[ -n "$BENCH" ] || { echo "no bench binary: cargo bench --bench log --no-run" >&2; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

for pass in $(seq 1 "$PASSES"); do
  WORK=$(mktemp -d "$TMP/tollgate-log-audit.XXXXXX")
  cp "$SRC" "$WORK/log.db"
  for x in -wal -shm; do [ -f "$SRC$x" ] && cp "$SRC$x" "$WORK/log.db$x"; done
  export TOLLGATE_DATA_DIR="$WORK/data" TOLLGATE_DATABASE_URL="sqlite://$WORK/log.db" TOLLGATE_LOG=warn
  export TOLLGATE_CHAIN_AUDIT_SECONDS=0
  mkdir -p "$TOLLGATE_DATA_DIR"
  TENANT=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT id FROM tenants WHERE name='bench-log'\").fetchone()[0])" "$WORK/log.db")
  GW=$(free_port); MG=$(free_port); ME=$(free_port)
  TOLLGATE_GATEWAY_LISTEN=127.0.0.1:$GW TOLLGATE_MANAGEMENT_LISTEN=127.0.0.1:$MG TOLLGATE_METRICS_LISTEN=127.0.0.1:$ME \
    "$BIN" serve >"$WORK/serve.log" 2>&1 &
  SERVER=$!
  trap 'kill $SERVER 2>/dev/null || true' EXIT
  until curl -fs "http://127.0.0.1:$MG/status" >/dev/null; do
    kill -0 $SERVER 2>/dev/null || { cat "$WORK/serve.log"; exit 1; }
    sleep 0.2
  done
  KEY=$("$BIN" key create --tenant "$TENANT" --role auditor --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
  until curl -fs -o /dev/null -H "authorization: Bearer $KEY" "http://127.0.0.1:$MG/v1/log/checkpoint"; do sleep 0.2; done
  SIZE=$(curl -fs -H "authorization: Bearer $KEY" "http://127.0.0.1:$MG/v1/log/checkpoint" | sed -n 2p)
  echo "pass $pass: server $BIN on a copy of $SRC (log size $SIZE), tenant $TENANT"
  audit() {
    /usr/bin/time -f "  wall %e s, auditor CPU %U s user + %S s sys, auditor max RSS %M KiB" \
      "$BIN" log audit --url "http://127.0.0.1:$MG" --key "$KEY" --state "$WORK/state"
  }
  echo " first audit:"; audit
  LOG_DB="$WORK/log.db" LOG_APPEND=$APPEND "$BENCH" | sed 's/^/  /'
  echo " second audit (after $APPEND new receipts):"; audit
  echo " third audit (nothing new):"; audit
  SERVER_HWM=$(grep VmHWM "/proc/$SERVER/status" | awk '{print $2}')
  echo " server peak RSS (VmHWM) ${SERVER_HWM} KiB"
  kill $SERVER; wait $SERVER 2>/dev/null || true
  trap - EXIT
  rm -rf "$WORK"
done
