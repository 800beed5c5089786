-- wrk script for benches/load.sh: every request is the same small OpenAI chat completion.
-- The bearer key comes from the environment (KEY); the same request goes to every target.
wrk.method = "POST"
wrk.body = '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("KEY") or "sk-none")
