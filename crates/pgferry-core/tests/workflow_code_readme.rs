//! The README's Rust example of a code-first workflow, as written there, against real
//! Postgres (so the README cannot drift from the API).

mod common;

use pgferry_core::workflow::code;
use tokio::sync::watch;

/// The README's example, as written there: reserve, wait for "paid", ship in a child.
#[tokio::test]
async fn the_readme_order_example_runs() {
    let s = common::setup().await;
    let engine = s.engine.clone();
    let (_stop, shutdown_rx) = watch::channel(false);
    let tracking = async move {
        use pgferry_core::workflow::code::{Ctx, Workflow};
        use pgferry_core::workflow::{Worker, WorkerConfig, Workflows};
        use serde::{Deserialize, Serialize};
        use std::time::Duration;

        #[derive(Clone, Serialize, Deserialize)]
        struct Order {
            order_id: String,
            amount: i64,
        }

        let shipping = Workflow::new("shipping", |ctx: Ctx, o: Order| async move {
            ctx.step("label", || async move {
                Ok::<_, String>(format!("TRACK-{}", o.order_id))
            })
            .await
        });
        let ship = shipping.clone();
        let order = Workflow::new("order", move |ctx: Ctx, o: Order| {
            let ship = ship.clone();
            async move {
                ctx.step("reserve", || async { Ok::<_, String>(true) })
                    .await?; // runs once
                let paid = ctx
                    .wait_for_signal(&["paid"], Some(Duration::from_secs(3600)))
                    .await;
                if paid.is_none() {
                    return Ok::<_, Box<dyn std::error::Error + Send + Sync>>(None);
                    // timed out
                }
                Ok(Some(ctx.child(&ship, &o).await?)) // a child workflow
            }
        });

        let wf = Workflows::of(&engine);
        tokio::spawn(
            Worker::new(wf.clone(), WorkerConfig::new("shop"))
                .machine(order.machine())
                .machine(shipping.machine())
                .run(shutdown_rx),
        );

        let handle = order
            .start(
                &wf,
                "shop",
                &Order {
                    order_id: "o-1".into(),
                    amount: 30,
                },
            )
            .await?;
        handle
            .signal("paid", &serde_json::json!({ "amount": 30 }))
            .await?;
        let tracking: Option<String> = handle.result(Duration::from_secs(30)).await?;
        Ok::<_, code::Error>(tracking)
    };
    assert_eq!(tracking.await.unwrap(), Some("TRACK-o-1".to_string()));
}
