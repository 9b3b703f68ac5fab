//! Rows are read by column name (the standard in the brief, issue 18): a positional
//! `row.get(3)` silently reads another column when a statement's SELECT list changes, while a
//! name fails loudly. This scans the workspace's source for positional reads.

use std::path::{Path, PathBuf};

/// `.get(` calls by index that are not rows (`receiver.get(N)` exactly).
const NOT_ROWS: [&str; 1] = [
    // The lines of postmaster.pid.
    "lines.get(7)",
];

/// Every `.get(N)`, `.try_get(N)` and `.get::<…>(N)` with a literal index in `text`, as
/// (line number, the call with its receiver).
fn positional_gets(text: &str) -> Vec<(usize, String)> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("get").map(|i| from + i) {
        from = at + 3;
        let dot = if text[..at].ends_with(".try_") {
            at - 5
        } else if text[..at].ends_with('.') {
            at - 1
        } else {
            continue;
        };
        let mut i = at + 3;
        if text[i..].starts_with("::<") {
            // Skip the turbofish, nested generics included.
            let mut depth = 0;
            for (k, c) in text[i + 2..].char_indices() {
                match c {
                    '<' => depth += 1,
                    '>' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    i = i + 2 + k + 1;
                    break;
                }
            }
        }
        if bytes.get(i) != Some(&b'(') {
            continue;
        }
        let inner = text[i + 1..].trim_start();
        let digits = inner.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 || !inner[digits..].trim_start().starts_with(')') {
            continue;
        }
        let start = text[..dot]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ']' || c == '['))
            .map_or(0, |s| s + 1);
        let end = i + 1 + text[i + 1..].find(')').unwrap() + 1;
        let call: String = text[start..end].split_whitespace().collect();
        let line = text[..at].matches('\n').count() + 1;
        found.push((line, call));
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_source_reads_a_row_by_position() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for krate in std::fs::read_dir(crates).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 50, "the scan found the workspace's source");
    let mut offenders = Vec::new();
    for path in &files {
        let rel = path
            .strip_prefix(crates)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(path).unwrap();
        for (line, call) in positional_gets(&text) {
            if !NOT_ROWS.contains(&call.as_str()) {
                offenders.push(format!("crates/{rel}:{line}: {call}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "read these by column name (alias the column in the .sql file if it has none):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_scan_sees_every_form_of_a_positional_read() {
    let text = "let a: i64 = row.get(0);\nlet b = r.get::<_, Option<Vec<i64>>>(12);\n\
                let c = rows[0].try_get( 4 )?;\nlet d: bool = c.query_one(s, &[]).await?\n    .get(\n 1\n);\n\
                let e = row.get(\"name\");\nlet f = map.get(&k);\nlet g = budget(3);\n";
    let calls: Vec<(usize, String)> = positional_gets(text);
    assert_eq!(
        calls,
        [
            (1, "row.get(0)".to_string()),
            (2, "r.get::<_,Option<Vec<i64>>>(12)".to_string()),
            (3, "rows[0].try_get(4)".to_string()),
            (5, ".get(1)".to_string()),
        ]
    );
}
