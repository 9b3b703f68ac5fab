//! Locating the PostgreSQL server binaries (`initdb`, `postgres`).

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::ClusterError;

/// Environment variable that pins the bin directory; when set, nothing else is searched.
pub const BINDIR_ENV: &str = "PGFERRY_PG_BINDIR";

/// The programs a directory must contain to be usable. `pg_ctl` is deliberately not
/// required: we run `postgres` directly and signal it ourselves.
const REQUIRED: [&str; 2] = ["initdb", "postgres"];

/// A directory holding usable PostgreSQL server binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgBinaries {
    pub bindir: PathBuf,
    /// Major version as reported by `postgres --version` (e.g. 15).
    pub major: u32,
}

impl PgBinaries {
    /// Path of a program in the bin directory (`initdb`, `postgres`, `psql`, ...).
    pub fn program(&self, name: &str) -> PathBuf {
        self.bindir.join(name)
    }
}

/// Where [`find_binaries_in`] looks. [`SearchPaths::from_env`] gives the real search;
/// tests build one by hand so they need not mutate the process environment.
#[derive(Debug, Clone, Default)]
pub struct SearchPaths {
    /// Value of `$PGFERRY_PG_BINDIR`; when `Some`, it is the only place searched.
    pub override_bindir: Option<PathBuf>,
    /// Value of `$PATH`.
    pub path: Option<OsString>,
    /// `pg_config` program to ask for `--bindir` (`None` skips this step).
    pub pg_config: Option<PathBuf>,
    /// Directory with one `<major>/bin` per installed version (Debian layout).
    pub versioned_root: Option<PathBuf>,
}

