//! Schedules over HTTP (docs/schedules.md): create, read, preview, pause/resume, fires,
//! backfill, delete; bad input names the field; tenants see only their own; audit entries.

mod http_common;

use std::time::{Duration, SystemTime};

use http_common::{error_of, TestServer};
use pgferry_server::ServerConfig;
use serde_json::{json, Value};

async fn server() -> TestServer {
    let srv = TestServer::start(ServerConfig::default()).await;
    let mut c = srv.db.connect().await;
    pgferry_schedules::migrate::up(&mut c).await.unwrap();
    srv
}

fn rfc(t: SystemTime) -> String {
    pgferry_schedules::schedule::format_time(t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_round_trip_over_http() {
    let srv = server().await;
    let a = srv.key("sched-a", &["admin"]).await;
    let b = srv.key("sched-b", &["admin"]).await;
    let body = json!({
        "name": "nightly",
        "cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "target": {"type": "job", "queue": "reports", "kind": "build", "args": {"n": 1}},
        "overlap": "skip",
    });
    let (s, created, _) = srv
        .call("POST", "/v1/schedules", Some(&a), Some(body.clone()))
        .await;
    assert_eq!(s, 201, "{created}");
    assert_eq!(
        created["target"]["queue"], "reports",
        "the tenant's own name"
    );
    assert_eq!(created["overlap"], "skip");
    assert_eq!(created["missed"], "run_once");
    let (s, dup, _) = srv
        .call("POST", "/v1/schedules", Some(&a), Some(body.clone()))
        .await;
    assert_eq!((s, error_of(&dup).1.as_deref()), (409, Some("name")));
    // Another tenant may use the same name; neither sees the other's.
    let (s, _, _) = srv
        .call("POST", "/v1/schedules", Some(&b), Some(body))
        .await;
    assert_eq!(s, 201);
    let (_, list, _) = srv.call("GET", "/v1/schedules", Some(&a), None).await;
    assert_eq!(list["schedules"].as_array().unwrap().len(), 1);

    // Preview: 02:30 Berlin time on consecutive days.
    let (s, p, _) = srv
        .call("GET", "/v1/schedules/nightly/preview?n=3", Some(&a), None)
        .await;
    assert_eq!(s, 200, "{p}");
    let fires: Vec<jiff::Timestamp> = p["fires"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(fires.len(), 3);
    for f in &fires {
        let local = f.to_zoned(jiff::tz::TimeZone::get("Europe/Berlin").unwrap());
        assert_eq!((local.hour(), local.minute()), (2, 30), "{f}");
    }

    // The leader's pass (simulated "now" just after the first fire): one job, with its
    // fire time, visible through the jobs API of the owning tenant only.
    let first = SystemTime::from(fires[0]);
    let mut c = srv.db.connect().await;
    let r = pgferry_schedules::fire_due(&srv.state.engine, &mut c, first + Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(r.fired, 2, "one per tenant's schedule: {r:?}");
    let (_, f, _) = srv
        .call("GET", "/v1/schedules/nightly/fires", Some(&a), None)
        .await;
    let job_id = f["fires"][0]["job_id"].as_i64().unwrap();
    assert_eq!(f["fires"][0]["outcome"], "fired");
    let (s, job, _) = srv
        .call("GET", &format!("/v1/jobs/{job_id}"), Some(&a), None)
        .await;
    assert_eq!(s, 200, "{job}");
    assert_eq!(job["queue"], "reports");
    assert_eq!(job["meta"]["schedule"]["fire_at"], rfc(first));
    let (s, _, _) = srv
        .call("GET", &format!("/v1/jobs/{job_id}"), Some(&b), None)
        .await;
    assert_eq!(s, 404);

    // Pause / resume.
    let (_, p, _) = srv
        .call("POST", "/v1/schedules/nightly/pause", Some(&a), None)
        .await;
    assert_eq!(p["paused"], true);
    let (_, p, _) = srv
        .call("POST", "/v1/schedules/nightly/resume", Some(&a), None)
        .await;
    assert_eq!(p["paused"], false);

    // Backfill of the two days before the first fire (49 h: whatever DST does), twice: the
    // second runs nothing, and the first fire is not run again.
    let bf = json!({"from": rfc(first - Duration::from_secs(49 * 3600)), "to": rfc(first)});
    let (s, done, _) = srv
        .call(
            "POST",
            "/v1/schedules/nightly/backfill",
            Some(&a),
            Some(bf.clone()),
        )
        .await;
    assert_eq!(s, 200, "{done}");
    assert_eq!(done["fired"].as_array().unwrap().len(), 2, "{done}");
    let (_, done, _) = srv
        .call("POST", "/v1/schedules/nightly/backfill", Some(&a), Some(bf))
        .await;
    assert_eq!(done["fired"], json!([]));

    // B cannot touch A's schedule... and deleting its own leaves A's.
    let (s, _, _) = srv
        .call("DELETE", "/v1/schedules/nightly", Some(&b), None)
        .await;
    assert_eq!(s, 204);
    let (s, _, _) = srv
        .call("GET", "/v1/schedules/nightly", Some(&a), None)
        .await;
    assert_eq!(s, 200);
    let (s, _, _) = srv
        .call("GET", "/v1/schedules/nightly", Some(&b), None)
        .await;
    assert_eq!(s, 404);

    let audit: Vec<String> = c
        .query(
            "SELECT action FROM pgferry.audit_log WHERE action LIKE 'schedule.%' ORDER BY audit_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get("action"))
        .collect();
    assert_eq!(
        audit,
        [
            "schedule.create",
            "schedule.create",
            "schedule.pause",
            "schedule.resume",
            "schedule.backfill",
            "schedule.backfill",
            "schedule.delete"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_schedules_are_400s_naming_the_field() {
    let srv = server().await;
    let a = srv.key("sched-bad", &["admin"]).await;
    let reader = srv.key("sched-bad", &["read"]).await;
    let ok = || {
        json!({
            "name": "n",
            "cron": "@hourly",
            "target": {"type": "job", "queue": "q", "kind": "k"},
        })
    };
    let with = |path: &[&str], v: Value| {
        let mut b = ok();
        let mut at = &mut b;
        for p in &path[..path.len() - 1] {
            at = &mut at[*p];
        }
        at[path[path.len() - 1]] = v;
        b
    };
    let interval = |tz: Value| {
        json!({
            "name": "n",
            "interval_ms": 5000,
            "timezone": tz,
            "target": {"type": "job", "queue": "q", "kind": "k"},
        })
    };
    let cases = [
        (with(&["cron"], json!("61 * * * *")), "cron"),
        (with(&["interval_ms"], json!(5000)), "cron"),
        (with(&["timezone"], json!("Mars/Base")), "timezone"),
        (with(&["timezone"], json!("A".repeat(65))), "timezone"),
        (with(&["cron"], json!("0 ".repeat(129))), "cron"),
        // An interval does not read its zone, but the zone is stored and shown: it must be
        // one (the fuzz run found a 65-character zone accepted with interval_ms).
        (interval(json!("Mars/Base")), "timezone"),
        (interval(json!("*".repeat(65))), "timezone"),
        (with(&["name"], json!("has space")), "name"),
        (with(&["name"], json!("")), "name"),
        (with(&["jitter_ms"], json!(-5)), "jitter_ms"),
        (with(&["catchup_max"], json!(0)), "catchup_max"),
        (with(&["missed"], json!("sometimes")), "missed"),
        (with(&["overlap"], json!("queue")), "overlap"),
        (with(&["start_at"], json!("yesterday")), "start_at"),
        (with(&["target", "type"], json!("email")), "target.type"),
        (
            with(&["target", "queue"], json!("bad queue!")),
            "target.queue",
        ),
        (with(&["target", "kind"], json!("")), "target.kind"),
        (with(&["target", "priority"], json!(10)), "target.priority"),
        (
            with(&["target", "max_attempts"], json!(0)),
            "target.max_attempts",
        ),
        (with(&["unknown"], json!(1)), "unknown"),
        // Optional fields are not nullable in the document: an explicit null is a 400
        // naming the field, as absent would not be.
        (with(&["cron"], Value::Null), "cron"),
        (with(&["timezone"], Value::Null), "timezone"),
        (with(&["paused"], Value::Null), "paused"),
        (with(&["grace_ms"], Value::Null), "grace_ms"),
        (with(&["overlap"], Value::Null), "overlap"),
        (
            with(&["target", "priority"], Value::Null),
            "target.priority",
        ),
        (
            with(&["target", "max_attempts"], Value::Null),
            "target.max_attempts",
        ),
        (
            with(
                &["target"],
                json!({"type": "job", "queue": "http", "kind": "http",
                                     "args": {"url": "http://169.254.169.254/"}}),
            ),
            "target.args.url",
        ),
    ];
    for (body, field) in cases {
        let (s, e, _) = srv
            .call("POST", "/v1/schedules", Some(&a), Some(body.clone()))
            .await;
        assert_eq!(s, 400, "{body} -> {e}");
        let got = error_of(&e).1.unwrap_or_default();
        assert!(
            got.contains(field),
            "{body}: expected field {field}, got {e}"
        );
    }
    let (s, _, _) = srv
        .call("POST", "/v1/schedules", Some(&reader), Some(ok()))
        .await;
    assert_eq!(s, 403);
    let long_after = format!("/v1/schedules?after={}", "a".repeat(129));
    for (path, field) in [
        ("/v1/schedules?limit=0", "limit"),
        (long_after.as_str(), "after"),
        ("/v1/schedules?colour=red", "colour"),
        ("/v1/schedules/n/preview?n=1001", "n"),
        ("/v1/schedules/n/fires?before=soon", "before"),
    ] {
        let (s, e, _) = srv.call("GET", path, Some(&a), None).await;
        assert_eq!(
            (s, error_of(&e).1.as_deref()),
            (400, Some(field)),
            "{path}: {e}"
        );
    }
    let (s, _, _) = srv
        .call("GET", "/v1/schedules/missing", Some(&a), None)
        .await;
    assert_eq!(s, 404);
}
