//! Dropping root: initdb and postgres refuse to run as root, so when we are root
//! they run as an unprivileged user and the directories they use are handed to it.

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use crate::ClusterError;

/// The unprivileged identity PostgreSQL runs as when we are root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunAs {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl RunAs {
    /// `None` when not running as root (children simply inherit our identity).
    /// As root: user "postgres" if it exists (Debian's packages create it), else "nobody".
    pub fn for_current_process() -> Result<Option<RunAs>, ClusterError> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(None);
        }
        for name in ["postgres", "nobody"] {
            if let Some(user) = lookup_user(name) {
                return Ok(Some(user));
            }
        }
        Err(ClusterError::NoUnprivilegedUser)
    }

    /// Makes `cmd` run as this user. When std switches uid as root it also calls
    /// `setgroups(0, NULL)`, so root's supplementary groups are not inherited; no
    /// `pre_exec` hook is needed.
    pub fn apply(&self, cmd: &mut Command) {
        cmd.uid(self.uid).gid(self.gid);
    }

    /// Hands `path` and everything below it to this user, unless `path` already
    /// belongs to it (a big persistent data dir need not be walked on every start).
    pub fn chown_tree_if_needed(&self, path: &Path) -> Result<(), ClusterError> {
        let meta = std::fs::symlink_metadata(path)
            .map_err(|e| ClusterError::io("could not stat", path, e))?;
        if meta.uid() == self.uid && meta.gid() == self.gid {
            return Ok(());
        }
        self.chown_tree(path)
    }

    pub fn chown_tree(&self, path: &Path) -> Result<(), ClusterError> {
        // lchown: never follow symlinks out of the tree.
        std::os::unix::fs::lchown(path, Some(self.uid), Some(self.gid))
            .map_err(|e| ClusterError::io("could not chown", path, e))?;
        let meta = std::fs::symlink_metadata(path)
            .map_err(|e| ClusterError::io("could not stat", path, e))?;
        if meta.is_dir() {
            let entries =
                std::fs::read_dir(path).map_err(|e| ClusterError::io("could not read", path, e))?;
            for entry in entries {
                let entry = entry.map_err(|e| ClusterError::io("could not read", path, e))?;
                self.chown_tree(&entry.path())?;
            }
        }
        Ok(())
    }

    pub fn chown(&self, path: &Path) -> Result<(), ClusterError> {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
            .map_err(|e| ClusterError::io("could not chown", path, e))
    }

    /// Checks that this user can reach `dir` (search permission on every ancestor).
    ///
    /// We report instead of silently `chmod`ing ancestors: widening e.g. `/root` is
    /// not a decision a library should make. Callers that own a private temp dir
    /// (the test kit) open it up themselves. Only mode bits are considered (no ACLs);
    /// supplementary groups are irrelevant because std drops them (see [`Self::apply`]).
    pub fn check_traversable(&self, dir: &Path) -> Result<(), ClusterError> {
        let canonical = dir
            .canonicalize()
            .map_err(|e| ClusterError::io("could not resolve", dir, e))?;
        for ancestor in canonical.ancestors().skip(1) {
            let meta = std::fs::metadata(ancestor)
                .map_err(|e| ClusterError::io("could not stat", ancestor, e))?;
            let mode = meta.mode();
            let bit = if meta.uid() == self.uid {
                0o100
            } else if meta.gid() == self.gid {
                0o010
            } else {
                0o001
            };
            if mode & bit == 0 {
                return Err(ClusterError::DirNotTraversable {
                    dir: ancestor.to_path_buf(),
                    user: self.name.clone(),
                });
            }
        }
        Ok(())
    }
}

fn lookup_user(name: &str) -> Option<RunAs> {
    let cname = CString::new(name).ok()?;
    let mut buf: Vec<libc::c_char> = vec![0; 4096];
    loop {
        // SAFETY: all-zero is a valid bit pattern for this plain C struct.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the stated length for the whole call; the
        // reentrant variant writes only into `pwd` and `buf`, which we own.
        let rc = unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                &mut pwd,
                buf.as_mut_ptr(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 || result.is_null() {
            return None;
        }
        return Some(RunAs {
            name: name.to_owned(),
            uid: pwd.pw_uid,
            gid: pwd.pw_gid,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_user_lookup() {
        let root = lookup_user("root").expect("root exists");
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(lookup_user("no-such-user-pgferry").is_none());
    }

    #[test]
    fn traversal_check_spots_private_parent() {
        use std::os::unix::fs::PermissionsExt;
        let outer = tempfile::tempdir().expect("tempdir");
        // tempfile >= 3.10 honours the umask (often 0755); make it private explicitly.
        std::fs::set_permissions(outer.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let inner = outer.path().join("data");
        std::fs::create_dir(&inner).expect("mkdir");
        let stranger = RunAs {
            name: "stranger".into(),
            uid: 54_321,
            gid: 54_321,
        };
        match stranger.check_traversable(&inner) {
            Err(ClusterError::DirNotTraversable { dir, .. }) => {
                assert_eq!(dir, outer.path().canonicalize().expect("canonical"))
            }
            other => panic!("expected DirNotTraversable, got {other:?}"),
        }
        std::fs::set_permissions(outer.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod");
        stranger.check_traversable(&inner).expect("now traversable");
    }
}
