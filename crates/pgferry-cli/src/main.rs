//! The `pgferry` binary.

mod admin;
mod ash_cmd;
mod bench_cmd;
mod chaos_cmd;
mod dev;
mod migrate_cmd;
mod monitor_cmd;
mod run;
mod schedule_cmd;
mod tenant_cmd;
mod workflow_cmd;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

/// mimalloc instead of glibc malloc: the server's hot path allocates and frees many small
/// buffers per job across threads (protobuf messages, HTTP/2 frames, row buffers), where
/// glibc spent ~18% of the process's CPU in a gRPC cycle benchmark (free-list
/// consolidation, chunk unlinking); see docs/performance.md for the A/B.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "pgferry",
    version,
    about = "Durable jobs and workflows in PostgreSQL"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run pgferry on a private embedded Postgres under ./.pgferry (no setup needed).
    Dev {
        /// Where the private cluster lives.
        #[arg(long, default_value = ".pgferry")]
        data_dir: PathBuf,
        #[command(flatten)]
        server: run::ServerArgs,
    },
    /// Run the server against an existing Postgres (14 or newer).
    Serve {
        #[arg(long, env = "PGFERRY_DATABASE_URL")]
        database_url: String,
        #[command(flatten)]
        server: run::ServerArgs,
    },
    /// Benchmarks (JSON report on stdout, progress on stderr).
    Bench {
        #[command(subcommand)]
        cmd: bench_cmd::BenchCmd,
    },
    /// Apply or inspect schema migrations.
    Migrate {
        // Global so that both `migrate up --database-url …` (as documented) and
        // `migrate --database-url … up` parse. clap forbids `required` on global
        // arguments, so its presence is checked in `main`.
        #[arg(long, env = "PGFERRY_DATABASE_URL", global = true)]
        database_url: Option<String>,
        #[command(subcommand)]
        action: migrate_cmd::Action,
    },
    /// Active session history: what the database was doing (reads the database directly).
    Ash {
        #[arg(long, env = "PGFERRY_DATABASE_URL", global = true)]
        database_url: Option<String>,
        #[command(subcommand)]
        action: ash_cmd::AshAction,
    },
    /// Manage tenants (operators; talks to the database directly).
    Tenant {
        #[arg(long, env = "PGFERRY_DATABASE_URL", global = true)]
        database_url: Option<String>,
        #[command(subcommand)]
        action: tenant_cmd::TenantAction,
    },
    /// Queues of the API key's tenant: list, show, pause, resume, set, cancel (HTTP API).
    Queue {
        #[command(flatten)]
        target: admin::api::Target,
        #[command(subcommand)]
        cmd: admin::QueueCmd,
    },
    /// Jobs: get, list, cancel, retry (HTTP API).
    Job {
        #[command(flatten)]
        target: admin::api::Target,
        #[command(subcommand)]
        cmd: admin::JobCmd,
    },
    /// The dead-letter queue: list, retry, purge (HTTP API).
    Dead {
        #[command(flatten)]
        target: admin::api::Target,
        #[command(subcommand)]
        cmd: admin::DeadCmd,
    },
    /// Schedules (cron / interval) of the key's tenant: list, show, create, delete, pause,
    /// resume, preview, fires, backfill (HTTP API; JSON output).
    Schedule {
        #[command(flatten)]
        target: admin::api::Target,
        #[command(subcommand)]
        cmd: schedule_cmd::ScheduleCmd,
    },
    /// Heartbeat monitors of the key's tenant: list, get, create, delete, pause, resume,
    /// ping, pings, alerts (HTTP API; JSON output).
    Monitor {
        #[command(flatten)]
        target: admin::api::Target,
        #[command(subcommand)]
        cmd: monitor_cmd::MonitorCmd,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions { shell: clap_complete::Shell },
    /// Manage API keys (operators; talks to the database directly).
    Key {
        #[arg(long, env = "PGFERRY_DATABASE_URL", global = true)]
        database_url: Option<String>,
        #[command(subcommand)]
        action: tenant_cmd::KeyAction,
    },
    /// Code-first workflows: `replay --kind K` checks recorded instances against this code.
    Workflow {
        #[arg(long, env = "PGFERRY_DATABASE_URL", global = true)]
        database_url: Option<String>,
        #[command(subcommand)]
        action: workflow_cmd::WorkflowAction,
    },
    /// Fault injection with a per-job ledger (JSON report on stdout, progress on stderr).
    Chaos(chaos_cmd::ChaosArgs),
    /// A worker process of `pgferry chaos` (started and killed by the suite).
    #[command(hide = true)]
    ChaosWorker(chaos_cmd::WorkerCmd),
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    init_logging();
    let result = match Cli::parse().command {
        Command::Dev { data_dir, server } => dev::run(data_dir, server).await,
        Command::Serve {
            database_url,
            server,
        } => run::serve_url(&database_url, server).await,
        Command::Migrate {
            database_url,
            action,
        } => migrate_cmd::run(&require_url(database_url), action).await,
        Command::Tenant {
            database_url,
            action,
        } => tenant_cmd::tenant(&require_url(database_url), action).await,
        Command::Key {
            database_url,
            action,
        } => tenant_cmd::key(&require_url(database_url), action).await,
        Command::Bench { cmd } => bench_cmd::run(cmd).await,
        Command::Chaos(args) => chaos_cmd::run(args).await,
        Command::ChaosWorker(cmd) => chaos_cmd::worker(cmd).await,
        Command::Queue { target, cmd } => admin::queue(&target, cmd).await,
        Command::Job { target, cmd } => admin::job(&target, cmd).await,
        Command::Dead { target, cmd } => admin::dead(&target, cmd).await,
        Command::Schedule { target, cmd } => schedule_cmd::run(&target, cmd).await,
        Command::Monitor { target, cmd } => monitor_cmd::run(&target, cmd).await,
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "pgferry",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        Command::Ash {
            database_url,
            action,
        } => ash_cmd::run(&require_url(database_url), action).await,
        Command::Workflow {
            database_url,
            action,
        } => match workflow_cmd::run(database_url, action, require_url).await {
            Ok(Some(code)) => return std::process::ExitCode::from(code),
            other => other.map(|_| ()),
        },
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pgferry: error: {e:#}");
            match e.downcast_ref::<admin::api::ExitError>() {
                Some(x) => std::process::ExitCode::from(x.exit as u8),
                None => std::process::ExitCode::FAILURE,
            }
        }
    }
}

