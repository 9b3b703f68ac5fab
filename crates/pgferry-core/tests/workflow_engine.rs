//! Workflows against real Postgres: every outcome kind, signals with inbox semantics,
//! children and their joins, cancel, retry from the failed step, correlation keys,
//! concurrency keys, rate limits, start/signal inside the caller's transaction, get/list,
//! and the worker loop end to end.

mod common;

use std::time::Duration;

use pgferry_core::workflow::{
    Child, ClaimedStep, InstanceFilter, Join, Machine, Outcome, Start, Target, Wake, Worker,
    WorkerConfig, Workflows,
};
use pgferry_core::Error;
use serde_json::{json, Value};

async fn wf() -> (common::Setup, Workflows) {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    (s, wf)
}

const LEASE: Duration = Duration::from_secs(30);

async fn claim(wf: &Workflows, queue: &str, n: usize) -> Vec<ClaimedStep> {
    wf.claim(queue, n, "w", LEASE).await.unwrap()
}

async fn claim_one(wf: &Workflows, queue: &str) -> ClaimedStep {
    let mut c = claim(wf, queue, 10).await;
    assert_eq!(c.len(), 1, "exactly one step due: {c:?}");
    c.remove(0)
}

async fn finish(wf: &Workflows, s: &ClaimedStep, o: Outcome) -> bool {
    wf.finish(&[(s.reference(), o)]).await.unwrap()[0]
}

async fn start(wf: &Workflows, kind: &str, queue: &str, input: Value) -> i64 {
    let st = wf.start(&Start::new(kind, queue, input)).await.unwrap();
    assert!(!st.duplicate);
    st.id
}

async fn status(wf: &Workflows, id: i64) -> String {
    wf.get(id).await.unwrap().status
}

#[tokio::test]
async fn next_next_done_with_state_and_history() {
    let (_s, wf) = wf().await;
    let id = start(&wf, "order", "q", json!({"n": 1})).await;
    let s1 = claim_one(&wf, "q").await;
    assert_eq!((s1.id, s1.step.as_str(), s1.attempt), (id, "start", 1));
    assert_eq!(s1.input, json!({"n": 1}));
    assert!(s1.inbox.is_none() && s1.children.is_none() && s1.wake.is_none());
    assert!(finish(&wf, &s1, Outcome::next("two", json!({"a": 1}))).await);
    // The same claim answered again is stale.
    assert!(!finish(&wf, &s1, Outcome::done(json!(0))).await);
    let s2 = claim_one(&wf, "q").await;
    assert_eq!((s2.step.as_str(), &s2.state), ("two", &json!({"a": 1})));
    assert!(finish(&wf, &s2, Outcome::next("three", json!({"a": 2}))).await);
    let s3 = claim_one(&wf, "q").await;
    assert!(finish(&wf, &s3, Outcome::done(json!({"ok": true}))).await);
    assert!(claim(&wf, "q", 10).await.is_empty(), "nothing after done");
    let info = wf.get(id).await.unwrap();
    assert_eq!(info.status, "done");
    assert_eq!(info.result, Some(json!({"ok": true})));
    assert_eq!(info.state, json!({"a": 2}));
    let outcomes: Vec<_> = info.history.iter().map(|h| h.outcome.as_str()).collect();
    assert_eq!(outcomes, ["next", "next", "done"]);
    let steps: Vec<_> = info.history.iter().map(|h| h.step.as_str()).collect();
    assert_eq!(steps, ["start", "two", "three"]);
}

