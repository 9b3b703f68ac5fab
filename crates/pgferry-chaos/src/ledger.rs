//! The ledger: what clients were told, written outside the system under test.
//!
//! Producers (tasks of the chaos process) record every id the server acknowledged and every
//! error they saw, in memory. Workers are separate processes (so a SIGKILL is real); their
//! handlers append one line per execution and one per acknowledged result to a file of their
//! own, each line with one `write(2)` on an `O_APPEND` descriptor: a line written before a
//! SIGKILL is in the kernel's page cache and survives the process.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch (one clock for every process on the machine).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// What producers were told.
#[derive(Default)]
pub struct ProducerLedger {
    book: Mutex<ProducerBook>,
}

#[derive(Default, Clone)]
pub struct ProducerBook {
    /// Jobs sent (acknowledged or not).
    pub sent: u64,
    /// (job id, when the acknowledgement arrived).
    pub acked: Vec<(i64, u64)>,
    /// Errors by kind, with counts.
    pub errors: BTreeMap<String, u64>,
    /// Batches answered from their idempotency key (a retry after an ambiguous failure
    /// whose first attempt had committed).
    pub replayed: u64,
    /// Batches given up on (unacknowledged).
    pub abandoned: u64,
}

impl ProducerLedger {
    pub fn sent(&self, n: usize) {
        self.lock().sent += n as u64;
    }

    pub fn acked(&self, ids: &[i64]) {
        let at = now_us();
        self.lock().acked.extend(ids.iter().map(|id| (*id, at)));
    }

    pub fn error(&self, kind: String) {
        *self.lock().errors.entry(kind).or_default() += 1;
    }

    pub fn replayed(&self) {
        self.lock().replayed += 1;
    }

    pub fn abandoned(&self) {
        self.lock().abandoned += 1;
    }

    pub fn acked_count(&self) -> usize {
        self.lock().acked.len()
    }

    pub fn snapshot(&self) -> ProducerBook {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ProducerBook> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One line of a worker's ledger file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerEntry {
    /// The handler started an execution.
    Start {
        at: u64,
        id: i64,
        attempt: i32,
        worker: String,
    },
    /// The server acknowledged the result of an attempt (`stale`: another outcome won).
    Ack {
        at: u64,
        id: i64,
        attempt: i32,
        stale: bool,
        worker: String,
    },
}

impl WorkerEntry {
    pub fn line(&self) -> String {
        match self {
            WorkerEntry::Start {
                at,
                id,
                attempt,
                worker,
            } => format!("S {at} {id} {attempt} {worker}\n"),
            WorkerEntry::Ack {
                at,
                id,
                attempt,
                stale,
                worker,
            } => format!("A {at} {id} {attempt} {} {worker}\n", u8::from(*stale)),
        }
    }

    pub fn parse(line: &str) -> Option<WorkerEntry> {
        let mut f = line.split(' ');
        let tag = f.next()?;
        let at = f.next()?.parse().ok()?;
        let id = f.next()?.parse().ok()?;
        let attempt = f.next()?.parse().ok()?;
        match tag {
            "S" => Some(WorkerEntry::Start {
                at,
                id,
                attempt,
                worker: f.next()?.to_owned(),
            }),
            "A" => Some(WorkerEntry::Ack {
                at,
                id,
                attempt,
                stale: f.next()? == "1",
                worker: f.next()?.to_owned(),
            }),
            _ => None,
        }
    }
}

/// Appends entries to a worker's ledger file, one `write(2)` per line.
pub struct LedgerWriter {
    file: File,
}

impl LedgerWriter {
    pub fn open(path: &Path) -> std::io::Result<LedgerWriter> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(LedgerWriter { file })
    }

    pub fn append(&self, entry: &WorkerEntry) -> std::io::Result<()> {
        // &File is Write; a short line on an O_APPEND descriptor is written whole.
        (&self.file).write_all(entry.line().as_bytes())
    }
}

/// Reads the worker ledger files of a run as they grow (complete lines only).
#[derive(Default)]
pub struct LedgerTail {
    /// Every `*.ledger` file in this directory is read (workers started later too).
    dir: Option<PathBuf>,
    files: Vec<(PathBuf, u64, String)>,
    pub entries: Vec<WorkerEntry>,
}

impl LedgerTail {
    pub fn in_dir(dir: &Path) -> LedgerTail {
        LedgerTail {
            dir: Some(dir.to_path_buf()),
            ..LedgerTail::default()
        }
    }

    pub fn watch(&mut self, path: PathBuf) {
        if !self.files.iter().any(|(p, _, _)| *p == path) {
            self.files.push((path, 0, String::new()));
        }
    }

    /// Watches `path` from its current end: only lines appended from now on are read.
    pub fn watch_from_end(&mut self, path: PathBuf) {
        let end = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        self.files.push((path, end, String::new()));
    }

    /// Reads what was appended since the last call; returns how many entries were new.
    pub fn poll(&mut self) -> usize {
        let before = self.entries.len();
        if let Some(dir) = &self.dir {
            let found: Vec<PathBuf> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "ledger"))
                .collect();
            for p in found {
                self.watch(p);
            }
        }
        for (path, offset, partial) in &mut self.files {
            let Ok(mut f) = File::open(&*path) else {
                continue;
            };
            if f.seek(SeekFrom::Start(*offset)).is_err() {
                continue;
            }
            let mut buf = String::new();
            let Ok(n) = f.read_to_string(&mut buf) else {
                continue;
            };
            *offset += n as u64;
            partial.push_str(&buf);
            let Some(last_nl) = partial.rfind('\n') else {
                continue;
            };
            let rest = partial.split_off(last_nl + 1);
            for line in partial.lines() {
                if let Some(e) = WorkerEntry::parse(line) {
                    self.entries.push(e);
                }
            }
            *partial = rest;
        }
        self.entries.len() - before
    }

    /// Acknowledged, non-stale results seen so far.
    pub fn completions(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| matches!(e, WorkerEntry::Ack { stale: false, .. }))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        for e in [
            WorkerEntry::Start {
                at: 1,
                id: 42,
                attempt: 2,
                worker: "w-1.3".into(),
            },
            WorkerEntry::Ack {
                at: 7,
                id: -1,
                attempt: 1,
                stale: true,
                worker: "w".into(),
            },
        ] {
            let line = e.line();
            assert_eq!(WorkerEntry::parse(line.trim_end()), Some(e));
        }
        assert_eq!(WorkerEntry::parse("X 1 2 3 w"), None);
        assert_eq!(WorkerEntry::parse("S 1 2"), None);
    }

    #[test]
    fn tail_reads_only_complete_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.ledger");
        let mut tail = LedgerTail::default();
        tail.watch(path.clone());
        assert_eq!(tail.poll(), 0);
        std::fs::write(&path, "S 1 10 1 w\nA 2 10 1 0 w\nS 3 11").unwrap();
        assert_eq!(tail.poll(), 2);
        assert_eq!(tail.completions(), 1);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b" 1 w\n").unwrap();
        assert_eq!(tail.poll(), 1);
        assert_eq!(tail.entries.len(), 3);
    }
}
