//! What rules and allowlists look at: one request's facts, gathered once by the checks.

/// What a policy is evaluated against: one request, as the gateway sees it.
#[derive(Debug, Clone)]
pub struct Facts<'a> {
    pub kind: crate::receipts::Kind,
    pub model: &'a str,
    pub provider: &'a str,
    /// Tool calls only.
    pub tool: Option<&'a str>,
    /// The Anthropic beta features the request asks for (`anthropic-beta`), each trimmed.
    pub betas: &'a [String],
    pub key_class: &'a str,
    pub role: &'a str,
    pub team_id: Option<&'a str>,
    pub team_name: Option<&'a str>,
    /// The request's `max_tokens` / `max_completion_tokens`, when it sets one.
    pub max_tokens: Option<u64>,
    pub prompt_tokens: u64,
    pub now: chrono::DateTime<chrono::Utc>,
}
