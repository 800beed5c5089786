//! `GUARDRAIL`: PII, secrets, prompt injection and custom patterns, on the request before it
//! leaves and on the answer before it reaches the client (streams included, event by event).

use std::sync::Arc;

use crate::checks::guardrail::{self, Direction, Finding, GuardAction, Guardrails, StreamScanner};
use crate::checks::pipeline::{Check, Ctx, Exchange, ResponsePiece, Verdict};
use crate::error::{ApiError, ErrorKind};
use crate::receipts::{CheckName, CheckResult, GuardEvent, Kind};
use crate::snapshot::Snapshot;

pub struct Guardrail;

/// The answer side's state for one request.
pub struct ResponseGuard {
    rails: Arc<Guardrails>,
    stream: StreamScanner,
    /// The answer is a tool call's JSON-RPC result, not a provider's answer.
    tool: bool,
}

fn record(cx: &mut Ctx, findings: &[Finding], direction: &'static str) {
    for f in findings {
        let result = match f.action {
            GuardAction::Block => "BLOCK",
            GuardAction::Redact => "REDACT",
            GuardAction::Flag => "FLAG",
            GuardAction::Off => continue,
        };
        crate::metrics::METRICS.guardrail_events.with_label_values(&[&f.category, result, direction]).inc();
        cx.events.push(GuardEvent { category: f.category.clone(), result, direction });
    }
}

fn categories(findings: &[Finding], action: GuardAction) -> String {
    let mut c: Vec<&str> = findings.iter().filter(|f| f.action == action).map(|f| f.category.as_str()).collect();
    c.sort_unstable();
    c.dedup();
    c.join(", ")
}

fn blocked(findings: &[Finding], what: &str) -> Verdict {
    Verdict::Block(
        CheckResult::Block,
        ApiError::new(
            ErrorKind::GuardrailBlocked,
            format!("{what} was blocked by a guardrail ({})", categories(findings, GuardAction::Block)),
        ),
    )
}

/// The verdict for a scan: block beats redact beats pass.
fn verdict(findings: &[Finding], is_blocked: bool, changed: bool, what: &str) -> Verdict {
    if is_blocked {
        blocked(findings, what)
    } else if changed {
        Verdict::Redact
    } else {
        Verdict::Pass(CheckResult::Pass)
    }
}

/// Arms the answer-side scan when the tenant's guardrails apply to answers; true when armed.
pub fn arm_answer_scan(snap: &Snapshot, tenant: &str, cx: &mut Ctx) -> bool {
    let policy = snap.policy(tenant);
    let Some(rails) = policy.guardrails().filter(|r| r.applies_to(Direction::Response)) else { return false };
    arm(rails, false, cx);
    true
}

fn arm(rails: &Arc<Guardrails>, tool: bool, cx: &mut Ctx) {
    cx.scan_answer = true;
    cx.keep(ResponseGuard { stream: rails.stream(), rails: rails.clone(), tool });
}

/// The request-side scan for a call that is not a model call but still sends text to the
/// provider (`POST /v1/responses/input_tokens`): redacts `body` in place (true when it did) or
/// refuses as a model call would. No receipt records it; the metrics count its findings.
pub fn scan_side_request(snap: &Snapshot, tenant: &str, body: &mut serde_json::Value) -> Result<bool, ApiError> {
    let policy = snap.policy(tenant);
    let Some(rails) = policy.guardrails().filter(|r| r.applies_to(Direction::Request)) else { return Ok(false) };
    let out = guardrail::apply_to_request_json(rails, body);
    record(&mut Ctx::default(), &out.findings, "request");
    match verdict(&out.findings, out.blocked, out.changed, "the request") {
        Verdict::Block(_, e) => Err(e),
        _ => Ok(out.changed),
    }
}

impl Check for Guardrail {
    fn name(&self) -> CheckName {
        CheckName::Guardrail
    }