#[tokio::test]
async fn retry_then_exhausted_and_retry_from_failed_step() {
    let (_s, wf) = wf().await;
    let mut st = Start::new("k", "q", json!({}));
    st.max_attempts = Some(2);
    let id = wf.start(&st).await.unwrap().id;
    let a1 = claim_one(&wf, "q").await;
    assert!(finish(&wf, &a1, Outcome::next("flaky", json!({}))).await);
    let a1 = claim_one(&wf, "q").await;
    assert!(finish(&wf, &a1, Outcome::retry(Duration::ZERO, "boom")).await);
    let a2 = claim_one(&wf, "q").await;
    assert_eq!((a2.step.as_str(), a2.attempt), ("flaky", 2));
    // A delayed retry is not claimable before its time.
    assert!(finish(&wf, &a2, Outcome::retry(Duration::from_secs(3600), "again")).await);
    let info = wf.get(id).await.unwrap();
    assert_eq!(
        (info.status.as_str(), info.attempt),
        ("failed", 2),
        "max_attempts 2 reached: {info:?}"
    );
    assert!(info.error.unwrap().contains("again"));
    assert!(claim(&wf, "q", 10).await.is_empty());
    // Retry from the failed step: attempt 1 of the same step, state kept.
    assert_eq!(wf.retry(id).await.unwrap(), "flaky");
    let again = claim_one(&wf, "q").await;
    assert_eq!((again.step.as_str(), again.attempt), ("flaky", 1));
    assert!(
        finish(
            &wf,
            &again,
            Outcome::retry(Duration::from_millis(150), "slow")
        )
        .await
    );
    assert!(claim(&wf, "q", 10).await.is_empty(), "delayed retry waits");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let a2 = claim_one(&wf, "q").await;
    assert_eq!(a2.attempt, 2);
    assert!(finish(&wf, &a2, Outcome::done(json!(1))).await);
    // Only failed instances can be retried.
    assert!(matches!(wf.retry(id).await, Err(Error::Conflict(_))));
    assert!(matches!(
        wf.retry(987654).await,
        Err(Error::NotFound { .. })
    ));
}

#[tokio::test]
async fn fail_and_sleep() {
    let (_s, wf) = wf().await;
    let id = start(&wf, "k", "q", json!({})).await;
    let s = claim_one(&wf, "q").await;
    assert!(
        finish(
            &wf,
            &s,
            Outcome::sleep_for(Duration::from_millis(300), "woke")
        )
        .await
    );
    assert_eq!(status(&wf, id).await, "sleeping");
    assert!(claim(&wf, "q", 10).await.is_empty(), "asleep");
    tokio::time::sleep(Duration::from_millis(450)).await;
    let s = claim_one(&wf, "q").await;
    assert_eq!((s.step.as_str(), s.attempt), ("woke", 1));
    assert!(finish(&wf, &s, Outcome::fail("bad order")).await);
    let info = wf.get(id).await.unwrap();
    assert_eq!(
        (info.status.as_str(), info.error.as_deref()),
        ("failed", Some("bad order"))
    );
}