impl SearchPaths {
    pub fn from_env() -> Self {
        SearchPaths {
            override_bindir: std::env::var_os(BINDIR_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            path: std::env::var_os("PATH"),
            pg_config: Some(PathBuf::from("pg_config")),
            versioned_root: Some(PathBuf::from("/usr/lib/postgresql")),
        }
    }
}

/// Finds server binaries: `$PGFERRY_PG_BINDIR` if set (only that), then a `$PATH`
/// entry holding both `initdb` and `postgres`, then `pg_config --bindir`, then
/// `/usr/lib/postgresql/*/bin`, highest major first.
pub fn find_binaries() -> Result<PgBinaries, ClusterError> {
    find_binaries_in(&SearchPaths::from_env())
}

/// [`find_binaries`] with explicit search locations.
pub fn find_binaries_in(search: &SearchPaths) -> Result<PgBinaries, ClusterError> {
    let mut searched = Vec::new();

    if let Some(dir) = &search.override_bindir {
        return try_dir(dir.clone(), &mut searched)
            .ok_or(ClusterError::BinariesNotFound { searched });
    }

    if let Some(path) = &search.path {
        for dir in std::env::split_paths(path).filter(|d| d.is_absolute()) {
            if let Some(found) = try_dir(dir, &mut searched) {
                return Ok(found);
            }
        }
    }

    if let Some(dir) = search.pg_config.as_deref().and_then(pg_config_bindir) {
        if let Some(found) = try_dir(dir, &mut searched) {
            return Ok(found);
        }
    }

    if let Some(root) = &search.versioned_root {
        for dir in versioned_bindirs(root) {
            if let Some(found) = try_dir(dir, &mut searched) {
                return Ok(found);
            }
        }
        // Mention the pattern so the message says where packages would have landed.
        if !searched.iter().any(|d| d.starts_with(root)) {
            searched.push(root.join("*/bin"));
        }
    }

    Err(ClusterError::BinariesNotFound { searched })
}

/// Probes `dir` unless it was already looked at, recording it in `searched`.
fn try_dir(dir: PathBuf, searched: &mut Vec<PathBuf>) -> Option<PgBinaries> {
    if searched.contains(&dir) {
        return None;
    }
    let found = probe_dir(&dir);
    searched.push(dir);
    found
}

/// Returns the binaries in `dir` if all required programs are executable and
/// `postgres --version` reports a version we can parse.
fn probe_dir(dir: &Path) -> Option<PgBinaries> {
    if !REQUIRED.iter().all(|name| is_executable(&dir.join(name))) {
        return None;
    }
    let major = postgres_major(&dir.join("postgres"))?;
    Some(PgBinaries {
        bindir: resolve_symlinked_bindir(dir),
        major,
    })
}

/// If `dir/postgres` is a symlink (e.g. `/usr/local/bin/postgres` ->
/// `/usr/lib/postgresql/15/bin/postgres`) and its target directory holds all
/// required programs, use that real bin dir: it also has `psql`, `pg_ctl`, ...
fn resolve_symlinked_bindir(dir: &Path) -> PathBuf {
    let real_dir = dir
        .join("postgres")
        .canonicalize()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    match real_dir {
        Some(real) if REQUIRED.iter().all(|name| is_executable(&real.join(name))) => real,
        _ => dir.to_path_buf(),
    }
}

fn is_executable(path: &Path) -> bool {
    // metadata() follows symlinks, so PATH entries that link into a real bindir work.
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// `postgres --version` is allowed as root (the root check comes later in main()).
fn postgres_major(postgres: &Path) -> Option<u32> {
    let out = Command::new(postgres)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    parse_major(&String::from_utf8_lossy(&out.stdout))
}

/// Parses "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)" -> 15.
pub(crate) fn parse_major(version_output: &str) -> Option<u32> {
    let rest = version_output.split_once("(PostgreSQL)")?.1.trim_start();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

fn pg_config_bindir(pg_config: &Path) -> Option<PathBuf> {
    let out = Command::new(pg_config)
        .arg("--bindir")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

/// `<root>/<major>/bin` for every numeric subdirectory, highest major first.
fn versioned_bindirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut versions: Vec<(u32, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((major, e.path().join("bin")))
        })
        .collect();
    versions.sort_by_key(|(major, _)| std::cmp::Reverse(*major));
    versions.into_iter().map(|(_, dir)| dir).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        assert_eq!(
            parse_major("postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)\n"),
            Some(15)
        );
        assert_eq!(parse_major("postgres (PostgreSQL) 17beta1"), Some(17));
        assert_eq!(parse_major("postgres (PostgreSQL) 9.6.24"), Some(9));
        assert_eq!(parse_major("something else"), None);
    }

    #[test]
    fn empty_override_dir_gives_install_hint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let search = SearchPaths {
            override_bindir: Some(dir.path().to_path_buf()),
            // These would succeed on a machine with Postgres; the override must win.
            path: std::env::var_os("PATH"),
            pg_config: Some(PathBuf::from("pg_config")),
            versioned_root: Some(PathBuf::from("/usr/lib/postgresql")),
        };
        let err = find_binaries_in(&search).expect_err("empty dir must not qualify");
        let ClusterError::BinariesNotFound { searched } = &err else {
            panic!("unexpected error: {err}");
        };
        assert_eq!(searched, &vec![dir.path().to_path_buf()]);
        let msg = err.to_string();
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        assert!(msg.contains("apt-get install postgresql"), "{msg}");
        assert!(msg.contains("PGFERRY_PG_BINDIR"), "{msg}");
    }

    #[test]
    fn symlinked_programs_resolve_to_the_real_bindir() {
        let Ok(real) = find_binaries() else {
            return; // no server installed: nothing to link to
        };
        let links = tempfile::tempdir().expect("tempdir");
        for name in REQUIRED {
            std::os::unix::fs::symlink(real.program(name), links.path().join(name))
                .expect("symlink");
        }
        let search = SearchPaths {
            override_bindir: Some(links.path().to_path_buf()),
            ..SearchPaths::default()
        };
        let found = find_binaries_in(&search).expect("found via symlinks");
        assert_eq!(found.bindir, real.bindir.canonicalize().expect("canonical"));
        assert_eq!(found.major, real.major);
    }

    #[test]
    fn nothing_anywhere_lists_all_places() {
        let empty = tempfile::tempdir().expect("tempdir");
        let search = SearchPaths {
            override_bindir: None,
            path: Some(OsString::from(empty.path())),
            pg_config: Some(empty.path().join("no-such-pg_config")),
            versioned_root: Some(empty.path().join("lib")),
        };
        let err = find_binaries_in(&search).expect_err("nothing to find");
        let msg = err.to_string();
        assert!(msg.contains(&empty.path().display().to_string()), "{msg}");
        assert!(msg.contains("lib/*/bin"), "{msg}");
    }
}