/// Logs go to stderr: plain text by default, one JSON object per line with
/// `PGFERRY_LOG_FORMAT=json` (for log shippers); `PGFERRY_LOG` filters (default `info`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PGFERRY_LOG")
        .unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match std::env::var("PGFERRY_LOG_FORMAT").as_deref() {
        Ok("json") => builder
            .json()
            // Each line carries the fields of the span it happened in (request, RPC).
            .with_current_span(true)
            .with_span_list(false)
            .init(),
        other => {
            builder
                // Colour codes only for a terminal, not in redirected logs (files, journald).
                .with_ansi(
                    std::io::IsTerminal::is_terminal(&std::io::stderr())
                        && std::env::var_os("NO_COLOR").unwrap_or_default().is_empty(),
                )
                .init();
            if let Ok(f) = other {
                if !f.is_empty() && f != "text" {
                    tracing::warn!(
                        format = f,
                        "unknown PGFERRY_LOG_FORMAT (text or json); using text"
                    );
                }
            }
        }
    }
}

/// The `--database-url` of commands that declare it global (clap forbids `required` on
/// global arguments, so its presence is checked here).
fn require_url(database_url: Option<String>) -> String {
    database_url.unwrap_or_else(|| {
        Cli::command()
            .error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "the following required argument was not provided: \
                 --database-url <DATABASE_URL> (or set PGFERRY_DATABASE_URL)",
            )
            .exit()
    })
}

/// Default HTTP address of `serve` and `dev`.
pub const DEFAULT_HTTP: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8787);

/// Default gRPC address of `serve` and `dev`.
pub const DEFAULT_GRPC: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7272);
