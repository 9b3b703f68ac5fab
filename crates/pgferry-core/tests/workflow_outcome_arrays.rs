//! The engine sends a batch of outcomes as aligned arrays (`pgferry.wf_finish_arrays`,
//! docs/performance.md "Outcomes in arrays"): every kind must land as it did from the JSON
//! array, in the set-based part (next, retry, sleep, done: columns, and p_rest for a
//! retry's reason and delay and a sleep's wake-up) and through wf_apply (await, spawn,
//! fail from p_rest; a keyed `next` and a child's `done` from the object built from the
//! columns), with each answer in the given order.

mod common;

use std::time::Duration;

use pgferry_core::workflow::{Child, Join, Outcome, Start, StepRef, Workflows};
use serde_json::{json, Value};

async fn row(admin: &tokio_postgres::Client, id: i64) -> tokio_postgres::Row {
    admin
        .query_one(
            "SELECT status, step, state, result, error, attempt,
                    (SELECT visible_at > now() + interval '50 minutes'
                       FROM pgferry.wf_ready r WHERE r.instance_id = i.id) AS far
               FROM pgferry.wf_instances i WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn every_kind_of_outcome_lands_from_the_arrays_in_the_given_order() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    for i in 0..8 {
        wf.start(&Start::new("mix", "arr", json!({ "i": i })))
            .await
            .unwrap();
    }
    let mut claimed = wf
        .claim("arr", 8, "w", Duration::from_secs(30))
        .await
        .unwrap();
    claimed.sort_by_key(|c| c.id);
    assert_eq!(claimed.len(), 8);
    let r: Vec<StepRef> = claimed.iter().map(|c| c.reference()).collect();
    let stale = StepRef {
        seq: r[1].seq + 7,
        ..r[1]
    };
    // Given out of id order, with a stale outcome and a repeat of the first.
    let batch = vec![
        (r[7], Outcome::fail("gave up")),
        (r[0], Outcome::next("two", json!({"k": "a"}))),
        (stale, Outcome::next("two", json!({"k": "b"}))),
        (r[2], Outcome::retry(Duration::from_secs(3600), "flaky")),
        (
            r[3],
            Outcome::sleep_for(Duration::from_secs(3600), "woken").with_state(json!({"k": "d"})),
        ),
        (
            r[4],
            Outcome::await_signals(&["go"], "two", None).with_state(json!({"k": "e"})),
        ),
        (r[5], Outcome::done(json!({"ok": 5}))),
        (r[6], Outcome::done(Value::Null)),
        (r[0], Outcome::next("three", json!({"k": "again"}))),
    ];
    let done = wf
        .finish_continuing(&batch, Duration::from_secs(30))
        .await
        .unwrap();
    let got: Vec<(bool, Option<String>)> = done
        .iter()
        .map(|f| (f.applied, f.continued.as_ref().map(|c| c.step.clone())))
        .collect();
    assert_eq!(
        got,
        vec![
            (true, None),
            (true, Some("two".to_owned())),
            (false, None),
            (true, None),
            (true, None),
            (true, None),
            (true, None),
            (true, None),
            (false, None),
        ]
    );
    let cont = done[1].continued.as_ref().unwrap();
    assert_eq!(
        (cont.state.clone(), cont.seq),
        (json!({"k": "a"}), r[0].seq + 1)
    );

    let admin = s.db.connect().await;
    let a = row(&admin, r[0].id).await;
    assert_eq!(
        (a.get::<_, String>("status"), a.get::<_, String>("step")),
        ("running".into(), "two".into())
    );
    let b = row(&admin, r[1].id).await;
    assert_eq!(
        (b.get::<_, String>("status"), b.get::<_, String>("step")),
        ("running".into(), "start".into())
    );
    let c = row(&admin, r[2].id).await;
    assert_eq!(
        (
            c.get::<_, String>("status"),
            c.get::<_, i32>("attempt"),
            c.get::<_, Option<String>>("error"),
            c.get::<_, Option<bool>>("far"),
        ),
        ("runnable".into(), 2, Some("flaky".into()), Some(true))
    );
    let d = row(&admin, r[3].id).await;
    assert_eq!(
        (
            d.get::<_, String>("status"),
            d.get::<_, String>("step"),
            d.get::<_, Value>("state"),
            d.get::<_, Option<bool>>("far"),
        ),
        (
            "sleeping".into(),
            "woken".into(),
            json!({"k": "d"}),
            Some(true)
        )
    );
    let e = row(&admin, r[4].id).await;
    assert_eq!(
        (e.get::<_, String>("status"), e.get::<_, Value>("state")),
        ("awaiting".into(), json!({"k": "e"}))
    );
    let f = row(&admin, r[5].id).await;
    assert_eq!(
        (
            f.get::<_, String>("status"),
            f.get::<_, Option<Value>>("result")
        ),
        ("done".into(), Some(json!({"ok": 5})))
    );
    let g = row(&admin, r[6].id).await;
    assert_eq!(
        (
            g.get::<_, String>("status"),
            g.get::<_, Option<Value>>("result")
        ),
        ("done".into(), Some(Value::Null))
    );
    let h = row(&admin, r[7].id).await;
    assert_eq!(
        (
            h.get::<_, String>("status"),
            h.get::<_, Option<String>>("error")
        ),
        ("failed".into(), Some("gave up".into()))
    );
    // The history rows the plain part wrote: the retry's reason from p_rest.
    let reason: Option<String> = admin
        .query_one(
            "SELECT error FROM pgferry.wf_steps WHERE instance_id = $1 AND outcome = 'retry'",
            &[&r[2].id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(reason.as_deref(), Some("flaky"));
}

/// A `next` of a keyed instance and a child's `done` are not plain: wf_apply gets the JSON
/// object built from their columns, with the step, the state and the result.
#[tokio::test]
async fn outcomes_that_are_not_plain_keep_their_step_state_and_result() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let mut keyed = Start::new("keyed", "arr", json!({}));
    keyed.concurrency_key = Some("k1".into());
    keyed.concurrency_limit = Some(1);
    let keyed = wf.start(&keyed).await.unwrap().id;
    let parent = wf
        .start(&Start::new("parent", "arr", json!({})))
        .await
        .unwrap()
        .id;
    let claimed = wf
        .claim("arr", 2, "w", Duration::from_secs(30))
        .await
        .unwrap();
    let refs = |id: i64| claimed.iter().find(|c| c.id == id).unwrap().reference();
    let batch = vec![
        (refs(keyed), Outcome::next("two", json!({"kept": true}))),
        (
            refs(parent),
            Outcome::spawn(
                vec![Child::new("leaf", json!({"n": 1}))],
                "joined",
                Join::All,
            ),
        ),
    ];
    let done = wf.finish(&batch).await.unwrap();
    assert_eq!(done, vec![true, true]);
    let admin = s.db.connect().await;
    let k = row(&admin, keyed).await;
    assert_eq!(
        (k.get::<_, String>("step"), k.get::<_, Value>("state")),
        ("two".into(), json!({"kept": true})),
        "status {}",
        k.get::<_, String>("status")
    );

    let children = wf
        .claim("arr", 10, "w", Duration::from_secs(30))
        .await
        .unwrap();
    let child = children
        .iter()
        .find(|c| c.kind == "leaf")
        .expect("the child");
    let done = wf
        .finish(&[(child.reference(), Outcome::done(json!({"leaf": "result"})))])
        .await
        .unwrap();
    assert_eq!(done, vec![true]);
    let c = row(&admin, child.id).await;
    assert_eq!(
        (
            c.get::<_, String>("status"),
            c.get::<_, Option<Value>>("result")
        ),
        ("done".into(), Some(json!({"leaf": "result"})))
    );
    // The parent's join ran: it is due with its next step.
    let p = row(&admin, parent).await;
    assert_eq!(
        (p.get::<_, String>("status"), p.get::<_, String>("step")),
        ("runnable".into(), "joined".into())
    );
}

#[tokio::test]
async fn arrays_of_different_lengths_are_refused_and_nothing_is_written() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let id = wf
        .start(&Start::new("mix", "arr", json!({})))
        .await
        .unwrap()
        .id;
    let c = &wf
        .claim("arr", 1, "w", Duration::from_secs(30))
        .await
        .unwrap()[0];
    let admin = s.db.connect().await;
    let err = admin
        .query(
            "SELECT * FROM pgferry.wf_finish_arrays(ARRAY[$1::bigint], ARRAY[$2::int],
                    ARRAY['next'], ARRAY['two'], '{}'::jsonb[], ARRAY[NULL::jsonb],
                    ARRAY[NULL::float8], ARRAY[false], ARRAY[NULL::jsonb])",
            &[&id, &c.seq],
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::INVALID_PARAMETER_VALUE),
        "{err}"
    );
    let r = row(&admin, id).await;
    assert_eq!(
        (r.get::<_, String>("status"), r.get::<_, String>("step")),
        ("running".into(), "start".into())
    );
}
