//! Leader duties share one shape (issue 18): validated settings, `run_once` apart from the
//! loop, per-duty counters, and a trigger that runs a pass now.

mod common;

use std::time::Duration;

use pgferry_core::leader::duty::{Duty, Next};
use pgferry_core::leader::promoter::Promoter;
use pgferry_core::leader::ticker::Ticker;
use pgferry_core::{JobState, Leader, LeaderConfig, NewJob};
use serde_json::json;

/// The two tests below share this binary's cluster, and a ticker is due whenever any
/// transaction in the cluster ends, in any database. The trigger test runs a whole leader
/// (its duties end transactions all the time), so the idle check must not run beside it.
static ONE_LEADER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[test]
fn settings_are_validated_and_the_field_named() {
    assert!(LeaderConfig::default().validate().is_ok());
    let zero = LeaderConfig {
        promote_interval: Duration::ZERO,
        ..LeaderConfig::default()
    };
    let e = zero.validate().unwrap_err().to_string();
    assert!(e.contains("promote_interval"), "{e}");
    let batch = LeaderConfig {
        prune_batch: 0,
        ..LeaderConfig::default()
    };
    let e = batch.validate().unwrap_err().to_string();
    assert!(e.contains("prune_batch"), "{e}");
}

#[tokio::test]
async fn a_duty_pass_runs_apart_from_its_loop() {
    let _alone = ONE_LEADER_AT_A_TIME.lock().await;
    let s = common::setup().await;
    let mut client = s.db.connect().await;
    // Nothing enqueued: the ticker finds nothing new.
    let config = LeaderConfig::default();
    let mut ticker = Ticker::new(s.engine.clone(), config.clone());
    ticker.prepare(&client).await.unwrap();
    let mut idle = false;
    for _ in 0..10 {
        if ticker.run_once(&mut client).await.unwrap() == Next::Idle {
            idle = true;
            break;
        }
    }
    assert!(idle, "with nothing enqueued the ticker goes idle");
    s.engine
        .enqueue(&[NewJob::new("d", "k", json!({}))])
        .await
        .unwrap();
    assert_eq!(
        ticker.run_once(&mut client).await.unwrap(),
        Next::After(config.tick_interval),
        "the log grew: a tick, then the short pause"
    );
    // A scheduled job that comes due: one promoter pass moves it.
    let id = s
        .engine
        .enqueue(&[NewJob::new("d", "k", json!({})).delay(Duration::from_millis(200))])
        .await
        .unwrap()[0];
    assert_eq!(
        s.engine.get_job(id).await.unwrap().state,
        JobState::Scheduled
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut promoter = Promoter::new(&config);
    assert_eq!(promoter.run_once(&mut client).await.unwrap(), Next::Idle);
    assert_eq!(s.engine.get_job(id).await.unwrap().state, JobState::Pending);
}

/// The ticker runs hundreds of passes a second while claimers wait (tick on demand). Each
/// pass must execute the one statement prepared on its connection, not parse and plan the
/// tick again: per-pass preparing cost the ticker's backend more CPU than the claims it
/// served (docs/performance.md, "The ticker's statement prepared once").
#[tokio::test]
async fn the_ticker_prepares_its_statement_once_per_connection() {
    let _alone = ONE_LEADER_AT_A_TIME.lock().await;
    let s = common::setup().await;
    let mut client = s.db.connect().await;
    let mut ticker = Ticker::new(s.engine.clone(), LeaderConfig::default());
    ticker.prepare(&client).await.unwrap();
    let passes = 12;
    for _ in 0..passes {
        s.engine
            .enqueue(&[NewJob::new("prep", "k", json!({}))])
            .await
            .unwrap();
        ticker.run_once(&mut client).await.unwrap();
    }
    // The session's prepared statements: the tick's, with one execution per pass (a
    // statement without parameters runs its generic plan, so its plan counts are its runs).
    let rows = client
        .query(
            "SELECT generic_plans + custom_plans AS runs FROM pg_prepared_statements \
              WHERE statement LIKE '-- tick:%'",
            &[],
        )
        .await
        .unwrap();
    let runs: Vec<i64> = rows.iter().map(|r| r.get("runs")).collect();
    assert_eq!(
        runs,
        vec![passes],
        "one prepared tick statement on the connection, run by every pass"
    );
}

#[tokio::test]
async fn a_trigger_runs_a_pass_now_and_passes_are_counted() {
    let _alone = ONE_LEADER_AT_A_TIME.lock().await;
    let s = common::setup().await;
    // Promotion every hour: only the trigger can promote within this test.
    let config = LeaderConfig {
        promote_interval: Duration::from_secs(3600),
        ..LeaderConfig::default()
    };
    let leader = Leader::new(s.engine.clone(), s.db.config.clone(), config);
    let duties = leader.duties();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(leader.run(stopped));
    // The promoter's first pass (at start) happens before the job exists.
    let promoter = duties.handle("promoter");
    let first = wait_for(|| promoter.stats.snapshot().passes >= 1).await;
    assert!(first, "the promoter made its first pass");
    // The queue exists before the job is built: the job's run_at is taken when it is
    // built, and a slow first enqueue (creating the queue) must not make it due already
    // when it is written (it would then go straight to the ready log, correctly).
    s.engine.ensure_queue("t").await.unwrap();
    let delay = Duration::from_secs(1);
    let id = s
        .engine
        .enqueue(&[NewJob::new("t", "k", json!({})).delay(delay)])
        .await
        .unwrap()[0];
    assert_eq!(
        s.engine.get_job(id).await.unwrap().state,
        JobState::Scheduled,
        "written as scheduled (its run_at is {delay:?} ahead)"
    );
    tokio::time::sleep(delay + Duration::from_millis(400)).await;
    assert_eq!(
        s.engine.get_job(id).await.unwrap().state,
        JobState::Scheduled,
        "not promoted before the trigger (the next pass is an hour away); passes {:?}",
        duties.snapshot()
    );
    promoter.trigger();
    let mut promoted = false;
    for _ in 0..200 {
        if s.engine.get_job(id).await.unwrap().state == JobState::Pending {
            promoted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(promoted, "the trigger ran a promoter pass");
    let names: Vec<&str> = duties.snapshot().iter().map(|(n, _)| *n).collect();
    for d in [
        "janitor",
        "promoter",
        "recounter",
        "rescuer",
        "rotator",
        "ticker",
        "workflow-key-sweeper",
        "workflow-retention",
    ] {
        assert!(names.contains(&d), "{d} registered: {names:?}");
    }
    let _ = stop.send(true);
    run.await.unwrap();
}

/// Polls `ok` for up to 10 s (a hang guard, not a timing assertion).
async fn wait_for(ok: impl Fn() -> bool) -> bool {
    for _ in 0..200 {
        if ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A tick causes claims and completions; their transactions begin after it and end. A pass
/// right after the tick with no word that the log grew must not count them as a change, or
/// every tick causes the next (docs/performance.md, "Ticks that cause ticks"). The next full
/// pass (after the idle wait) still counts them: a writer that told nobody is seen there.
#[tokio::test]
async fn a_tick_does_not_cause_the_next_one() {
    let _alone = ONE_LEADER_AT_A_TIME.lock().await;
    let s = common::setup_with(common::quiet_counters()).await;
    let mut client = s.db.connect().await;
    let config = LeaderConfig::default();
    let mut ticker = Ticker::new(s.engine.clone(), config.clone());
    ticker.prepare(&client).await.unwrap();
    while ticker.run_once(&mut client).await.unwrap() != Next::Idle {}

    s.engine
        .enqueue(&[NewJob::new("cascade", "k", json!({}))])
        .await
        .unwrap();
    // The enqueue's growth wakes the idle ticker, as in the duty loop; its pass ticks.
    ticker.idle().await;
    assert_eq!(
        ticker.run_once(&mut client).await.unwrap(),
        Next::After(config.tick_interval)
    );
    // What the tick caused: a claim and a completion, each its own transaction.
    let claimed = s.engine.claim("cascade", 10, "w").await.unwrap();
    assert_eq!(claimed.len(), 1);
    let done: Vec<_> = claimed.iter().map(|j| j.completed(None)).collect();
    s.engine.complete(&done).await.unwrap();

    let count = "SELECT count(*) FROM pgferry.ticks";
    let before: i64 = client.query_one(count, &[]).await.unwrap().get(0);
    // The pause after the tick runs out with no growth: the follow-up pass writes nothing.
    ticker.pause(Duration::from_millis(5)).await;
    assert_eq!(ticker.run_once(&mut client).await.unwrap(), Next::Idle);
    let after: i64 = client.query_one(count, &[]).await.unwrap().get(0);
    assert_eq!(after, before, "the claim and the completion caused no tick");
    // A full pass (after the idle wait) counts them.
    ticker.idle().await;
    assert_eq!(
        ticker.run_once(&mut client).await.unwrap(),
        Next::After(config.tick_interval),
        "a full pass still sees transactions that ended since the last tick"
    );
}
