//! Paired A/B measurements on a noisy machine: runs in ABBA order, each adjacent A and B a
//! pair, each pair's B ÷ A ratio, and a 95% interval of their mean. A slow drift of the
//! machine (another process's build starting, autovacuum) moves both halves of a pair
//! alike and cancels out of each pair of pairs, so the interval says what one run can
//! resolve. Used by `bench ash --overhead` and by `bench workflow`'s hot-key phase.

use serde_json::{json, Value};

/// Whether run `i` of a paired sequence is a B run: A B B A A B B A …
pub fn is_b(i: usize) -> bool {
    matches!(i % 4, 1 | 2)
}

/// The B ÷ A ratio of each adjacent pair of `runs` (`(is_b, value)`), in order. A chunk
/// that is not one A and one B (an odd last run) is left out.
pub fn ratios(runs: &[(bool, f64)]) -> Vec<f64> {
    runs.chunks(2)
        .filter_map(|p| match p {
            [a, b] if a.0 != b.0 => {
                let (b, a) = if a.0 { (a.1, b.1) } else { (b.1, a.1) };
                Some(b / a)
            }
            _ => None,
        })
        .collect()
}

pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Sample standard deviation (0 for fewer than two values).
pub fn sd(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// Half the width of a 95% interval of the mean of `v` (Student's t with n − 1 degrees of
/// freedom; n ≤ 10 in practice, 2.0 past that table; infinite for one value).
pub fn half_interval_95(v: &[f64]) -> f64 {
    let t = match v.len() {
        0 | 1 => return f64::INFINITY,
        2 => 12.71,
        3 => 4.30,
        4 => 3.18,
        5 => 2.78,
        6 => 2.57,
        7 => 2.45,
        8 => 2.36,
        9 => 2.31,
        10 => 2.26,
        _ => 2.0,
    };
    t * sd(v) / (v.len() as f64).sqrt()
}

/// Mean, spread and range of `v`.
pub fn stats(v: &[f64]) -> Value {
    let m = mean(v);
    json!({
        "mean": m,
        "sd": sd(v),
        "cv": if m > 0.0 { sd(v) / m } else { 0.0 },
        "min": v.iter().copied().fold(f64::INFINITY, f64::min),
        "max": v.iter().copied().fold(0.0, f64::max),
    })
}

/// The pairs of `runs` as a report: the order, each pair's ratio (4 decimals), their mean,
/// spread and 95% interval.
pub fn report(runs: &[(bool, f64)]) -> Value {
    let r = ratios(runs);
    let (m, half) = (mean(&r), half_interval_95(&r));
    let order: String = runs.iter().map(|x| if x.0 { 'B' } else { 'A' }).collect();
    let interval = if half.is_finite() {
        json!([m - half, m + half])
    } else {
        Value::Null
    };
    json!({
        "order": order,
        "pair_ratios": r.iter().map(|x| (x * 10_000.0).round() / 10_000.0).collect::<Vec<_>>(),
        "pair_ratio_mean": m,
        "pair_ratio_sd": sd(&r),
        "pair_ratio_95pct_interval": interval,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_alternate_abba() {
        let order: String = (0..8).map(|i| if is_b(i) { 'B' } else { 'A' }).collect();
        assert_eq!(order, "ABBAABBA");
    }

    #[test]
    fn each_pair_is_b_over_a_whichever_comes_first() {
        let runs = [(false, 100.0), (true, 90.0), (true, 80.0), (false, 100.0)];
        assert_eq!(ratios(&runs), vec![0.9, 0.8]);
        let r = report(&runs);
        assert_eq!(r["order"], "ABBA");
        assert!((r["pair_ratio_mean"].as_f64().unwrap() - 0.85).abs() < 1e-12);
        // Two pairs: t = 12.71, sd = 0.0707…, half = 12.71 × 0.0707 / √2 = 0.6355.
        let iv = r["pair_ratio_95pct_interval"].as_array().unwrap();
        assert!((iv[0].as_f64().unwrap() - 0.2145).abs() < 1e-3, "{iv:?}");
        assert!((iv[1].as_f64().unwrap() - 1.4855).abs() < 1e-3, "{iv:?}");
    }

    #[test]
    fn one_pair_has_no_interval_and_an_odd_run_is_left_out() {
        let r = report(&[(false, 10.0), (true, 9.0), (true, 1.0)]);
        assert_eq!(r["pair_ratios"], json!([0.9]));
        assert_eq!(r["pair_ratio_95pct_interval"], Value::Null);
    }
}
