//! `pgferry migrate up|status`.

use pgferry_core::db;
use pgferry_server::migrate;

#[derive(clap::Subcommand)]
pub enum Action {
    /// Apply pending migrations and changed functions (safe to run concurrently).
    Up,
    /// Show each migration and function as applied, pending or modified (JSON).
    Status,
}

pub async fn run(url: &str, action: Action) -> anyhow::Result<()> {
    let config = db::parse_config(url)?;
    let mut client = db::connect(&config, "migrate").await?;
    match action {
        Action::Up => {
            let applied = migrate::up(&mut client).await?;
            println!(
                "{}",
                serde_json::json!({ "applied": applied.versions, "functions": applied.functions })
            );
        }
        Action::Status => {
            let status = migrate::status(&client).await?;
            println!("{}", serde_json::to_string_pretty(&status)?);
        }
    }
    Ok(())
}
