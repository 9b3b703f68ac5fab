//! API key format, hashing and scopes.

use std::fmt;

use rand::RngCore;
use sha2::{Digest, Sha256};

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Enqueue, cancel and retry jobs.
    Produce,
    /// Claim, complete and heartbeat jobs (HTTP and stream workers).
    Consume,
    /// Read jobs, queues and the DLQ.
    Read,
    /// Everything, plus queue settings, pause/resume and DLQ retry/purge.
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::Produce, Scope::Consume, Scope::Read, Scope::Admin];

    pub fn name(self) -> &'static str {
        match self {
            Scope::Produce => "produce",
            Scope::Consume => "consume",
            Scope::Read => "read",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|sc| sc.name() == s)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of scopes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scopes(u8);

impl Scopes {
    pub fn all() -> Scopes {
        Scopes::from_iter(Scope::ALL)
    }

    /// Parses names; `None` names the first unknown one via `Err`.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Scopes, String> {
        let mut s = Scopes::default();
        for n in names {
            s.0 |= Scope::parse(n.trim()).ok_or_else(|| n.to_string())?.bit();
        }
        Ok(s)
    }

    pub fn contains(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }

    /// Admin implies every other scope.
    pub fn allows(self, scope: Scope) -> bool {
        self.contains(scope) || self.contains(Scope::Admin)
    }

    pub fn names(self) -> Vec<&'static str> {
        Scope::ALL
            .into_iter()
            .filter(|s| self.contains(*s))
            .map(Scope::name)
            .collect()
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl FromIterator<Scope> for Scopes {
    fn from_iter<I: IntoIterator<Item = Scope>>(iter: I) -> Self {
        Scopes(iter.into_iter().fold(0, |acc, s| acc | s.bit()))
    }
}

const KEY_TAG: &str = "pgf_";
const PREFIX_HEX: usize = 12;
const SECRET_HEX: usize = 64;

/// A presented or freshly generated key: `pgf_<prefix>_<secret>`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub prefix: String,
    pub secret: String,
}

// Never print the secret by accident (logs, panics).
impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKey({KEY_TAG}{}_…)", self.prefix)
    }
}

impl ApiKey {
    /// A new random key (OS randomness).
    pub fn generate() -> ApiKey {
        let mut prefix = [0u8; PREFIX_HEX / 2];
        let mut secret = [0u8; SECRET_HEX / 2];
        rand::rngs::OsRng.fill_bytes(&mut prefix);
        rand::rngs::OsRng.fill_bytes(&mut secret);
        ApiKey {
            prefix: hex::encode(prefix),
            secret: hex::encode(secret),
        }
    }

    /// Parses the exact format; anything else is `None`.
    pub fn parse(s: &str) -> Option<ApiKey> {
        let rest = s.strip_prefix(KEY_TAG)?;
        let (prefix, secret) = rest.split_once('_')?;
        let lower_hex = |x: &str, n: usize| {
            x.len() == n
                && x.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        (lower_hex(prefix, PREFIX_HEX) && lower_hex(secret, SECRET_HEX)).then(|| ApiKey {
            prefix: prefix.to_string(),
            secret: secret.to_string(),
        })
    }

    /// The full key as given to the user (once).
    pub fn expose(&self) -> String {
        format!("{KEY_TAG}{}_{}", self.prefix, self.secret)
    }

    /// What is stored: hex SHA-256 of the secret.
    pub fn secret_hash(&self) -> String {
        hash_secret(&self.secret)
    }
}

pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Constant-time comparison of the secret's hash with the stored one.
pub fn hash_matches(secret: &str, stored_hex: &str) -> bool {
    let ours = hash_secret(secret);
    let (a, b) = (ours.as_bytes(), stored_hex.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_parse_back_and_differ() {
        let a = ApiKey::generate();
        let b = ApiKey::generate();
        assert_ne!(a, b);
        assert_eq!(ApiKey::parse(&a.expose()), Some(a.clone()));
        assert!(hash_matches(&a.secret, &a.secret_hash()));
        assert!(!hash_matches(&b.secret, &a.secret_hash()));
        assert!(!format!("{a:?}").contains(&a.secret));
    }

    #[test]
    fn malformed_keys_are_rejected() {
        let good = ApiKey::generate().expose();
        for bad in [
            "",
            "pgf_",
            "pgf_abc_def",
            &good.to_uppercase(),
            &good[..good.len() - 1],
            &format!("{good}0"),
            &good.replacen("pgf_", "xyz_", 1),
        ] {
            assert_eq!(ApiKey::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn admin_implies_every_scope() {
        let admin = Scopes::from_names(["admin"]).unwrap();
        let read = Scopes::from_names(["read"]).unwrap();
        assert!(Scope::ALL.iter().all(|s| admin.allows(*s)));
        assert!(read.allows(Scope::Read) && !read.allows(Scope::Produce));
        assert_eq!(Scopes::from_names(["read", "nope"]), Err("nope".into()));
        assert_eq!(
            Scopes::all().names(),
            ["produce", "consume", "read", "admin"]
        );
    }
}
