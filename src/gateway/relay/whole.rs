//! A non-streamed answer: held whole (up to a cap), read for usage, translated and checked,
//! and handed back as the ending; or a provider's error answer, in the gateway's envelope.

use bytes::Bytes;
use http::header::HeaderValue;
use pingora::proxy::Session;
use serde_json::Value;

use super::passthrough::{relay_passthrough, Piece};
use super::plan::{answer_fields, content_type, RelayPlan, Relayed, Translation};
use crate::checks::pipeline::UpstreamOutcome;
use crate::checks::pipeline::{Cached, JsonBody, ResponsePiece};
use crate::error::{ApiError, ErrorKind};
use crate::gateway::ending::Ending;
use crate::gateway::header;
use crate::gateway::responses;
use crate::providers::usage::{self, Usage};
use crate::receipts::CheckResult;
use crate::upstream::{UpstreamError, UpstreamResponse};

/// Non-streamed answers are held whole up to this size: their last byte waits for the receipt,
/// their usage is read from them, and answer-side checks see them before they leave. Larger
/// ones (big embedding batches) are relayed as they come and only their last chunk waits.
const WHOLE_BODY_CAP: usize = 16 << 20;

/// How much of a provider's error answer is read for its message.
const ERROR_BODY_CAP: usize = 64 << 10;

