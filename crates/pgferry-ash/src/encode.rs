//! The compact encoding of a sample (see migrations/0001_ash.sql).
//!
//! `data`: the combo ids of the sampled backends, sorted; a combo seen n > 1 times is
//! preceded by -n. 50 backends in 4 combos are at most 8 integers; 50 backends all in
//! different combos are 50 (pg_ash's wait-grouped array is at least one integer per
//! backend plus two per wait event, and carries only wait and query).
//!
//! `locks`: for each backend that waits on a lock or blocks one:
//! `[pid, combo, n, blocker pid × n]`.

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

/// One backend of a blocking chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockEntry {
    pub pid: i32,
    pub combo: i32,
    pub blocked_by: Vec<i32>,
}

pub fn encode_locks(entries: &[LockEntry]) -> Vec<i32> {
    let mut out = Vec::new();
    for e in entries {
        out.push(e.pid);
        out.push(e.combo);
        out.push(e.blocked_by.len() as i32);
        out.extend_from_slice(&e.blocked_by);
    }
    out
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
    fn locks_are_groups() {
        let e = [
            LockEntry {
                pid: 10,
                combo: 2,
                blocked_by: vec![],
            },
            LockEntry {
                pid: 11,
                combo: 3,
                blocked_by: vec![10, 12],
            },
        ];
        assert_eq!(encode_locks(&e), vec![10, 2, 0, 11, 3, 2, 10, 12]);
    }
}