#[tokio::test]
async fn signals_inbox_semantics() {
    let (_s, wf) = wf().await;
    wf.register(&[&Machine::new("k").with_inbox()])
        .await
        .unwrap();
    let id = start(&wf, "k", "q", json!({})).await;
    // Early signals wait in the inbox: "b" twice and "a" once, before any await.
    for (name, n) in [("b", 1), ("b", 2), ("a", 3)] {
        let sent = wf.signal(&Target::Id(id), name, &json!(n)).await.unwrap();
        assert!(!sent.delivered);
    }
    let s = claim_one(&wf, "q").await;
    // The await for "a" consumes "a" at once (kept since it came early), not "b".
    assert!(finish(&wf, &s, Outcome::await_signals(&["a"], "got_a", None)).await);
    let s = claim_one(&wf, "q").await;
    assert_eq!((s.step.as_str(), s.wake), ("got_a", Some(Wake::Signal)));
    let inbox = s.inbox.clone().unwrap();
    assert_eq!(inbox.len(), 1);
    assert_eq!(
        (inbox[0].name.as_str(), &inbox[0].payload),
        ("a", &json!(3))
    );
    // Two awaits for "b" consume the two "b" signals in order, each once.
    assert!(finish(&wf, &s, Outcome::await_signals(&["b"], "b1", None)).await);
    let s = claim_one(&wf, "q").await;
    assert_eq!(s.inbox.as_ref().unwrap()[0].payload, json!(1));
    assert!(finish(&wf, &s, Outcome::await_signals(&["b"], "b2", None)).await);
    let s = claim_one(&wf, "q").await;
    assert_eq!(s.inbox.as_ref().unwrap()[0].payload, json!(2));
    // Now nothing is in the inbox: the await parks; another name does not wake it.
    assert!(finish(&wf, &s, Outcome::await_signals(&["c", "d"], "cd", None)).await);
    assert_eq!(status(&wf, id).await, "awaiting");
    let other = wf.signal(&Target::Id(id), "x", &json!("no")).await.unwrap();
    assert!(!other.delivered);
    assert!(claim(&wf, "q", 10).await.is_empty());
    let sent = wf
        .signal(&Target::Id(id), "d", &json!("yes"))
        .await
        .unwrap();
    assert!(sent.delivered, "delivery to an awaiting instance");
    assert_eq!(
        status(&wf, id).await,
        "runnable",
        "runnable in the same statement"
    );
    let s = claim_one(&wf, "q").await;
    assert_eq!(s.inbox.as_ref().unwrap()[0].name, "d");
    assert_eq!(wf.get(id).await.unwrap().inbox_pending, 1, "x still waits");
    // Await timeout: resumes into its next step with Wake::Timeout.
    assert!(
        finish(
            &wf,
            &s,
            Outcome::await_signals(&["never"], "late", Some(Duration::from_millis(200)))
        )
        .await
    );
    assert!(claim(&wf, "q", 10).await.is_empty());
    tokio::time::sleep(Duration::from_millis(350)).await;
    let s = claim_one(&wf, "q").await;
    assert_eq!(s.step, "late");
    assert!(s.timed_out());
    assert!(finish(&wf, &s, Outcome::done(json!(null))).await);
    // Signals to an ended instance, or to nobody, are typed errors.
    assert!(matches!(
        wf.signal(&Target::Id(id), "a", &json!(1)).await,
        Err(Error::Conflict(_))
    ));
    assert!(matches!(
        wf.signal(&Target::Id(123456), "a", &json!(1)).await,
        Err(Error::NotFound { .. })
    ));
}

#[tokio::test]
async fn inbox_loaded_only_for_machines_that_declared_it() {
    let (_s, wf) = wf().await;
    let id = start(&wf, "plain", "q", json!({})).await;
    let s = claim_one(&wf, "q").await;
    assert!(finish(&wf, &s, Outcome::await_signals(&["go"], "next", None)).await);
    wf.signal(&Target::Id(id), "go", &json!(1)).await.unwrap();
    let s = claim_one(&wf, "q").await;
    assert_eq!(s.wake, Some(Wake::Signal));
    assert!(s.inbox.is_none(), "kind declared no inbox: nothing loaded");
}

#[tokio::test]
async fn correlation_keys_and_signal_by_key() {
    let (_s, wf) = wf().await;
    let mut st = Start::new("k", "q", json!({}));
    st.correlation_key = Some("order-7".into());
    let a = wf.start(&st).await.unwrap();
    let b = wf.start(&st).await.unwrap();
    assert!(!a.duplicate && b.duplicate && a.id == b.id);
    // Another queue has its own keys.
    let mut other = st.clone();
    other.queue = "q2".into();
    assert!(!wf.start(&other).await.unwrap().duplicate);
    let s = claim_one(&wf, "q").await;
    assert!(finish(&wf, &s, Outcome::await_signals(&["paid"], "ship", None)).await);
    let target = Target::Correlation {
        queue: "q".into(),
        key: "order-7".into(),
    };
    let sent = wf
        .signal(&target, "paid", &json!({"amount": 5}))
        .await
        .unwrap();
    assert!(sent.delivered && sent.instance_id == a.id);
    let s = claim_one(&wf, "q").await;
    assert!(finish(&wf, &s, Outcome::done(json!(1))).await);
    // Once it ended, the key is free again.
    let c = wf.start(&st).await.unwrap();
    assert!(!c.duplicate && c.id != a.id);
}

