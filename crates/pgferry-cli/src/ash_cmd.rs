//! `pgferry ash top|timeline|at`: active session history read straight from the database
//! (the same SQL readers as `/v1/ash/*`). Human output by default, `--json` for scripts.
//! `pgferry ash cron enable|disable`: the pg_cron mode (pg_cron samples instead of the
//! server's leader).

use std::io::IsTerminal;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context};
use pgferry_ash::read::{self, Dimension, TimelinePoint, Window};
use pgferry_core::db;
use tokio_postgres::Client;

mod bench;
pub use bench::{bench, AshBenchArgs};

#[derive(clap::Args, Clone)]
pub struct WindowArgs {
    /// Window start: a duration before --until (30s, 15m, 2h, 7d) or a time Postgres
    /// understands (2026-11-24 05:00:00+00).
    #[arg(long, default_value = "1h")]
    pub since: String,
    /// Window end (exclusive): `now` or a time Postgres understands.
    #[arg(long, default_value = "now")]
    pub until: String,
}

#[derive(clap::Subcommand)]
pub enum AshAction {
    /// Top waits, top queries and the CPU / waiting split over a window.
    Top {
        #[command(flatten)]
        window: WindowArgs,
        /// Also break average active sessions down by this dimension (wait_type,
        /// wait_event, query, database, user, application, pgferry_role, backend_type,
        /// queue, job_kind, tenant).
        #[arg(long)]
        by: Option<String>,
        #[arg(long, default_value_t = 10)]
        limit: i32,
        #[arg(long)]
        json: bool,
    },
    /// A chart of average active sessions per bucket, stacked by wait type, with a vCPU line.
    Timeline {
        #[command(flatten)]
        window: WindowArgs,
        /// Bucket width (default: the window over 30 rows, at least 1s).
        #[arg(long)]
        bucket: Option<String>,
        /// vCPUs of the database host for the CPU line (default: this machine's).
        #[arg(long)]
        vcpus: Option<usize>,
        /// Chart width in columns.
        #[arg(long, default_value_t = 60)]
        width: usize,
        #[arg(long)]
        json: bool,
    },
    /// What was running, and who blocked whom, at TIME (`now`, or a time Postgres understands).
    At {
        time: String,
        #[arg(long)]
        json: bool,
    },
    /// The pg_cron mode: have pg_cron (installed in this database) run the sampler instead
    /// of the server's leader (then serve with `--ash-interval-ms 0`).
    Cron {
        #[command(subcommand)]
        action: CronAction,
    },
}

#[derive(clap::Subcommand)]
pub enum CronAction {
    /// Schedules the `pgferry-ash` job (every minute, sampling every --interval-ms).
    Enable {
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Databases to sample (repeatable; default: all).
        #[arg(long = "database")]
        databases: Vec<String>,
    },
    /// Removes the `pgferry-ash` job.
    Disable,
}

pub async fn run(url: &str, action: AshAction) -> anyhow::Result<()> {
    let config = db::parse_config(url)?;
    let client = db::connect(&config, "ash-cli").await?;
    match action {
        AshAction::Top {
            window,
            by,
            limit,
            json,
        } => top(&client, &window, by, limit, json).await,
        AshAction::Timeline {
            window,
            bucket,
            vcpus,
            width,
            json,
        } => timeline(&client, &window, bucket, vcpus, width, json).await,
        AshAction::At { time, json } => at(&client, &time, json).await,
        AshAction::Cron {
            action:
                CronAction::Enable {
                    interval_ms,
                    databases,
                },
        } => {
            let dbs = (!databases.is_empty()).then_some(databases.as_slice());
            let job =
                pgferry_ash::cron::enable(&client, Duration::from_millis(interval_ms), dbs).await?;
            println!("pg_cron job {job} (pgferry-ash) samples every {interval_ms} ms; serve with --ash-interval-ms 0");
            Ok(())
        }
        AshAction::Cron {
            action: CronAction::Disable,
        } => {
            match pgferry_ash::cron::disable(&client).await? {
                true => println!("pg_cron job pgferry-ash removed"),
                false => println!("no pg_cron job pgferry-ash was scheduled"),
            }
            Ok(())
        }
    }
}

