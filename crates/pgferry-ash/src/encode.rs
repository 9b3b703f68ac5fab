//! The compact encoding of a sample (see migrations/0001_ash.sql).
//!
//! `data`: the combo ids of the sampled backends, sorted; a combo seen n > 1 times is
//! preceded by -n. 50 backends in 4 combos are at most 8 integers; 50 backends all in
//! different combos are 50 (pg_ash's wait-grouped array is at least one integer per
//! backend plus two per wait event, and carries only wait and query).
//!
//! `locks`: groups `[who, combo, n, blocker pid × n]`, one per backend that blocks others
//! (who = its pid) and one per set of waiters that block nobody and share combo and
//! blockers (who = -count).

/// Encodes combo ids (any order, repeats allowed) as a data array.
pub fn encode_data(combos: &mut [i32]) -> Vec<i32> {
    combos.sort_unstable();
    let mut out = Vec::with_capacity(combos.len());
    let mut i = 0;
    while i < combos.len() {
        let c = combos[i];
        let mut n = 1;
        while i + n < combos.len() && combos[i + n] == c {
            n += 1;
        }
        if n > 1 {
            out.push(-(n as i32));
        }
        out.push(c);
        i += n;
    }
    out
}

/// Decodes a data array into (combo, count) pairs (the SQL twin is `pgferry_ash.decode`).
pub fn decode_data(data: &[i32]) -> Vec<(i32, i32)> {
    let mut out = Vec::new();
    let mut n = 1;
    for &v in data {
        if v < 0 {
            n = -v;
        } else {
            out.push((v, n));
            n = 1;
        }
    }
    out
}

/// One backend of a blocking chain, as the sampler saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockEntry {
    pub pid: i32,
    pub combo: i32,
    pub blocked_by: Vec<i32>,
}

/// Encodes the backends of blocking chains: a backend that blocks others is a group of
/// its own, keyed by its pid; waiters that block nobody are merged per (combo, blockers)
/// into one group keyed by -count.
pub fn encode_locks(entries: &[LockEntry]) -> Vec<i32> {
    use std::collections::{BTreeMap, HashSet};
    let blockers: HashSet<i32> = entries
        .iter()
        .flat_map(|e| e.blocked_by.iter().copied())
        .collect();
    let mut out = Vec::new();
    let mut leaves: BTreeMap<(i32, Vec<i32>), i32> = BTreeMap::new();
    for e in entries {
        if blockers.contains(&e.pid) || e.blocked_by.is_empty() {
            push_group(&mut out, e.pid, e.combo, &e.blocked_by);
        } else {
            let mut by = e.blocked_by.clone();
            by.sort_unstable();
            *leaves.entry((e.combo, by)).or_default() += 1;
        }
    }
    for ((combo, by), n) in leaves {
        push_group(&mut out, -n, combo, &by);
    }
    out
}

fn push_group(out: &mut Vec<i32>, who: i32, combo: i32, blocked_by: &[i32]) {
    out.push(who);
    out.push(combo);
    out.push(blocked_by.len() as i32);
    out.extend_from_slice(blocked_by);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_round_trips_and_runs_shrink() {
        let mut combos = vec![7, 3, 7, 7, 9, 3, 12];
        let data = encode_data(&mut combos);
        assert_eq!(data, vec![-2, 3, -3, 7, 9, 12]);
        assert_eq!(decode_data(&data), vec![(3, 2), (7, 3), (9, 1), (12, 1)]);
        assert!(encode_data(&mut []).is_empty());
        let mut fifty = vec![5; 50];
        assert_eq!(encode_data(&mut fifty), vec![-50, 5]);
    }

    #[test]
    fn lock_waiters_behind_the_same_blockers_merge() {
        let e = |pid, combo, by: &[i32]| LockEntry {
            pid,
            combo,
            blocked_by: by.to_vec(),
        };
        // 10 holds; 11 waits for 10 and blocks 12; 13..16 wait for 10 (two combos).
        let entries = [
            e(10, 2, &[]),
            e(11, 3, &[10]),
            e(12, 3, &[11]),
            e(13, 4, &[10]),
            e(14, 4, &[10]),
            e(15, 4, &[10]),
            e(16, 5, &[10]),
        ];
        assert_eq!(
            encode_locks(&entries),
            vec![
                10, 2, 0, //
                11, 3, 1, 10, //
                -1, 3, 1, 11, //
                -3, 4, 1, 10, //
                -1, 5, 1, 10,
            ]
        );
    }
}
