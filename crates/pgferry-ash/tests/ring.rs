//! Rollups agree with the raw samples over the same window; the ring rotates by
//! TRUNCATE, gives up (and retries) rather than blocking readers, and readers running
//! during rotations never fail.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use pgferry_ash::read::{self, Window};
use pgferry_ash::seed;

/// Session-seconds per wait type in [since, until) straight from the raw samples.
const RAW_BY_WAIT: &str = "
    SELECT w.type || ':' || w.event AS wait, sum(d.n * x.interval_ms)::float8 / 1000 AS seconds
    FROM pgferry_ash.sample x, pgferry_ash.decode(x.data) d
    JOIN pgferry_ash.combo c ON c.id = d.combo
    JOIN pgferry_ash.wait_event w ON w.id = c.wait_id
    WHERE x.at >= $1 AND x.at < $2
    GROUP BY 1 ORDER BY 1";

#[tokio::test]
async fn rollups_agree_with_raw_samples() {
    let db = setup().await;
    let client = db.connect().await;
    let combos = seed::combos(&client, 2).await.unwrap();
    let data = pgferry_ash::encode::encode_data(&mut [
        combos[0], combos[0], combos[1], combos[2], combos[2], combos[2],
    ]);
    let other = pgferry_ash::encode::encode_data(&mut [combos[3], combos[5], combos[5]]);
    // Four hours of samples ending two minutes ago, hour-aligned start.
    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let base = UNIX_EPOCH + Duration::from_secs((now_s / 3600 - 4) * 3600);
    let end = UNIX_EPOCH + Duration::from_secs(now_s / 60 * 60 - 120);
    seed::samples(&client, base, end, 1000, &data, &other)
        .await
        .unwrap();
    let mut sampler = sampler(&db).await;
    let rows = sampler.roll_up().await.unwrap();
    assert!(rows > 0);

    // Ragged edges: raw for the partial minutes, minute rollups up to whole hours, hour
    // rollups in the middle.
    let since = base + Duration::from_millis(17 * 60_000 + 30_500);
    let until = base + Duration::from_secs(3 * 3600 + 41 * 60 + 13);
    let w = Window { since, until };
    let split = client
        .query_one(
            "SELECT * FROM pgferry_ash.split($1, $2, interval '1 hour')",
            &[&since, &until],
        )
        .await
        .unwrap();
    let (m_lo, h_lo, h_hi, m_hi): (SystemTime, SystemTime, SystemTime, SystemTime) = (
        split.get("m_lo"),
        split.get("h_lo"),
        split.get("h_hi"),
        split.get("m_hi"),
    );
    assert!(since < m_lo && m_lo < h_lo && h_lo < h_hi && h_hi < m_hi && m_hi < until);

    let expected: Vec<(String, f64)> = client
        .query(RAW_BY_WAIT, &[&since, &until])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("wait"), r.get("seconds")))
        .collect();
    // The rollups really answer for the middle: raw rows there are gone now.
    client
        .execute(
            "DELETE FROM pgferry_ash.sample WHERE at >= $1 AND at < $2",
            &[&m_lo, &m_hi],
        )
        .await
        .unwrap();
    let mut got: Vec<(String, f64)> = read::top_waits(&client, w, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|x| (format!("{}:{}", x.wait_type, x.wait_event), x.seconds))
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got.len(), expected.len());
    for ((gk, gs), (ek, es)) in got.iter().zip(&expected) {
        assert_eq!(gk, ek);
        assert!((gs - es).abs() < 1e-6, "{gk}: rollups {gs} raw {es}");
    }
    let cover = read::cpu_vs_waiting(&client, w).await.unwrap();
    let window = until.duration_since(since).unwrap().as_secs_f64();
    assert!((cover.covered_seconds - window).abs() <= 1.0, "{cover:?}");

    // A minute timeline sums to the same totals.
    let tl = read::timeline(&client, w, Duration::from_secs(60))
        .await
        .unwrap();
    let total: f64 = tl.iter().map(|p| p.aas * p.coverage * 60.0).sum();
    let exp_total: f64 = expected.iter().map(|e| e.1).sum();
    // Bucket edges are not minute-aligned (they start at since), so compare loosely.
    assert!(
        (total - exp_total).abs() / exp_total < 0.01,
        "{total} vs {exp_total}"
    );
}

#[tokio::test]
async fn rotation_truncates_and_never_waits_long_for_readers() {
    let db = setup().await;
    let control = db.connect().await;
    control
        .execute(
            "UPDATE pgferry_ash.ring SET period = interval '1 second'",
            &[],
        )
        .await
        .unwrap();
    let mut sampler = sampler(&db).await;
    assert!(
        sampler.run_once().await.unwrap().rotated,
        "first sample rotates"
    );

    // A reader holding the ring (a long report) makes rotation give up, not wait.
    let mut reader = db.connect().await;
    let tx = reader.transaction().await.unwrap();
    tx.query_one("SELECT count(*) FROM pgferry_ash.sample", &[])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = sampler.run_once().await.unwrap();
    assert!(!r.rotated, "rotation must give up behind a reader");
    tx.commit().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = sampler.run_once().await.unwrap();
    assert!(r.rotated, "retried on the next tick");
    let emptied: i64 = control
        .query_one(
            "SELECT count(*) FROM pgferry_ash.sample
             WHERE slot = ((SELECT rotated FROM pgferry_ash.ring) + 1) % 3",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(emptied, 0);

    // Readers running throughout rotations never fail.
    let start = SystemTime::now() - Duration::from_secs(5);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..3 {
        let c = db.connect().await;
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let w = window_from(start);
                read::top_waits(&c, w, 10).await.expect("reader failed");
                read::timeline(&c, w, Duration::from_secs(1))
                    .await
                    .expect("reader failed");

                n += 1;
            }
            n
        }));
    }
    let mut rotations = 0;
    for _ in 0..20 {
        if sampler.run_once().await.unwrap().rotated {
            rotations += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.await.unwrap() > 0);
    }
    assert!(rotations >= 1, "rotations during reads: {rotations}");
}
