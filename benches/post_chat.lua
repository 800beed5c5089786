-- wrk script for benches/load.sh: every request is the same small OpenAI chat completion.
-- The bearer key comes from the environment (KEY); the same request goes to every target.
wrk.method = "POST"
wrk.body = '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("KEY") or "sk-none")

-- Exact percentiles in microseconds for load.sh (wrk's own "Latency Distribution" rounds to
-- two decimals of its unit and stops at p99; the tail of a single-client run needs p99.9).
function done(summary, latency, requests)
  io.write(string.format("LOAD_US p50=%d p90=%d p99=%d p999=%d max=%d\n",
    latency:percentile(50.0), latency:percentile(90.0), latency:percentile(99.0),
    latency:percentile(99.9), latency.max))
end
