//! Placement policies, one per file, each with a serde config whose defaults
//! are the paper's values and a doc page under `docs/policies/`.

pub mod atsmf;
pub mod none;
pub mod otf_ast;

use serde::{Deserialize, Serialize};

use crate::view::{Plan, View};

/// A placement policy.
///
/// Obligations: `plan` is deterministic given the sequence of views (no
/// clock, no OS randomness, no IO); it only uses what the view shows (no
/// knowledge of future requests); it may keep learned state between calls
/// (heat, prediction tables), and that state round-trips through
/// [`Policy::save_state`] / [`Policy::restore_state`] so a restarted engine
/// comes back warm.
pub trait Policy: Send {
    fn name(&self) -> &'static str;

    /// Called once at the end of every period with the view as of then.
    fn plan(&mut self, view: &View) -> Plan;

    /// True when every plan lists all the moves the policy wants now,
    /// including those it asked for earlier that have not started: the
    /// caller then shows it only the moves copying as in flight, keeps the
    /// queued moves the newest plan lists again (in their place in the
    /// queue) and drops the others as stale
    /// (`tierd_core::placement::stale_reason`, `docs/placement.md`).
    /// Default false: queued moves stay until they start.
    fn restates_plan(&self) -> bool {
        false
    }

    /// Learned state as JSON (empty object for stateless policies).
    fn save_state(&self) -> serde_json::Value {
        serde_json::Value::Object(serde_json::Map::new())
    }

    /// Restores what [`Policy::save_state`] produced; `Err` says what is wrong
    /// with it (the caller refuses to start rather than guess).
    fn restore_state(&mut self, _state: &serde_json::Value) -> Result<(), String> {
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    None,
    OtfAst,
    Atsmf,
}

impl PolicyKind {
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::None => "none",
            PolicyKind::OtfAst => "otf-ast",
            PolicyKind::Atsmf => "atsmf",
        }
    }
}

/// A policy with its settings, as TOML/JSON: `{ kind = "otf-ast", ... }`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum PolicyConfig {
    None,
    OtfAst(otf_ast::OtfAstConfig),
    Atsmf(atsmf::AtsmfConfig),
}

impl PolicyConfig {
    /// The policy's paper defaults.
    pub fn default_for(kind: PolicyKind) -> PolicyConfig {
        match kind {
            PolicyKind::None => PolicyConfig::None,
            PolicyKind::OtfAst => PolicyConfig::OtfAst(otf_ast::OtfAstConfig::default()),
            PolicyKind::Atsmf => PolicyConfig::Atsmf(atsmf::AtsmfConfig::default()),
        }
    }

    pub fn kind(&self) -> PolicyKind {
        match self {
            PolicyConfig::None => PolicyKind::None,
            PolicyConfig::OtfAst(_) => PolicyKind::OtfAst,
            PolicyConfig::Atsmf(_) => PolicyKind::Atsmf,
        }
    }
}

pub fn build_policy(config: &PolicyConfig) -> Box<dyn Policy> {
    match config {
        PolicyConfig::None => Box::new(none::NonePolicy),
        PolicyConfig::OtfAst(config) => Box::new(otf_ast::OtfAst::new(config.clone())),
        PolicyConfig::Atsmf(config) => Box::new(atsmf::Atsmf::new(config.clone())),
    }
}