    /// Applies when an enabled policy of the tenant has guardrails. Scans the request's text
    /// fields (redacting in place), and arms the answer-side scan when `applyTo` says so.
    fn on_request(&self, ex: &mut Exchange, cx: &mut Ctx) -> Verdict {
        let policy = ex.snap.policy(ex.tenant_id());
        let Some(rails) = policy.guardrails() else { return Verdict::Skip };
        if rails.applies_to(Direction::Response) {
            arm(rails, ex.kind == Kind::ToolCall, cx);
        }
        if !rails.applies_to(Direction::Request) {
            return Verdict::Skip;
        }
        if ex.kind == Kind::ToolCall {
            // A tool call's text is its `arguments`, whatever their shape.
            let out = guardrail::apply_to_tool_call(rails, ex.body.json());
            record(cx, &out.findings, "request");
            if out.changed {
                ex.body_changed = true;
            }
            return verdict(&out.findings, out.blocked, out.changed, "the tool call");
        }
        // The common clean body is read from its bytes; the tree is built only to report or redact.
        if ex.body.unparsed().is_some_and(|raw| guardrail::request_is_clean(rails, raw)) {
            return Verdict::Pass(CheckResult::Pass);
        }
        let out = guardrail::apply_to_request_json(rails, ex.body.json());
        record(cx, &out.findings, "request");
        if out.changed {
            ex.body_changed = true;
        }
        verdict(&out.findings, out.blocked, out.changed, "the request")
    }

    fn on_response(&self, piece: &mut ResponsePiece, cx: &mut Ctx) -> Verdict {
        let Some(guard) = cx.own::<ResponseGuard>() else { return Verdict::Skip };
        let (findings, is_blocked, changed) = match piece {
            ResponsePiece::Json(body) if guard.tool => {
                let Some(v) = body.try_json() else { return Verdict::Skip };
                let out = guardrail::apply_to_tool_result(&guard.rails, v);
                (out.findings, out.blocked, out.changed)
            }
            ResponsePiece::Json(body) => {
                if body.unparsed().is_some_and(|raw| guardrail::response_is_clean(&guard.rails, raw)) {
                    return Verdict::Pass(CheckResult::Pass);
                }
                // An answer that is not JSON has no text fields to check.
                let Some(v) = body.try_json() else { return Verdict::Skip };
                let out = guardrail::apply_to_response_json(&guard.rails, v);
                (out.findings, out.blocked, out.changed)
            }
            ResponsePiece::Delta { text, end } => {
                let out = if *end { guard.stream.finish() } else { guard.stream.push(text) };
                let changed = out.findings.iter().any(|f| f.action == GuardAction::Redact);
                **text = out.text;
                (out.findings, out.blocked, changed)
            }
        };
        record(cx, &findings, "response");
        verdict(&findings, is_blocked, changed, "the answer")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::fixtures::exchange;
    use serde_json::json;

    const RAILS: &str = "guardrails:\n  pii: {email: redact, credit_card: block}\n";

    #[test]
    fn redacts_the_request_in_place_and_records_the_event() {
        let mut ex =
            exchange(RAILS, json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "mail a@b.io"}]}));
        let mut cx = Ctx::default();
        assert!(matches!(Guardrail.on_request(&mut ex, &mut cx), Verdict::Redact));
        assert!(ex.body_changed);
        assert_eq!(ex.body.json()["messages"][0]["content"], "mail [REDACTED:EMAIL]");
        assert_eq!(cx.events, vec![GuardEvent { category: "email".into(), result: "REDACT", direction: "request" }]);
        assert!(cx.scan_answer, "applyTo defaults to both directions");
    }

    #[test]
    fn blocks_a_luhn_valid_card_but_not_an_invalid_one() {
        let body = |t: &str| json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": t}]});
        let mut ex = exchange(RAILS, body("pay 4111 1111 1111 1111"));
        match Guardrail.on_request(&mut ex, &mut Ctx::default()) {
            Verdict::Block(CheckResult::Block, e) => assert_eq!(e.kind, ErrorKind::GuardrailBlocked),
            other => panic!("{other:?}"),
        }
        let mut ex = exchange(RAILS, body("pay 4111 1111 1111 1112"));
        assert!(matches!(Guardrail.on_request(&mut ex, &mut Ctx::default()), Verdict::Pass(CheckResult::Pass)));
    }

    #[test]
    fn a_card_split_across_stream_deltas_never_leaves_in_clear() {
        let yaml = "guardrails:\n  applyTo: [response]\n  pii: {credit_card: redact}\n";
        let mut ex = exchange(yaml, json!({"model": "gpt-4o-mini", "messages": []}));
        let mut cx = Ctx::default();
        assert!(matches!(Guardrail.on_request(&mut ex, &mut cx), Verdict::Skip));
        let mut said = String::new();
        for (piece, end) in [("card 4111 1111", false), (" 1111 1111 ok", false), ("", true)] {
            let mut text = piece.to_string();
            let _ = Guardrail.on_response(&mut ResponsePiece::Delta { text: &mut text, end }, &mut cx);
            said.push_str(&text);
        }
        assert_eq!(said, "card [REDACTED:CREDIT_CARD] ok");
    }
}
