//! The claim order of receipts this server's dispatchers handed out, so that the completion
//! lanes can give `pgferry.complete()` a receipt's outcomes whole and in claim order: its
//! whole-receipt fast path (ADR 0006 §3) is then one INSERT with no per-outcome work,
//! instead of the set-based statement (measured: ≈6 µs against ≈30 µs of backend time per
//! outcome). A dispatcher's claim is dealt over many streams, so without this a receipt's
//! outcomes come back split over flushes and out of order, and the fast path never applies.
//!
//! Only a hint: an outcome set that does not match a registered receipt exactly takes the
//! set-based path as before, and entries are dropped when used or after a while.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pgferry_core::{ClaimedJob, Outcome, OutcomeKind};

/// Receipts are forgotten after this: a receipt completed piecemeal (the set-based path)
/// is never used, and one whose jobs run long is unlikely to come back whole …
const KEEP: Duration = Duration::from_secs(60);
/// … or when this many are registered (≈2 KiB each at 128 jobs; a busy server completes
/// them within milliseconds).
const MAX_RECEIPTS: usize = 10_000;

/// Receipt id -> its attempts (job id, attempt, job segment) in claim order.
#[derive(Default)]
pub struct ReceiptBook {
    inner: Mutex<Book>,
    /// Receipts completed whole, in claim order, in one statement.
    whole: AtomicU64,
}

#[derive(Default)]
struct Book {
    receipts: HashMap<i64, Vec<(i64, i32, i16)>>,
    added: VecDeque<(Instant, i64)>,
}

impl ReceiptBook {
    /// Records the receipts of one claim (the engine returns each receipt's jobs in its
    /// claim order).
    pub fn register(&self, jobs: &[ClaimedJob]) {
        if jobs.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut book = self.inner.lock().expect("receipt book");
        for j in jobs {
            if !book.receipts.contains_key(&j.receipt_id) {
                book.added.push_back((now, j.receipt_id));
            }
            book.receipts
                .entry(j.receipt_id)
                .or_default()
                .push((j.job_id, j.attempt, j.segment));
        }
        while let Some(&(at, r)) = book.added.front() {
            if now.duration_since(at) < KEEP && book.receipts.len() <= MAX_RECEIPTS {
                break;
            }
            book.added.pop_front();
            book.receipts.remove(&r);
        }
    }

    /// For a batch naming one registered receipt, successes only: how many of its
    /// outcomes are not in the batch yet. `None`: the batch can never be one whole receipt
    /// (several receipts, failures, results, or a receipt not handed out here).
    pub fn missing(&self, items: &[&Outcome]) -> Option<usize> {
        let r = single_receipt(items.iter().copied())?;
        let book = self.inner.lock().expect("receipt book");
        let want = book.receipts.get(&r)?.len();
        want.checked_sub(items.len())
    }

    /// When `items` are exactly one registered receipt's attempts: the order of `items`
    /// that is the receipt's claim order (`items[order[k]]` is its k-th attempt).
    pub fn claim_order(&self, items: &[Outcome]) -> Option<(i64, Vec<usize>)> {
        let r = single_receipt(items.iter())?;
        let book = self.inner.lock().expect("receipt book");
        let attempts = book.receipts.get(&r)?;
        if attempts.len() != items.len() {
            return None;
        }
        let at: HashMap<i64, usize> = items
            .iter()
            .enumerate()
            .map(|(i, o)| (o.job_id, i))
            .collect();
        if at.len() != items.len() {
            return None;
        }
        let mut order = Vec::with_capacity(items.len());
        for &(job, attempt, segment) in attempts {
            let i = *at.get(&job)?;
            let o = &items[i];
            if o.attempt != attempt || o.segment != segment {
                return None;
            }
            order.push(i);
        }
        Some((r, order))
    }

    /// Receipts written whole so far.
    pub fn whole(&self) -> u64 {
        self.whole.load(Ordering::Relaxed)
    }

    /// Drops a receipt whose whole-receipt completion committed.
    pub fn written_whole(&self, receipt_id: i64) {
        self.whole.fetch_add(1, Ordering::Relaxed);
        self.inner
            .lock()
            .expect("receipt book")
            .receipts
            .remove(&receipt_id);
    }

    /// Receipts currently registered.
    pub fn len(&self) -> usize {
        self.inner.lock().expect("receipt book").receipts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The receipt all outcomes name, if they are all plain successes without a result (what
/// the fast path takes).
fn single_receipt<'a>(mut items: impl Iterator<Item = &'a Outcome>) -> Option<i64> {
    let first = items.next()?;
    let plain = |o: &Outcome| o.kind == OutcomeKind::Completed && o.result.is_none();
    if !plain(first) {
        return None;
    }
    let r = first.receipt_id;
    items.all(|o| o.receipt_id == r && plain(o)).then_some(r)
}