#[tokio::test]
async fn children_join_all_and_any_and_failure_policies() {
    let (_s, wf) = wf().await;
    wf.register(&[&Machine::new("parent").with_children()])
        .await
        .unwrap();
    let pid = start(&wf, "parent", "q", json!({})).await;
    let p = claim_one(&wf, "q").await;
    let kids: Vec<_> = (0..3).map(|i| Child::new("kid", json!({"i": i}))).collect();
    assert!(finish(&wf, &p, Outcome::spawn(kids, "joined", Join::All)).await);
    let info = wf.get(pid).await.unwrap();
    assert_eq!(
        (info.status.as_str(), info.children_pending),
        ("waiting_children", 3)
    );
    let kids = claim(&wf, "q", 10).await;
    assert_eq!(kids.len(), 3);
    for k in &kids {
        assert_eq!(k.parent_id, Some(pid));
        let i = k.input["i"].as_i64().unwrap();
        assert!(finish(&wf, k, Outcome::done(json!(i * 10))).await);
        let pending = wf.get(pid).await.unwrap();
        if i < 2 {
            assert_eq!(pending.status, "waiting_children");
        }
    }
    let p = claim_one(&wf, "q").await;
    assert_eq!((p.step.as_str(), p.wake), ("joined", Some(Wake::Children)));
    let results = p.children.clone().unwrap();
    let mut got: Vec<_> = results.iter().map(|c| c.result.clone().unwrap()).collect();
    got.sort_by_key(|v| v.as_i64());
    assert_eq!(got, [json!(0), json!(10), json!(20)]);

    // any: the first child to end resumes the parent, the others are cancelled.
    let kids: Vec<_> = (0..3).map(|i| Child::new("kid", json!({"i": i}))).collect();
    assert!(finish(&wf, &p, Outcome::spawn(kids, "first", Join::Any)).await);
    let kids = claim(&wf, "q", 10).await;
    assert!(finish(&wf, &kids[1], Outcome::done(json!("won"))).await);
    assert!(
        !finish(&wf, &kids[0], Outcome::done(json!("late"))).await,
        "cancelled sibling"
    );
    let p = claim_one(&wf, "q").await;
    let results = p.children.clone().unwrap();
    let statuses: Vec<_> = results.iter().map(|c| c.status.as_str()).collect();
    assert_eq!(statuses, ["cancelled", "done", "cancelled"]);

    // deliver: a failed child is handed to the parent.
    let kids = vec![Child::new("kid", json!(1)), Child::new("kid", json!(2))];
    let o = Outcome::spawn(kids, "mixed", Join::All).delivering_child_failures();
    assert!(finish(&wf, &p, o).await);
    let kids = claim(&wf, "q", 10).await;
    assert!(finish(&wf, &kids[0], Outcome::fail("kid broke")).await);
    assert_eq!(status(&wf, pid).await, "waiting_children");
    assert!(finish(&wf, &kids[1], Outcome::done(json!(2))).await);
    let p = claim_one(&wf, "q").await;
    let results = p.children.clone().unwrap();
    assert_eq!(results[0].error.as_deref(), Some("kid broke"));

    // fail_parent (the default): the parent fails, the other child is cancelled.
    let kids = vec![Child::new("kid", json!(1)), Child::new("kid", json!(2))];
    assert!(finish(&wf, &p, Outcome::spawn(kids, "never", Join::All)).await);
    let kids = claim(&wf, "q", 10).await;
    assert!(finish(&wf, &kids[0], Outcome::fail("kid broke")).await);
    let info = wf.get(pid).await.unwrap();
    assert_eq!(info.status, "failed");
    assert!(info.error.unwrap().contains("kid broke"));
    assert_eq!(status(&wf, kids[1].id).await, "cancelled");
    assert!(claim(&wf, "q", 10).await.is_empty());
}

