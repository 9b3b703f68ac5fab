//! Bad input through the engine API (issue 4 "Proof"): invalid queue and kind names,
//! max_attempts out of range, payloads over the (configurable) limit, unknown job ids —
//! typed errors, and nothing written, whichever enqueue path and whatever else the batch
//! held. (Delays are `Duration`s and cannot be negative here; a run_at in the past runs at
//! once. The HTTP and gRPC layers refuse negative values with a typed 400/INVALID_ARGUMENT.)

mod common;

use std::time::{Duration, SystemTime};

use pgferry_core::{DeadFilter, EngineConfig, Error, NewJob, Outcome, OutcomeKind};
use serde_json::json;

fn ok_job() -> NewJob {
    NewJob::new("q", "k", json!({ "fine": true }))
}

fn ok_later() -> NewJob {
    ok_job().run_at(SystemTime::now() + Duration::from_secs(3600))
}

/// Rows in every table an enqueue may write.
async fn written(s: &common::Setup) -> i64 {
    let c = s.db.connect().await;
    c.query_one(
        "SELECT (SELECT count(*) FROM pgferry.ready) + (SELECT count(*) FROM pgferry.scheduled)
              + (SELECT count(*) FROM pgferry.unique_keys) + (SELECT count(*) FROM pgferry.queues)
              + (SELECT count(*) FROM pgferry.lanes)",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn invalid_jobs_get_typed_errors_and_nothing_is_written() {
    let s = common::setup().await;
    let big = "x".repeat(1 << 20);
    let cases: Vec<(NewJob, &str, &str)> = vec![
        (
            NewJob::new("Bad Queue", "k", json!({})),
            "invalid_name",
            "queue",
        ),
        (NewJob::new("-q", "k", json!({})), "invalid_name", "queue"),
        (
            NewJob::new("q".repeat(65), "k", json!({})),
            "invalid_name",
            "queue",
        ),
        (NewJob::new("", "k", json!({})), "invalid_name", "queue"),
        (NewJob::new("q", "", json!({})), "invalid_name", "kind"),
        (
            NewJob::new("q", "has space", json!({})),
            "invalid_name",
            "kind",
        ),
        (
            NewJob::new("q", "k".repeat(129), json!({})),
            "invalid_name",
            "kind",
        ),
        (ok_job().max_attempts(0), "invalid_argument", "max_attempts"),
        (
            ok_job().max_attempts(-3),
            "invalid_argument",
            "max_attempts",
        ),
        (
            ok_job().max_attempts(1001),
            "invalid_argument",
            "max_attempts",
        ),
        (ok_job().priority(4), "invalid_argument", "priority"),
        (
            NewJob::new("q", "k", json!({ "s": big })),
            "payload_too_large",
            "",
        ),
        (ok_job().meta(json!({ "s": big })), "payload_too_large", ""),
    ];
    let field_of = |e: &Error| match e {
        Error::InvalidName { field, .. } | Error::InvalidArgument { field, .. } => *field,
        _ => "",
    };
    for (bad, code, field) in cases {
        // Valid jobs (due now and later, keyed and not) around the bad one: the batch is
        // refused as a whole on every path.
        let batch = vec![ok_job(), ok_later(), bad.clone(), ok_job()];
        let err = s.engine.enqueue(&batch).await.unwrap_err();
        assert_eq!(
            (err.code(), field_of(&err)),
            (code, field),
            "enqueue: {err}"
        );
        assert!(err.is_invalid_input());
        if let Error::PayloadTooLarge { index, limit, .. } = err {
            assert_eq!((index, limit), (2, 1 << 20));
        }
        let keyed = vec![ok_job().unique("a"), bad.clone().unique("b"), ok_later()];
        let err = s.engine.enqueue_many(&keyed).await.unwrap_err();
        assert_eq!(err.code(), code, "enqueue_many: {err}");
        let mut client = s.db.connect().await;
        let tx = client.transaction().await.unwrap();
        let err = s.engine.enqueue_tx(&tx, &batch).await.unwrap_err();
        assert_eq!(err.code(), code, "enqueue_tx: {err}");
        tx.commit().await.unwrap();
        assert_eq!(written(&s).await, 0, "{code} {field}: nothing written");
    }
}

#[tokio::test]
async fn the_payload_limit_is_configurable() {
    let s = common::setup_with(EngineConfig {
        max_payload_bytes: 100,
        ..EngineConfig::default()
    })
    .await;
    // {"s":"…"} is 8 bytes of JSON around the string.
    let sized = |n: usize| NewJob::new("q", "k", json!({ "s": "x".repeat(n - 8) }));
    assert_eq!(s.engine.enqueue(&[sized(100)]).await.unwrap().len(), 1);
    let err = s.engine.enqueue(&[sized(101)]).await.unwrap_err();
    assert!(matches!(
        err,
        Error::PayloadTooLarge {
            index: 0,
            size: 101,
            limit: 100
        }
    ));
    // Args and meta together.
    let both = sized(60).meta(json!({ "m": "y".repeat(40) }));
    assert_eq!(
        s.engine.enqueue(&[both]).await.unwrap_err().code(),
        "payload_too_large"
    );
    assert_eq!(
        s.engine
            .enqueue_many(&[sized(101).unique("k")])
            .await
            .unwrap_err()
            .code(),
        "payload_too_large"
    );
}

#[tokio::test]
async fn unknown_job_ids_are_not_found_and_change_nothing() {
    let s = common::setup().await;
    let id = s.engine.enqueue(&[ok_job()]).await.unwrap()[0];
    s.tick().await;
    let c = s.engine.claim("q", 1, "w").await.unwrap();
    for unknown in [id + 1_000_000, -1, 0, i64::MAX] {
        assert!(
            matches!(s.engine.get_job(unknown).await, Err(Error::NotFound { .. })),
            "get_job({unknown})"
        );
        assert!(
            matches!(
                s.engine.cancel(unknown, None).await,
                Err(Error::NotFound { .. })
            ),
            "cancel({unknown})"
        );
    }
    let ids = DeadFilter {
        ids: Some(vec![id + 1_000_000]),
        ..DeadFilter::default()
    };
    assert_eq!(s.engine.retry_dead(&ids, 10).await.unwrap(), 0);
    assert_eq!(s.engine.purge_dead(&ids).await.unwrap(), 0);
    // An outcome for a job the receipt does not hold is stale: nothing recorded.
    let fake = Outcome {
        job_id: id + 1_000_000,
        kind: OutcomeKind::Completed,
        ..c[0].completed(None)
    };
    assert!(s.engine.complete(&[fake]).await.unwrap()[0].stale);
    let mut r = pgferry_core::AttemptRef::from(&c[0]);
    r.job_id += 1_000_000;
    let beat = s
        .engine
        .heartbeat(&[r], Duration::from_secs(60), "w")
        .await
        .unwrap();
    assert!(!beat[0].held);
    let client = s.db.connect().await;
    let (completions, cancels): (i64, i64) = {
        let row = client
            .query_one(
                "SELECT (SELECT count(*) FROM pgferry.completions),
                        (SELECT count(*) FROM pgferry.cancels)",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((completions, cancels), (0, 0));
    assert_eq!(
        s.engine.get_job(id).await.unwrap().state,
        pgferry_core::JobState::Running
    );
}

/// Issue 27: a database error keeps its cause — the server's message and SQLSTATE — in its
/// Display (logs), while the API-facing message names no internals.
#[tokio::test]
async fn a_terminated_backend_error_keeps_its_cause() {
    let db = pgferry_testkit::test_db().await;
    let victim = pgferry_core::db::connect(&db.config, "victim")
        .await
        .unwrap();
    let admin = db.connect().await;
    let sleeping = tokio::spawn(async move { victim.batch_execute("SELECT pg_sleep(30)").await });
    let mut killed = 0i64;
    for _ in 0..500 {
        killed = admin
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                  WHERE application_name = 'pgferry-victim' AND wait_event = 'PgSleep'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if killed > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(killed, 1);
    let e = pgferry_core::Error::from(sleeping.await.unwrap().unwrap_err());
    let shown = e.to_string();
    assert!(
        shown.contains("57P01")
            && shown.contains("terminating connection due to administrator command"),
        "{shown}"
    );
    assert_eq!(e.sqlstate(), Some("57P01"));
    assert_eq!(e.code(), "unavailable");
    assert!(
        !e.public_message().contains("administrator"),
        "{}",
        e.public_message()
    );
}
