//! `GUARDRAIL`: PII, secrets, prompt injection and custom patterns, on the request before it
//! leaves and on the answer before it reaches the client (streams included, event by event).

use std::sync::Arc;

use crate::error::{ApiError, ErrorKind};
use crate::guardrails::{self, Direction, Finding, GuardAction, Guardrails, StreamScanner};
use crate::pipeline::{Check, Ctx, Exchange, ResponsePiece, Verdict};
use crate::receipts::GuardEvent;

pub struct Guardrail;

/// The answer side's state for one request.
pub struct ResponseGuard {
    rails: Arc<Guardrails>,
    stream: StreamScanner,
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
        "BLOCK",
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
        Verdict::Pass("PASS")
    }
}

impl Check for Guardrail {
    fn name(&self) -> &'static str {
        "GUARDRAIL"
    }

    /// Applies when an enabled policy of the tenant has guardrails. Scans the request's text
    /// fields (redacting in place), and arms the answer-side scan when `applyTo` says so.
    fn on_request(&self, ex: &mut Exchange, cx: &mut Ctx) -> Verdict {
        let policy = ex.snap.policy(ex.tenant_id());
        let Some(rails) = policy.guardrails() else { return Verdict::Skip };
        if rails.applies_to(Direction::Response) {
            cx.scan_answer = true;
            cx.response_guard = Some(ResponseGuard { stream: rails.stream(), rails: rails.clone() });
        }
        if !rails.applies_to(Direction::Request) {
            return Verdict::Skip;
        }
        let out = guardrails::apply_to_request_json(rails, &mut ex.body);
        record(cx, &out.findings, "request");
        if out.changed {
            ex.body_changed = true;
        }
        verdict(&out.findings, out.blocked, out.changed, "the request")
    }

    fn on_response(&self, piece: &mut ResponsePiece, cx: &mut Ctx) -> Verdict {
        let Some(guard) = cx.response_guard.as_mut() else { return Verdict::Skip };
        let (findings, is_blocked, changed) = match piece {
            ResponsePiece::Json(v) => {
                let out = guardrails::apply_to_response_json(&guard.rails, v);
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