#[tokio::test]
async fn cancel_cascades_and_no_step_runs_after() {
    let (_s, wf) = wf().await;
    let pid = start(&wf, "parent", "q", json!({})).await;
    let p = claim_one(&wf, "q").await;
    let kids = vec![Child::new("kid", json!(1)), Child::new("kid", json!(2))];
    assert!(finish(&wf, &p, Outcome::spawn(kids, "joined", Join::All)).await);
    let kids = claim(&wf, "q", 1).await; // one child running, one runnable
    assert_eq!(
        wf.cancel(pid, Some("operator")).await.unwrap(),
        "waiting_children"
    );
    let listed = wf
        .list(&InstanceFilter {
            queue: "q".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(
        listed.instances.iter().all(|i| i.status == "cancelled"),
        "{listed:?}"
    );
    assert!(claim(&wf, "q", 10).await.is_empty(), "no step after cancel");
    assert!(
        !finish(&wf, &kids[0], Outcome::done(json!(1))).await,
        "running child's outcome is stale"
    );
    // Cancelling again changes nothing.
    assert_eq!(wf.cancel(pid, None).await.unwrap(), "cancelled");
    assert!(matches!(
        wf.cancel(424242, None).await,
        Err(Error::NotFound { .. })
    ));
}

#[tokio::test]
async fn concurrency_key_gates_at_emission() {
    let (s, wf) = wf().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut st = Start::new("k", "q", json!({"i": i}));
        st.concurrency_key = Some("tenant-1".into());
        st.concurrency_limit = Some(2);
        ids.push(wf.start(&st).await.unwrap().id);
    }
    let other = start(&wf, "k", "q", json!({"other": true})).await;
    let admin = s.db.connect().await;
    let ready: i64 = admin
        .query_one("SELECT count(*) FROM pgferry.wf_ready", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        ready, 3,
        "two slots of the key and the unkeyed instance: blocked steps stay out of the picker"
    );
    let first = claim(&wf, "q", 10).await;
    assert_eq!(first.len(), 3);
    assert!(first.iter().any(|c| c.id == other));
    // Finishing one keyed step promotes the oldest waiter in the same statement.
    let keyed: Vec<_> = first.iter().filter(|c| c.id != other).collect();
    assert!(finish(&wf, keyed[0], Outcome::done(json!(1))).await);
    let next = claim(&wf, "q", 10).await;
    assert_eq!(next.iter().map(|c| c.id).collect::<Vec<_>>(), [ids[2]]);
    // A `next` gives its slot back and queues behind the waiters.
    assert!(finish(&wf, keyed[1], Outcome::next("again", json!({}))).await);
    let next2 = claim(&wf, "q", 10).await;
    assert_eq!(next2.iter().map(|c| c.id).collect::<Vec<_>>(), [ids[3]]);
    assert_eq!(status(&wf, keyed[1].id).await, "queued");
    // Cancelling a running keyed instance frees its slot too.
    wf.cancel(ids[2], None).await.unwrap();
    let next3 = claim(&wf, "q", 10).await;
    assert_eq!(next3.iter().map(|c| c.id).collect::<Vec<_>>(), [ids[4]]);
    let running: i32 = admin
        .query_one(
            "SELECT running FROM pgferry.wf_keys WHERE key = 'tenant-1'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(running, 2);
}

#[tokio::test]
async fn rate_limit_delays_without_reclaiming() {
    let (_s, wf) = wf().await;
    // 5 steps per second, bursts of 2.
    wf.set_rate_limit("api", 5.0, 2.0).await.unwrap();
    for i in 0..4 {
        let mut st = Start::new("k", "q", json!({"i": i}));
        st.rate_key = Some("api".into());
        wf.start(&st).await.unwrap();
    }
    assert_eq!(claim(&wf, "q", 10).await.len(), 2, "the burst");
    assert!(
        claim(&wf, "q", 10).await.is_empty(),
        "the others wait for tokens"
    );
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(claim(&wf, "q", 10).await.len(), 2, "one token per 200 ms");
    assert!(matches!(
        wf.set_rate_limit("api", 0.0, 1.0).await,
        Err(Error::InvalidArgument {
            field: "per_second",
            ..
        })
    ));
}

#[tokio::test]
async fn start_and_signal_inside_the_callers_transaction() {
    let (s, wf) = wf().await;
    let mut client = s.db.connect().await;
    let tx = client.transaction().await.unwrap();
    let st = Workflows::start_tx(&tx, &Start::new("k", "q", json!({})))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(matches!(wf.get(st.id).await, Err(Error::NotFound { .. })));
    assert!(claim(&wf, "q", 10).await.is_empty());
    let tx = client.transaction().await.unwrap();
    let st = Workflows::start_tx(&tx, &Start::new("k", "q", json!({})))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let c = claim_one(&wf, "q").await;
    assert_eq!(c.id, st.id);
    assert!(finish(&wf, &c, Outcome::await_signals(&["go"], "went", None)).await);
    let tx = client.transaction().await.unwrap();
    Workflows::signal_tx(&tx, &Target::Id(st.id), "go", &json!(1))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(
        status(&wf, st.id).await,
        "awaiting",
        "a rolled-back signal never happened"
    );
    // The SQL function, as any language would call it in its own transaction.
    client
        .batch_execute(
            "BEGIN;
             SELECT * FROM pgferry.wf_start('k', 'q', 'start', '{\"from\": \"sql\"}', NULL,
                                            'sql-1', NULL, NULL, NULL, 0::smallint, NULL, NULL);
             COMMIT;",
        )
        .await
        .unwrap();
    let c = claim_one(&wf, "q").await;
    assert_eq!(c.input, json!({"from": "sql"}));
}

#[tokio::test]
async fn bad_input_is_a_typed_error_naming_the_field() {
    let (_s, wf) = wf().await;
    let cases: Vec<(Start, &str)> = vec![
        (Start::new("bad kind!", "q", json!({})), "kind"),
        (Start::new("k", "Bad Queue", json!({})), "queue"),
        (
            {
                let mut s = Start::new("k", "q", json!({}));
                s.priority = 10;
                s
            },
            "priority",
        ),
        (
            {
                let mut s = Start::new("k", "q", json!({}));
                s.step = String::new();
                s
            },
            "step",
        ),
        (
            {
                let mut s = Start::new("k", "q", json!({}));
                s.max_attempts = Some(0);
                s
            },
            "max_attempts",
        ),
        (
            {
                let mut s = Start::new("k", "q", json!({}));
                s.concurrency_limit = Some(0);
                s
            },
            "concurrency_limit",
        ),
        (Start::new("k", "q", json!("x".repeat(2 << 20))), "input"),
    ];
    for (st, field) in cases {
        let e = wf.start(&st).await.unwrap_err();
        let named = match &e {
            Error::InvalidArgument { field: f, .. } | Error::InvalidName { field: f, .. } => *f,
            other => panic!("{other:?}"),
        };
        assert_eq!(named, field, "{e}");
    }
    let e = wf
        .list(&InstanceFilter {
            queue: "q".into(),
            status: Some("sideways".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(
        e,
        Error::InvalidArgument {
            field: "status",
            ..
        }
    ));
}

#[tokio::test]
async fn list_pages_with_keyset_and_has_more() {
    let (_s, wf) = wf().await;
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(start(&wf, if i % 2 == 0 { "even" } else { "odd" }, "q", json!(i)).await);
    }
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = wf
            .list(&InstanceFilter {
                queue: "q".into(),
                before,
                limit: 3,
                ..Default::default()
            })
            .await
            .unwrap();
        seen.extend(page.instances.iter().map(|i| i.id));
        if !page.has_more {
            assert!(page.next.is_none());
            break;
        }
        before = page.next;
    }
    ids.reverse();
    assert_eq!(seen, ids);
    let odd = wf
        .list(&InstanceFilter {
            queue: "q".into(),
            kind: Some("odd".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(odd.instances.len(), 3);
    assert!(!odd.has_more);
}

#[tokio::test]
async fn worker_runs_a_machine_with_a_signal_and_children() {
    let (_s, wf) = wf().await;
    let order = Machine::new("order")
        .with_inbox()
        .with_children()
        .step("start", |s: ClaimedStep| async move {
            let n = s.input["items"].as_u64().unwrap_or(0);
            let kids = (0..n)
                .map(|i| Child::new("item", json!({"i": i})))
                .collect();
            Outcome::spawn(kids, "packed", Join::All)
        })
        .step("packed", |s: ClaimedStep| async move {
            let total: i64 = s
                .children
                .unwrap_or_default()
                .iter()
                .filter_map(|c| c.result.as_ref().and_then(Value::as_i64))
                .sum();
            Outcome::await_signals(&["paid"], "ship", Some(Duration::from_secs(60)))
                .with_state(json!({"total": total}))
        })
        .step("ship", |s: ClaimedStep| async move {
            let paid = s.inbox.unwrap_or_default()[0].payload.clone();
            Outcome::done(json!({"total": s.state["total"], "paid": paid}))
        });
    let item = Machine::new("item").step("start", |s: ClaimedStep| async move {
        Outcome::done(json!(s.input["i"].as_i64().unwrap() + 1))
    });
    let worker = Worker::new(wf.clone(), WorkerConfig::new("shop"))
        .machine(order)
        .machine(item);
    let (stop, rx) = tokio::sync::watch::channel(false);
    let handle = tokio::spawn(worker.run(rx));
    let mut st = Start::new("order", "shop", json!({"items": 4}));
    st.correlation_key = Some("o-1".into());
    let id = wf.start(&st).await.unwrap().id;
    let target = Target::Correlation {
        queue: "shop".into(),
        key: "o-1".into(),
    };
    // Signal as soon as the order awaits it (or earlier: the inbox keeps it).
    wf.signal(&target, "paid", &json!(10)).await.unwrap();
    let mut info = wf.get(id).await.unwrap();
    for _ in 0..200 {
        if info.status == "done" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        info = wf.get(id).await.unwrap();
    }
    stop.send(true).unwrap();
    handle.await.unwrap().unwrap();
    assert_eq!(info.status, "done", "{info:?}");
    assert_eq!(info.result, Some(json!({"total": 10, "paid": 10})));
}

#[tokio::test]
async fn retention_removes_only_ended_instances_with_their_rows() {
    let (s, wf) = wf().await;
    let ended = start(&wf, "k", "q", json!({})).await;
    let kept = start(&wf, "k", "q", json!({})).await;
    let c = claim(&wf, "q", 10).await;
    let first = c.iter().find(|c| c.id == ended).unwrap();
    assert!(finish(&wf, first, Outcome::await_signals(&["go"], "a", None)).await);
    wf.signal(&Target::Id(ended), "go", &json!(1))
        .await
        .unwrap();
    let again = claim_one(&wf, "q").await;
    assert!(finish(&wf, &again, Outcome::done(json!(1))).await);
    let client = s.db.connect().await;
    let week = Duration::from_secs(7 * 24 * 3600);
    let retention = pgferry_core::workflow::retention::prune;
    assert_eq!(retention(&client, week, 100).await.unwrap(), 0, "too young");
    assert_eq!(retention(&client, Duration::ZERO, 100).await.unwrap(), 1);
    assert!(matches!(wf.get(ended).await, Err(Error::NotFound { .. })));
    assert_eq!(status(&wf, kept).await, "running");
    let left: i64 = client
        .query_one(
            "SELECT (SELECT count(*) FROM pgferry.wf_signals WHERE instance_id = $1)
                  + (SELECT count(*) FROM pgferry.wf_steps WHERE instance_id = $1)",
            &[&ended],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

/// An outcome that does not set the state keeps it: Rust sends `"state": null` for "no
/// state" (as an SDK may), and that must not wipe what an earlier step wrote.
#[tokio::test]
async fn outcomes_without_state_keep_the_state() {
    let (_s, wf) = wf().await;
    let id = start(&wf, "k", "q", json!({})).await;
    let s = claim_one(&wf, "q").await;
    assert!(finish(&wf, &s, Outcome::next("two", json!({"kept": 1}))).await);
    let s = claim_one(&wf, "q").await;
    assert!(finish(&wf, &s, Outcome::sleep_for(Duration::ZERO, "three")).await);
    assert_eq!(wf.get(id).await.unwrap().state, json!({"kept": 1}));
    let s = loop {
        if let Some(s) = claim(&wf, "q", 10).await.pop() {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((s.step.as_str(), &s.state), ("three", &json!({"kept": 1})));
    let await_ = Outcome::await_signals(&["go"], "four", None);
    assert!(finish(&wf, &s, await_).await);
    assert_eq!(wf.get(id).await.unwrap().state, json!({"kept": 1}));
}