/// A provider's error answer, in the gateway's envelope: a 5xx becomes 502 `upstream_error`, a
/// 4xx keeps its status (and `Retry-After`); the provider's status and message are in `message`.
pub(super) async fn relay_refusal(mut resp: UpstreamResponse<'_>, plan: RelayPlan<'_>) -> Relayed {
    let status = resp.header().status.as_u16();
    let retry_after: Vec<(&'static str, String)> = ["retry-after", "retry-after-ms"]
        .into_iter()
        .filter_map(|h| Some((h, resp.header().headers.get(h)?.to_str().ok()?.to_string())))
        .collect();
    let body = resp.read_all(ERROR_BODY_CAP).await.unwrap_or_default();
    resp.release().await;
    let said = provider_message(&body);
    // A status the client's SDK acts on keeps its status; any other 5xx is our 502.
    let overloaded = plan.flavor.keeps_upstream_status(status);
    let kind = if status >= 500 && !overloaded { ErrorKind::UpstreamError } else { ErrorKind::ProviderRefused(status) };
    let message = match said {
        Some(m) => format!("{} answered {status}: {m}", plan.provider),
        None => format!("{} answered {status}", plan.provider),
    };
    let e = ApiError::new(kind, message).with_headers(retry_after);
    Relayed {
        status: e.status(),
        usage: None,
        outcome: UpstreamOutcome::Fail,
        captured: None,
        model: None,
        ending: Ending::error(&e, plan.flavor, plan.headers.to_vec()),
    }
}

/// The message of a provider's error body (`error.message` in OpenAI's and Anthropic's
/// envelopes, or a top-level `message`), else its first 500 characters of text.
fn provider_message(body: &[u8]) -> Option<String> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        let m = v.pointer("/error/message").or_else(|| v.get("message")).and_then(Value::as_str);
        if let Some(m) = m {
            return Some(m.chars().take(500).collect());
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    (!text.is_empty()).then(|| text.chars().take(500).collect())
}

/// A non-streamed answer: held whole (it is small), checked, and handed back as the ending.
pub(super) async fn relay_body(
    session: &mut Session,
    mut resp: UpstreamResponse<'_>,
    mut plan: RelayPlan<'_>,
) -> Relayed {
    let status = resp.header().status.as_u16();
    let mut out = Relayed::unfinished(status);
    let body = match read_whole(&mut resp).await {
        Ok(Read::Whole(body)) => body,
        Ok(Read::Large(kept)) => return relay_large_body(session, resp, plan, kept, out).await,
        Err(e) => {
            out.outcome = UpstreamOutcome::from_error(&e);
            log::warn!("upstream answer could not be read whole: {e}");
            let err = ApiError::new(ErrorKind::UpstreamError, format!("{}'s answer broke off", plan.provider));
            out.status = err.status();
            out.ending = Ending::error(&err, plan.flavor, plan.headers.to_vec());
            return out;
        }
    };
    out.outcome = UpstreamOutcome::Pass;
    out.usage = usage::from_json_bytes(plan.wire, &body);
    if let Some(claim) = plan.stored {
        responses::answer_ids(&body).iter().for_each(|id| claim(id));
    }
    let sent = match answer_as_sent(&mut plan, &mut out, body) {
        Ok(sent) => sent,
        Err(e) => {
            out.status = e.status();
            out.ending = Ending::error(&e, plan.flavor, plan.headers.to_vec());
            resp.release().await;
            return out;
        }
    };
    let mut fields = answer_fields(&resp, &plan);
    fields.insert(http::header::CONTENT_LENGTH, HeaderValue::from(sent.len()));
    let header = header::response(status, fields);
    if plan.capture_limit.is_some_and(|l| sent.len() <= l) {
        let content_type = match plan.translation {
            Some(_) => "application/json".to_string(),
            None => content_type(&resp),
        };
        out.captured =
            Some(Cached { status, content_type, body: sent.clone(), usage: Usage::default(), cost_usd: 0.0 });
    }
    resp.release().await;
    out.ending = Ending::Whole(Box::new(header), sent);
    out
}

/// An answer read whole, or the first chunks of one over [`WHOLE_BODY_CAP`].
enum Read {
    Whole(Bytes),
    Large(Vec<Bytes>),
}

async fn read_whole(resp: &mut UpstreamResponse<'_>) -> Result<Read, UpstreamError> {
    let mut kept: Vec<Bytes> = Vec::new();
    let mut kept_len = 0usize;
    while let Some(c) = resp.next_chunk().await? {
        kept_len += c.len();
        kept.push(c);
        if kept_len > WHOLE_BODY_CAP {
            return Ok(Read::Large(kept));
        }
    }
    Ok(Read::Whole(match kept.len() {
        1 => kept.pop().unwrap_or_default(),
        _ => Bytes::from(kept.concat()),
    }))
}

/// The answer as the client gets it: translated, and through the answer-side checks (which
/// may redact it). `Err` is what the client gets instead; an answer that cannot be translated
/// is the provider's failure.
fn answer_as_sent(plan: &mut RelayPlan<'_>, out: &mut Relayed, body: Bytes) -> Result<Bytes, ApiError> {
    let body = match plan.translation.as_ref().map(|t| translate_body(t, &body)) {
        None => body,
        Some(Ok(translated)) => translated,
        Some(Err(e)) => {
            out.outcome = UpstreamOutcome::Fail;
            return Err(e);
        }
    };
    if plan.read_model {
        out.model = usage::answer_model(&body);
    }
    if !plan.cx.scan_answer {
        return Ok(body);
    }
    // Checks read the bytes; a JSON tree is built only if one of them needs it (to redact).
    let mut answer = JsonBody::lazy(body.clone());
    plan.pipeline.on_response(&mut ResponsePiece::Json(&mut answer), plan.cx)?;
    let redacted = plan.cx.response_checks.iter().any(|c| c.result == CheckResult::Redact);
    Ok(match answer.built().filter(|_| redacted) {
        Some(v) => serde_json::to_vec(v).map(Bytes::from).unwrap_or(body),
        None => body,
    })
}

/// A non-streamed answer over [`WHOLE_BODY_CAP`]: relayed as it comes, its last chunk held back.
/// Its usage is not read (no provider reports usage in answers this size) and it is not cached.
async fn relay_large_body(
    session: &mut Session,
    resp: UpstreamResponse<'_>,
    plan: RelayPlan<'_>,
    kept: Vec<Bytes>,
    out: Relayed,
) -> Relayed {
    relay_passthrough(session, resp, &plan, kept, out, &mut Piece::Pass).await
}

/// A whole provider answer in OpenAI's shape; an answer that cannot be read is the provider's
/// failure (502), not the client's.
fn translate_body(t: &Translation, body: &[u8]) -> Result<Bytes, ApiError> {
    let broken = |why: String| {
        log::warn!("{} answer could not be translated: {why}", t.provider.name());
        ApiError::new(ErrorKind::UpstreamError, format!("{}'s answer could not be read: {why}", t.provider.name()))
    };
    let native: Value = serde_json::from_slice(body).map_err(|e| broken(e.to_string()))?;
    let answer = t.provider.to_chat(&native, &t.model, &t.id, t.created).map_err(|e| broken(e.to_string()))?;
    Ok(Bytes::from(serde_json::to_vec(&answer).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_messages_come_from_either_envelope_or_the_text() {
        let openai = br#"{"error":{"message":"model overloaded","type":"server_error"}}"#;
        let anthropic = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(provider_message(openai).as_deref(), Some("model overloaded"));
        assert_eq!(provider_message(anthropic).as_deref(), Some("Overloaded"));
        assert_eq!(provider_message(b"  bad gateway \n").as_deref(), Some("bad gateway"));
        assert_eq!(provider_message(b""), None);
        assert_eq!(provider_message(&[b'x'; 2000]).map(|m| m.len()), Some(500));
    }
}
