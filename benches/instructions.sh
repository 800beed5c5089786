#!/usr/bin/env bash
# Instructions a request costs, counted by valgrind's callgrind: a figure that does not move with
# the VM's noise (the same binary and inputs give the same count, whatever else the machine does),
# for comparing two builds where wrk's ratios overlap. Runs `tollgate serve` under callgrind in
# front of the stand-in upstream (benches/standin_upstream.rs), warms up, zeroes the counters,
# sends N chat completions one after another on one keep-alive connection, and prints the
# instructions per request of the whole process (request path, receipt writer, journal applier and
# the background services alike) and the top functions.
#
#   benches/instructions.sh                        # plain: a signed receipt per request
#   CHECKS=1 benches/instructions.sh               # every check on (benches/load-policy.yaml)
#   TOLLGATE_BIN=/other/build/tollgate benches/instructions.sh   # another build, same inputs
#
# Knobs: N [2000], WARM [300], TOP [25] (functions listed, by their own instructions), KEEP=1 keeps the work dir.
# Needs valgrind and the release builds of `tollgate` and `--example standin_upstream`.
set -euo pipefail
cd "$(dirname "$0")/.."
TG_BIN=${TOLLGATE_BIN:-target/release/tollgate}
STANDIN_BIN=${STANDIN_BIN:-target/release/examples/standin_upstream}
N=${N:-2000} WARM=${WARM:-300} TOP=${TOP:-25}
HOST=127.0.0.1 STANDIN_PORT=${STANDIN_PORT:-18191} GW=${TG_GATEWAY_PORT:-18193} MG=${TG_MANAGEMENT_PORT:-18194}
for b in "$TG_BIN" "$STANDIN_BIN"; do [ -x "$b" ] || { echo "missing $b (cargo build --release --bin tollgate --example standin_upstream)" >&2; exit 2; }; done
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install -y valgrind)" >&2; exit 2; }
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"; }
trap cleanup EXIT

wait_http() { for _ in $(seq 600); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; echo "no answer from $1" >&2; exit 1; }

"$STANDIN_BIN" "$HOST:$STANDIN_PORT" >"$WORK/standin.log" 2>&1 &
PIDS+=($!)
wait_http "http://$HOST:$STANDIN_PORT/v1/models"

unset TOLLGATE_CONFIG TOLLGATE_DATABASE_URL TOLLGATE_MASTER_KEY TOLLGATE_OTLP_ENDPOINT TOLLGATE_REDIS_URL
export TOLLGATE_DATA_DIR="$WORK/data" TOLLGATE_GATEWAY_LISTEN="$HOST:$GW" TOLLGATE_MANAGEMENT_LISTEN="$HOST:$MG" \
       TOLLGATE_METRICS_LISTEN="$HOST:${TG_METRICS_PORT:-18195}" TOLLGATE_LOG=warn
mkdir -p "$TOLLGATE_DATA_DIR"
KEY=$("$TG_BIN" tenant create --name calls --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.out" --dump-instr=no \
  "$TG_BIN" serve >"$WORK/tollgate.log" 2>&1 &
VG=$!
PIDS+=("$VG")
MGMT="http://$HOST:$MG"
wait_http "$MGMT/status"
mgmt() { curl -sf -o /dev/null -X "$1" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' --data "$3" "$MGMT$2"; }
mgmt PUT /v1/providers/openai "{\"api_key\":\"sk-load\",\"base_url\":\"http://$HOST:$STANDIN_PORT\"}"
if [ "${CHECKS:-0}" = 1 ]; then
  mgmt POST /v1/policies "$(python3 -c 'import json,sys; print(json.dumps({"name":"load","enabled":True,"yaml":open(sys.argv[1]).read()}))' benches/load-policy.yaml)"
  kid=$(curl -s -H "Authorization: Bearer $KEY" "$MGMT/v1/keys" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
  mgmt PATCH "/v1/keys/$kid/limits" '{"rpmLimit": 1000000000, "tpmLimit": 1000000000000}'
  mgmt POST /v1/budgets '{"scope": "tenant", "amountUsd": 1000000, "period": "monthly"}'
fi

# One keep-alive client; `zero` between the warm-up and the measured requests, `dump` after.
python3 - "$HOST" "$GW" "$KEY" "$WARM" "$N" "$VG" <<'PY'
import http.client, json, subprocess, sys
host, port, key, warm, n, pid = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
head = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
conn = http.client.HTTPConnection(host, port, timeout=60)
def run(count):
    for _ in range(count):
        conn.request("POST", "/v1/chat/completions", body, head)
        r = conn.getresponse(); r.read()
        if r.status != 200:
            sys.exit(f"answer {r.status}")
run(warm)
subprocess.run(["callgrind_control", "--zero", pid], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
run(n)
subprocess.run(["callgrind_control", "--dump", pid], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
PY
out=$(ls -t "$WORK"/callgrind.out* | head -n1)
total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}')
echo "RESULT build=$TG_BIN checks=${CHECKS:-0} requests=$N instructions=$total per_request=$((total / N))"
callgrind_annotate "$out" 2>/dev/null | sed -n "/file:function/,+${TOP}p"
