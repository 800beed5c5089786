//! Per-request cost of the checks: the whole pipeline (allowlist, policy, rate limit, budget,
//! guardrails, cache) on a representative policy, request side and completion, in memory.
//! `cargo bench --bench pipeline`

use std::collections::HashMap;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;
use tollgate::checks::budget::Ledger;
use tollgate::checks::cache::AnswerCache;
use tollgate::checks::pipeline::UpstreamOutcome;
use tollgate::checks::pipeline::{Ctx, Exchange, Outcome, Pipeline};
use tollgate::checks::policy::{validate, CompiledPolicy, TenantPolicy};
use tollgate::config::Config;
use tollgate::providers::pricing::Pricing;
use tollgate::providers::Usage;
use tollgate::snapshot::Snapshot;

const POLICY: &str = r#"
rules:
  - id: big-models-need-approval
    match: {model: ["gpt-4*", "o1*"], keyClass: [interactive], maxTokensAbove: 4000}
    action: deny
  - id: no-shell
    match: {kind: tool_call, tool: ["shell.*"]}
    action: deny
guardrails:
  applyTo: [request, response]
  pii: {email: redact, phone: redact, credit_card: block, iban: redact, ssn: block, secret: block}
  promptInjection: block
  patterns:
    - {pattern: "(?i)project\\s+nightingale", action: block, category: confidential}
allowlist:
  models: ["gpt-4o-mini", "gpt-4o", "claude-*"]
  providers: [openai, anthropic]
cache: {mode: exact, ttlSeconds: 600}
"#;

fn snapshot() -> Arc<Snapshot> {
    let cfg = Arc::new(Config::defaults(&tollgate::providers::VOCABULARY));
    let pricing = Arc::new(Pricing::from_config(&cfg).unwrap());
    let doc = validate::parse_api(POLICY).unwrap();
    let compiled = Arc::new(CompiledPolicy::compile("bench", POLICY, doc).unwrap());
    let policies = HashMap::from([("t1".to_string(), Arc::new(TenantPolicy::merge(vec![compiled])))]);
    Arc::new(Snapshot::empty(cfg, pricing).with_policies(policies))
}

fn bench_pipeline(c: &mut Criterion) {
    let snap = snapshot();
    let checks = tollgate::checks::table(Arc::new(Ledger::new()), Arc::new(AnswerCache::new(64 << 20, 1 << 20)), None);
    let pipeline = Pipeline::new(checks);
    let body = json!({"model": "gpt-4o-mini", "max_tokens": 256, "messages": [
        {"role": "system", "content": "You are a helpful assistant for the support team of an online shop."},
        {"role": "user", "content": "My order 18273 has not arrived yet. It was shipped to Berlin last Tuesday; \
          can you tell me where it is and when I can expect it? Thanks, a long-time customer."}]});
    // A key with rate limits, so the rate-limit check reserves and settles too.
    let key = {
        let ex = Exchange::fixture_in(snap.clone(), json!({}));
        let mut record = ex.key.record.clone();
        record.rpm_limit = Some(1_000_000_000);
        record.tpm_limit = Some(1_000_000_000_000);
        Arc::new(tollgate::snapshot::KeyEntry::new(record, Default::default()))
    };
    c.bench_function("pipeline: request checks + completion, representative policy", |b| {
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            let mut body = body.clone();
            // A different question each time: every lookup is a cache miss, as for new traffic.
            body["messages"][1]["content"] = json!(format!("{} (ticket {i})", body["messages"][1]["content"]));
            let mut ex = Exchange::fixture_in(snap.clone(), body);
            ex.key = key.clone();
            let mut cx = Ctx::default();
            let _ = pipeline.on_request_now(&mut ex, &mut cx);
            let done = Outcome {
                ex: &ex,
                status: 200,
                upstream: UpstreamOutcome::Pass,
                usage: Some(Usage::plain(60, 40)),
                cost_usd: 0.00003,
                answer: None,
            };
            pipeline.on_complete(&done, &mut cx);
        })
    });
}

criterion_group!(benches, bench_pipeline);
criterion_main!(benches);
