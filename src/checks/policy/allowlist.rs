//! Allowlists merged across a tenant's policies: they intersect, so a value passes a dimension
//! only if every policy that lists the dimension allows it.

use super::document::AllowlistDoc;
use super::facts::Facts;
use crate::config::Glob;
use crate::receipts::Kind;

#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    /// One entry per policy that lists the dimension.
    models: Vec<Vec<Glob>>,
    providers: Vec<Vec<Glob>>,
    tools: Vec<Vec<Glob>>,
    betas: Vec<Vec<Glob>>,
}

impl Allowlist {
    pub fn add(&mut self, doc: &AllowlistDoc) {
        for (slot, list) in [
            (&mut self.models, &doc.models),
            (&mut self.providers, &doc.providers),
            (&mut self.tools, &doc.tools),
            (&mut self.betas, &doc.betas),
        ] {
            if let Some(l) = list {
                slot.push(l.clone());
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.models.is_empty() && self.providers.is_empty() && self.tools.is_empty() && self.betas.is_empty()
    }

    /// Why the request is outside the allowlist, or None when it passes. Model calls are held
    /// to `models` and `providers`; tool calls to `tools` (their "provider" is a tool server,
    /// which a list of model providers is not about).
    pub fn violation(&self, f: &Facts) -> Option<String> {
        let refused = |what: &str, v: &str| Some(format!("{what} `{v}` is not in the tenant's allowlist"));
        match f.kind {
            Kind::ModelCall => {
                if !passes(&self.models, f.model) {
                    return refused("model", f.model);
                }
                if !passes(&self.providers, f.provider) {
                    return refused("provider", f.provider);
                }
                // Every beta the request asks for must be allowed (none asked: nothing to refuse).
                if let Some(b) = f.betas.iter().find(|b| !passes(&self.betas, b)) {
                    return refused(crate::providers::BETA_HEADER, b);
                }
                None
            }
            Kind::ToolCall => {
                let tool = f.tool.unwrap_or(f.model);
                if !passes(&self.tools, tool) {
                    return refused("tool", tool);
                }
                None
            }
            // Never on the gateway: the management API's calls pass no allowlist.
            Kind::Admin => None,
        }
    }
}

fn passes(lists: &[Vec<Glob>], value: &str) -> bool {
    lists.iter().all(|l| l.iter().any(|g| g.matches(value)))
}