/// "30s", "15m", "2h", "7d" as a duration; None when `s` is not one.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = num.parse().ok()?;
    let secs = match unit {
        "s" => n,
        "m" => n.checked_mul(60)?,
        "h" => n.checked_mul(3600)?,
        "d" => n.checked_mul(86_400)?,
        _ => return None,
    };
    Some(Duration::from_secs(secs))
}

/// A time in the user's words (`now`, or any format Postgres accepts).
async fn parse_time(client: &Client, field: &'static str, s: &str) -> anyhow::Result<SystemTime> {
    if s == "now" {
        return Ok(SystemTime::now());
    }
    Ok(read::parse_time(client, field, s).await?)
}

async fn window(client: &Client, w: &WindowArgs) -> anyhow::Result<Window> {
    let until = parse_time(client, "--until", &w.until).await?;
    let since = match parse_duration(&w.since) {
        Some(d) => until
            .checked_sub(d)
            .context("invalid --since: before the epoch")?,
        None => parse_time(client, "--since", &w.since).await?,
    };
    Ok(Window::from_ms(read::ms(since), read::ms(until))?)
}

async fn top(
    client: &Client,
    w: &WindowArgs,
    by: Option<String>,
    limit: i32,
    json: bool,
) -> anyhow::Result<()> {
    let w = window(client, w).await?;
    let by: Option<Dimension> = by.map(|b| b.parse()).transpose()?;
    let split = read::cpu_vs_waiting(client, w).await?;
    let waits = read::top_waits(client, w, limit).await?;
    let queries = read::top_queries(client, w, limit).await?;
    let slices = match by {
        Some(d) => Some(read::aas_by(client, d, w).await?),
        None => None,
    };
    if json {
        let out = serde_json::json!({
            "window": {"since_ms": read::ms(w.since), "until_ms": read::ms(w.until)},
            "cpu_vs_waiting": split,
            "waits": waits,
            "queries": queries,
            "by": by,
            "slices": slices,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    println!(
        "AAS on CPU {}  waiting {}  idle in transaction {}  (sampled {:.0} s of {:.0} s)",
        f(split.cpu),
        f(split.waiting),
        f(split.idle_in_transaction),
        split.covered_seconds,
        split.window_seconds
    );
    println!(
        "\n{:<10} {:<28} {:>8} {:>8}",
        "WAIT TYPE", "EVENT", "AAS", "%DB"
    );
    for x in &waits {
        println!(
            "{:<10} {:<28} {:>8} {:>8}",
            x.wait_type,
            x.wait_event,
            f(x.aas),
            f(x.db_time_pct)
        );
    }
    println!(
        "\n{:>20} {:>8} {:>8}  {:<20} QUERY",
        "QUERY ID", "AAS", "%DB", "TOP WAIT"
    );
    for q in &queries {
        let text: String = q
            .query_text
            .as_deref()
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(60)
            .collect();
        println!(
            "{:>20} {:>8} {:>8}  {:<20} {}",
            q.query_id.map_or("-".into(), |i| i.to_string()),
            f(q.aas),
            f(q.db_time_pct),
            q.top_wait.as_deref().unwrap_or("-"),
            text
        );
    }
    if let (Some(d), Some(slices)) = (by, slices) {
        println!(
            "\n{:<40} {:>8} {:>8}",
            d.as_str().to_uppercase(),
            "AAS",
            "%DB"
        );
        for s in slices {
            println!("{:<40} {:>8} {:>8}", s.key, f(s.aas), f(s.db_time_pct));
        }
    }
    Ok(())
}

/// ANSI colour per wait type, in the order the legend shows them.
const COLOURS: [(&str, &str); 9] = [
    ("CPU", "32"),
    ("IO", "34"),
    ("Lock", "31"),
    ("LWLock", "35"),
    ("IdleTx", "33"),
    ("Client", "36"),
    ("IPC", "94"),
    ("Timeout", "90"),
    ("Extension", "95"),
];

fn colour_of(wait: &str) -> &'static str {
    COLOURS
        .iter()
        .find(|(w, _)| *w == wait)
        .map_or("37", |(_, c)| c)
}

/// The chart: one row per bucket, a bar of AAS stacked by wait type, a `│` at the vCPU
/// count (load past it means sessions queue for CPU or wait).
pub fn chart(points: &[TimelinePoint], vcpus: usize, width: usize, colour: bool) -> String {
    use std::collections::BTreeMap;
    use std::fmt::Write;
    let mut buckets: BTreeMap<i64, Vec<&TimelinePoint>> = BTreeMap::new();
    for p in points {
        buckets.entry(p.bucket_start_ms).or_default().push(p);
    }
    let peak = buckets
        .values()
        .map(|ps| ps.iter().map(|p| p.aas).sum::<f64>())
        .fold(vcpus as f64, f64::max)
        .max(1.0);
    let scale = width as f64 / peak;
    let cpu_col = ((vcpus as f64) * scale).round() as usize;
    let mut out = String::new();
    for (start, ps) in &buckets {
        let secs = start / 1000;
        let label = format!(
            "{:02}:{:02}:{:02}",
            secs / 3600 % 24,
            secs / 60 % 60,
            secs % 60
        );
        let mut bar = String::new();
        let mut col = 0usize;
        let mut order: Vec<&&TimelinePoint> = ps.iter().filter(|p| p.wait_type.is_some()).collect();
        order.sort_by_key(|p| {
            COLOURS
                .iter()
                .position(|(w, _)| Some(*w) == p.wait_type.as_deref())
                .unwrap_or(COLOURS.len())
        });
        for p in order {
            let end = ((col as f64) + p.aas * scale).round() as usize;
            let end = end.max(col);
            for c in col..end {
                let ch = if c == cpu_col { '┃' } else { '█' };
                if colour {
                    let _ = write!(
                        bar,
                        "\x1b[{}m{ch}\x1b[0m",
                        colour_of(p.wait_type.as_deref().unwrap_or(""))
                    );
                } else {
                    bar.push(ch);
                }
            }
            col = end;
        }
        for c in col..=cpu_col.max(col) {
            bar.push(if c == cpu_col { '│' } else { ' ' });
        }
        let total: f64 = ps.iter().map(|p| p.aas).sum();
        let coverage = ps.first().map_or(0.0, |p| p.coverage);
        let note = if coverage == 0.0 {
            "  (no samples: sampler down)".to_string()
        } else if coverage < 0.95 {
            format!("  ({:.0}% sampled)", coverage * 100.0)
        } else {
            String::new()
        };
        let _ = writeln!(out, "{label} {bar} {total:>6.2}{note}");
    }
    let mut legend = String::from("         ");
    for (w, c) in COLOURS {
        if colour {
            let _ = write!(legend, "\x1b[{c}m█\x1b[0m {w}  ");
        } else {
            let _ = write!(legend, "{w}  ");
        }
    }
    let _ = writeln!(
        out,
        "{legend}│ {vcpus} vCPUs   (UTC; AAS = average active sessions)"
    );
    out
}

async fn timeline(
    client: &Client,
    w: &WindowArgs,
    bucket: Option<String>,
    vcpus: Option<usize>,
    width: usize,
    json: bool,
) -> anyhow::Result<()> {
    let w = window(client, w).await?;
    let span = w.until.duration_since(w.since).unwrap_or_default();
    let bucket = match bucket {
        Some(b) => {
            parse_duration(&b).with_context(|| format!("invalid --bucket {b:?} (30s, 5m, 1h)"))?
        }
        None => Duration::from_secs((span.as_secs() / 30).max(1)),
    };
    let vcpus =
        vcpus.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if !(1..=1000).contains(&width) {
        bail!("invalid --width {width}: 1 to 1000 columns");
    }
    let points = read::timeline(client, w, bucket).await?;
    if json {
        let out = serde_json::json!({
            "window": {"since_ms": read::ms(w.since), "until_ms": read::ms(w.until)},
            "bucket_s": bucket.as_secs(),
            "vcpus": vcpus,
            "points": points,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    print!("{}", chart(&points, vcpus, width, colour));
    Ok(())
}

async fn at(client: &Client, time: &str, json: bool) -> anyhow::Result<()> {
    let moment = parse_time(client, "TIME", time).await?;
    let activity = read::activity_at(client, moment).await?;
    let blocking = read::blocking_at(client, moment).await?;
    if json {
        let out = serde_json::json!({
            "time_ms": read::ms(moment),
            "activity": activity,
            "blocking": blocking,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    match activity.first() {
        None => println!("no sample within a minute before {} ms", read::ms(moment)),
        Some(a) => {
            let ago = read::ms(moment) - a.sample_at_ms;
            println!(
                "sample {} ms before the moment ({} ms since the epoch)\n",
                ago, a.sample_at_ms
            );
        }
    }
    println!(
        "{:>8}  {:<10} {:<24} {:<16} {:<20} QUERY",
        "SESSIONS", "WAIT TYPE", "EVENT", "PGFERRY ROLE", "APPLICATION"
    );
    for a in &activity {
        println!(
            "{:>8}  {:<10} {:<24} {:<16} {:<20} {}",
            a.sessions,
            a.wait_type,
            a.wait_event,
            a.pgferry_role.as_deref().unwrap_or("-"),
            a.application,
            a.query_text
                .as_deref()
                .unwrap_or("")
                .chars()
                .take(60)
                .collect::<String>()
        );
    }
    if !blocking.is_empty() {
        println!("\nBLOCKING CHAINS (indent = depth)");
        for b in &blocking {
            let depth = b.depth.unwrap_or(0).max(0) as usize;
            let who = match b.pid {
                Some(pid) => format!("pid {pid}"),
                None => format!("{} session(s)", b.sessions),
            };
            println!(
                "{}{} {} {}:{} {}",
                "  ".repeat(depth),
                who,
                if b.blocked_by.is_empty() {
                    "holds".to_string()
                } else {
                    format!("waits for {:?}", b.blocked_by)
                },
                b.wait_type.as_deref().unwrap_or("?"),
                b.wait_event.as_deref().unwrap_or("?"),
                b.pgferry_role
                    .as_deref()
                    .or(b.application.as_deref())
                    .unwrap_or("")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_junk_does_not() {
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("15m"), Some(Duration::from_secs(900)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("7d"), Some(Duration::from_secs(604_800)));
        for bad in ["", "h", "5", "5w", "-5m", "2026-11-24"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn chart_stacks_by_wait_and_draws_the_cpu_line() {
        let p = |wait: Option<&str>, aas: f64| TimelinePoint {
            bucket_start_ms: 3_600_000,
            wait_type: wait.map(str::to_string),
            aas,
            coverage: 1.0,
        };
        let down = TimelinePoint {
            bucket_start_ms: 3_660_000,
            wait_type: None,
            aas: 0.0,
            coverage: 0.0,
        };
        let out = chart(
            &[p(Some("CPU"), 2.0), p(Some("Lock"), 1.0), down],
            2,
            40,
            false,
        );
        let lines: Vec<&str> = out.lines().collect();
        // peak 3 AAS over 40 columns: CPU 2 → 27 cells, Lock 1 → 13, the vCPU line at 27.
        assert!(lines[0].starts_with("01:00:00 "), "{out}");
        assert_eq!(
            lines[0].matches('█').count() + lines[0].matches('┃').count(),
            40,
            "{out}"
        );
        assert!(
            lines[0].contains('┃'),
            "the vCPU line crosses the bar: {out}"
        );
        assert!(lines[1].contains("sampler down"), "{out}");
        assert!(lines[1].contains('│'), "{out}");
    }
}
