//! `pgferry workflow replay --kind K`: re-runs the recorded instances of a built-in
//! code-first workflow against this binary's code, without side effects, and reports
//! divergences (exit status 3 when there are any). A binary cannot load a user's Rust
//! code, so users replay their own workflows with `pgferry_core::workflow::code::replay_kind`
//! from their own binary or test (docs/workflows.md, "Changing a running workflow").

use anyhow::Context;
use pgferry_core::db;
use pgferry_core::workflow::code::{examples, replay_kind};
use pgferry_core::workflow::Workflows;

#[derive(clap::Subcommand)]
pub enum WorkflowAction {
    /// Replay recorded instances of a kind against the current code; JSON report, exit
    /// status 3 on a divergence.
    Replay {
        /// A built-in code-first kind (see --list).
        #[arg(long, required_unless_present = "list")]
        kind: Option<String>,
        /// The newest this many instances.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// List the kinds this binary can replay.
        #[arg(long)]
        list: bool,
    },
}

/// Exit status of a replay that found divergences.
pub const DIVERGED: u8 = 3;

/// `require_url` exits with clap's usage error when no database URL was given (`--list`
/// needs none).
pub async fn run(
    url: Option<String>,
    action: WorkflowAction,
    require_url: fn(Option<String>) -> String,
) -> anyhow::Result<Option<u8>> {
    let WorkflowAction::Replay { kind, limit, list } = action;
    let known = examples::registry();
    if list {
        let kinds: Vec<&str> = known.iter().map(|w| w.kind()).collect();
        println!("{}", serde_json::json!({ "kinds": kinds }));
        return Ok(None);
    }
    let kind = kind.unwrap_or_default();
    let Some(workflow) = known.iter().find(|w| w.kind() == kind) else {
        let kinds: Vec<&str> = known.iter().map(|w| w.kind()).collect();
        anyhow::bail!(
            "--kind {kind:?} is not a built-in code-first workflow of this binary (known: {}); \
             replay your own workflows with pgferry_core::workflow::code::replay_kind",
            kinds.join(", ")
        );
    };
    let config = db::parse_config(&require_url(url))?;
    let pool = db::pool(&config, "workflow-replay", 1);
    let report = replay_kind(&Workflows::new(pool), workflow.as_ref(), limit)
        .await
        .context("replay")?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok((!report.ok()).then_some(DIVERGED))
}
