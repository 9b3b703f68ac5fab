//! Built-in code-first workflows: what `pgferry bench workflow` measures and what the
//! `pgferry workflow replay --kind K` command can replay without the user's code. A user's
//! own workflows are replayed by calling [`super::replay_kind`] from their own binary or
//! test (a CLI binary cannot load their Rust code).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Ctx, Replayable, Workflow};

/// The bench's input: `{"i": n}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Numbered {
    pub i: i64,
}

/// Three steps, each adding to the last one's result (the code-first twin of the bench's
/// 3-step machine).
pub fn three_steps() -> Workflow<Numbered, i64> {
    Workflow::new("code_three", |ctx: Ctx, input: Numbered| async move {
        let a = ctx
            .step("one", || async move { Ok::<_, String>(input.i) })
            .await?;
        let b = ctx
            .step("two", || async move { Ok::<_, String>(a + 1) })
            .await?;
        ctx.step("three", || async move { Ok::<_, String>(b + 1) })
            .await
    })
}

/// An order as in the README: reserve, wait up to `payment_timeout_s` for `paid`, ship
/// through a child workflow.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Order {
    pub order_id: String,
    pub amount: i64,
    #[serde(default = "an_hour")]
    pub payment_timeout_s: u64,
}

fn an_hour() -> u64 {
    3600
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderResult {
    pub order_id: String,
    pub paid: bool,
    pub tracking: Option<String>,
}

pub fn shipping() -> Workflow<Order, String> {
    Workflow::new("example_shipping", |ctx: Ctx, order: Order| async move {
        ctx.step("label", || async move {
            Ok::<_, String>(format!("TRACK-{}", order.order_id))
        })
        .await
    })
}

pub fn order() -> Workflow<Order, OrderResult> {
    Workflow::new("example_order", |ctx: Ctx, order: Order| async move {
        let id = order.order_id.clone();
        ctx.step("reserve", || async move { Ok::<_, String>(true) })
            .await?;
        let timeout = Duration::from_secs(order.payment_timeout_s);
        let Some(_paid) = ctx.wait_for_signal(&["paid"], Some(timeout)).await else {
            ctx.step("release", || async move { Ok::<_, String>(()) })
                .await?;
            return Ok::<_, Box<dyn std::error::Error + Send + Sync>>(OrderResult {
                order_id: id,
                paid: false,
                tracking: None,
            });
        };
        let tracking = ctx.child(&shipping(), &order).await?;
        Ok(OrderResult {
            order_id: id,
            paid: true,
            tracking: Some(tracking),
        })
    })
}

/// The workflows `pgferry workflow replay --kind K` knows.
pub fn registry() -> Vec<Box<dyn Replayable>> {
    vec![
        Box::new(three_steps()),
        Box::new(order()),
        Box::new(shipping()),
    ]
}
