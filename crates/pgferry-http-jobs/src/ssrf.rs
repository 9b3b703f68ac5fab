//! SSRF guard: which addresses an HTTP job may reach.
//!
//! Every address a destination resolves to is classified; private, loopback, link-local
//! (which holds the cloud metadata address 169.254.169.254), multicast, unspecified,
//! shared (CGNAT), benchmarking, reserved and broadcast ranges are refused, for IPv4 and
//! IPv6, including IPv4 inside IPv6 (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`,
//! NAT64 `64:ff9b::/96`, 6to4 `2002::/16`). Numeric host spellings (`2130706433`,
//! `0x7f.1`, `0177.0.0.1`, `127.1`) are normalised by the URL parser (WHATWG rules) before
//! the check, so they meet the same ranges. A tenant may be allowed named ranges
//! ([`Range`]); tests allow `loopback`.
//!
//! The executor connects only to addresses this module returned (its resolver is
//! [`GuardedResolver`]), so a name cannot resolve to a checked address at check time and
//! to another at connect time.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use url::{Host, Url};

/// A named range a tenant can be allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Range {
    Loopback,
    Private,
    LinkLocal,
    Shared,
    Multicast,
    Unspecified,
    Reserved,
}

impl Range {
    pub fn as_str(self) -> &'static str {
        match self {
            Range::Loopback => "loopback",
            Range::Private => "private",
            Range::LinkLocal => "link_local",
            Range::Shared => "shared",
            Range::Multicast => "multicast",
            Range::Unspecified => "unspecified",
            Range::Reserved => "reserved",
        }
    }

    pub fn parse(s: &str) -> Option<Range> {
        [
            Range::Loopback,
            Range::Private,
            Range::LinkLocal,
            Range::Shared,
            Range::Multicast,
            Range::Unspecified,
            Range::Reserved,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// Why a destination was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{addr} is in the {} range, which this tenant may not reach", range.as_str())]
    Range { addr: IpAddr, range: Range },
    #[error("only http and https URLs, not {0:?}")]
    Scheme(String),
    #[error("not a valid URL: {0}")]
    Url(String),
    #[error("the URL has no host")]
    NoHost,
    #[error("{host} does not resolve: {reason}")]
    Resolve { host: String, reason: String },
}

/// The ranges a tenant is allowed beyond the public internet: named ranges and CIDRs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Allow {
    pub ranges: BTreeSet<Range>,
    pub cidrs: BTreeSet<Cidr>,
}

impl Allow {
    pub fn none() -> Allow {
        Allow::default()
    }

    pub fn of(ranges: &[Range]) -> Allow {
        Allow {
            ranges: ranges.iter().copied().collect(),
            cidrs: BTreeSet::new(),
        }
    }

    /// Everything either allows (the server's list plus a tenant's).
    pub fn union(&self, other: &Allow) -> Allow {
        Allow {
            ranges: self.ranges.union(&other.ranges).copied().collect(),
            cidrs: self.cidrs.union(&other.cidrs).copied().collect(),
        }
    }

    /// `Ok` when `addr` is public, in an allowed range or inside an allowed CIDR.
    pub fn check(&self, addr: IpAddr) -> Result<(), Refused> {
        match classify(addr) {
            Some(range) if !self.ranges.contains(&range) && !self.in_cidr(addr) => {
                Err(Refused::Range { addr, range })
            }
            _ => Ok(()),
        }
    }

    fn in_cidr(&self, addr: IpAddr) -> bool {
        // IPv4 carried in IPv6 meets the IPv4 CIDRs, as it meets the IPv4 ranges.
        let v4 = match addr {
            IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        self.cidrs
            .iter()
            .any(|c| c.contains(addr) || v4.is_some_and(|a| c.contains(a)))
    }
}

/// An address block, `10.1.0.0/16` or `fd00::/8` (host bits must be zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    /// Parses `a.b.c.d/n` or `x::y/n`; a bare address is a /32 or /128.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("{a:?} is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("prefix {p:?} is not 0 to {max}"))?,
        };
        let c = Cidr { addr, prefix };
        if c.network() != addr {
            return Err(format!("{s:?} has host bits set (the network is {})", c));
        }
        Ok(c)
    }

    fn network(&self) -> IpAddr {
        mask(self.addr, self.prefix)
    }

    pub fn contains(&self, addr: IpAddr) -> bool {
        addr.is_ipv4() == self.addr.is_ipv4() && mask(addr, self.prefix) == self.addr
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

/// The non-public range of `addr`, if any.
pub fn classify(addr: IpAddr) -> Option<Range> {
    match addr {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(a: Ipv4Addr) -> Option<Range> {
    let o = a.octets();
    Some(match o {
        [127, ..] => Range::Loopback,
        [10, ..] | [172, 16..=31, ..] | [192, 168, ..] => Range::Private,
        [169, 254, ..] => Range::LinkLocal,
        [100, 64..=127, ..] => Range::Shared,
        [224..=239, ..] => Range::Multicast,
        [0, ..] => Range::Unspecified,
        // IETF protocol assignments, documentation, benchmarking, 240/4 and broadcast.
        [192, 0, 0, _] | [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => Range::Reserved,
        [198, 18..=19, ..] | [240..=255, ..] => Range::Reserved,
        _ => return None,
    })
}

fn classify_v6(a: Ipv6Addr) -> Option<Range> {
    if let Some(v4) = embedded_v4(a) {
        return classify_v4(v4);
    }
    let s = a.segments();
    Some(match s {
        [0, 0, 0, 0, 0, 0, 0, 1] => Range::Loopback,
        [0, 0, 0, 0, 0, 0, 0, 0] => Range::Unspecified,
        [x, ..] if x & 0xfe00 == 0xfc00 => Range::Private,
        [x, ..] if x & 0xffc0 == 0xfe80 => Range::LinkLocal,
        // Deprecated site-local.
        [x, ..] if x & 0xffc0 == 0xfec0 => Range::Private,
        [x, ..] if x & 0xff00 == 0xff00 => Range::Multicast,
        // Documentation.
        [0x2001, 0x0db8, ..] => Range::Reserved,
        _ => return None,
    })
}

/// IPv4 carried in IPv6: mapped, compatible, NAT64 well-known prefix, 6to4.
fn embedded_v4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = a.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(tail),
        // ::a.b.c.d, but not :: and ::1 (classified as IPv6).
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(tail),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// Parses and checks a URL. IP hosts are checked here; names are returned for the
/// resolver to check (at creation, [`check_resolved`] resolves them too).
pub fn parse(url: &str, allow: &Allow) -> Result<Url, Refused> {
    let u = Url::parse(url).map_err(|e| Refused::Url(e.to_string()))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(Refused::Scheme(u.scheme().to_string()));
    }
    match u.host() {
        None => return Err(Refused::NoHost),
        Some(Host::Ipv4(a)) => allow.check(IpAddr::V4(a))?,
        Some(Host::Ipv6(a)) => allow.check(IpAddr::V6(a))?,
        Some(Host::Domain(_)) => {}
    }
    Ok(u)
}

/// Parses, resolves and checks every address; returns the addresses to connect to.
pub async fn check_resolved(url: &str, allow: &Allow) -> Result<Vec<SocketAddr>, Refused> {
    let u = parse(url, allow)?;
    let port = u.port_or_known_default().unwrap_or(80);
    match u.host() {
        Some(Host::Ipv4(a)) => Ok(vec![SocketAddr::new(IpAddr::V4(a), port)]),
        Some(Host::Ipv6(a)) => Ok(vec![SocketAddr::new(IpAddr::V6(a), port)]),
        Some(Host::Domain(d)) => resolve(d, port, allow).await,
        None => Err(Refused::NoHost),
    }
}

/// Resolves `host` and checks every address (one refused address refuses the host: a name
/// must not mix public and private answers).
pub async fn resolve(host: &str, port: u16, allow: &Allow) -> Result<Vec<SocketAddr>, Refused> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| Refused::Resolve {
            host: host.to_string(),
            reason: e.to_string(),
        })?
        .collect();
    if addrs.is_empty() {
        return Err(Refused::Resolve {
            host: host.to_string(),
            reason: "no addresses".into(),
        });
    }
    for a in &addrs {
        allow.check(a.ip())?;
    }
    Ok(addrs)
}

/// The executor's DNS resolver: resolves and checks, so the client connects only to
/// checked addresses.
pub struct GuardedResolver {
    pub allow: Allow,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow = self.allow.clone();
        Box::pin(async move {
            let addrs = resolve(name.as_str(), 0, &allow)
                .await
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(url: &str) -> Option<Range> {
        match parse(url, &Allow::none()) {
            Err(Refused::Range { range, .. }) => Some(range),
            Ok(_) => None,
            Err(e) => panic!("{url}: {e}"),
        }
    }

    #[test]
    fn every_spelling_of_a_refused_address_is_refused() {
        for (url, range) in [
            ("http://127.0.0.1/", Range::Loopback),
            ("http://127.1/", Range::Loopback),
            ("http://2130706433/", Range::Loopback),
            ("http://0x7f000001/", Range::Loopback),
            ("http://0x7f.0.0.1/", Range::Loopback),
            ("http://0177.0.0.1/", Range::Loopback),
            ("http://[::1]/", Range::Loopback),
            ("http://[::ffff:127.0.0.1]/", Range::Loopback),
            ("http://[::ffff:7f00:1]/", Range::Loopback),
            ("http://[::127.0.0.1]/", Range::Loopback),
            ("http://[64:ff9b::7f00:1]/", Range::Loopback),
            ("http://[2002:7f00:1::]/", Range::Loopback),
            ("http://10.1.2.3/", Range::Private),
            ("http://172.16.0.1/", Range::Private),
            ("http://172.31.255.255/", Range::Private),
            ("http://192.168.1.1/", Range::Private),
            ("http://[::ffff:10.0.0.1]/", Range::Private),
            ("http://[fd00:ec2::254]/", Range::Private),
            ("http://[fc00::1]/", Range::Private),
            ("http://169.254.169.254/latest/meta-data/", Range::LinkLocal),
            ("http://2852039166/", Range::LinkLocal),
            ("http://[fe80::1]/", Range::LinkLocal),
            ("http://[::ffff:169.254.169.254]/", Range::LinkLocal),
            ("http://100.100.100.200/", Range::Shared),
            ("http://224.0.0.1/", Range::Multicast),
            ("http://[ff02::1]/", Range::Multicast),
            ("http://0.0.0.0/", Range::Unspecified),
            ("http://0/", Range::Unspecified),
            ("http://[::]/", Range::Unspecified),
            ("http://255.255.255.255/", Range::Reserved),
            ("http://198.18.0.1/", Range::Reserved),
        ] {
            assert_eq!(refused(url), Some(range), "{url}");
        }
        for url in [
            "http://8.8.8.8/",
            "https://1.1.1.1/x",
            "http://172.32.0.1/",
            "http://[2606:4700::1111]/",
            "http://[::ffff:8.8.8.8]/",
            "http://example.com/",
        ] {
            assert_eq!(refused(url), None, "{url}");
        }
    }

    #[test]
    fn schemes_and_allow_lists() {
        assert!(matches!(
            parse("file:///etc/passwd", &Allow::none()),
            Err(Refused::Scheme(_))
        ));
        assert!(matches!(
            parse("gopher://127.0.0.1/", &Allow::none()),
            Err(Refused::Scheme(_))
        ));
        let lo = Allow::of(&[Range::Loopback]);
        assert!(parse("http://127.0.0.1:8080/", &lo).is_ok());
        assert!(parse("http://[::1]/", &lo).is_ok());
        // Allowing loopback allows nothing else.
        assert!(parse("http://10.0.0.1/", &lo).is_err());
        assert!(parse("http://169.254.169.254/", &lo).is_err());
        assert_eq!(Range::parse("link_local"), Some(Range::LinkLocal));
        assert_eq!(Range::parse("everything"), None);
    }

    #[test]
    fn cidrs_allow_their_block_only() {
        let mut a = Allow::none();
        a.cidrs.insert(Cidr::parse("10.1.0.0/16").unwrap());
        a.cidrs.insert(Cidr::parse("fd00::/8").unwrap());
        assert!(parse("http://10.1.2.3/", &a).is_ok());
        assert!(parse("http://[::ffff:10.1.2.3]/", &a).is_ok());
        assert!(parse("http://[fd12::1]/", &a).is_ok());
        assert!(parse("http://10.2.0.1/", &a).is_err());
        assert!(parse("http://127.0.0.1/", &a).is_err());
        assert!(Cidr::parse("10.1.0.1/16").is_err());
        assert!(Cidr::parse("10.1.0.0/33").is_err());
        assert!(Cidr::parse("nope/8").is_err());
        assert_eq!(
            Cidr::parse("127.0.0.1").unwrap().to_string(),
            "127.0.0.1/32"
        );
        assert_eq!(Cidr::parse("0.0.0.0/0").unwrap().prefix, 0);
    }

    #[tokio::test]
    async fn names_are_resolved_and_checked() {
        let e = check_resolved("http://localhost:9/", &Allow::none())
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                Refused::Range {
                    range: Range::Loopback,
                    ..
                }
            ),
            "{e}"
        );
        let ok = check_resolved("http://localhost:9/", &Allow::of(&[Range::Loopback]))
            .await
            .unwrap();
        assert!(ok.iter().all(|a| a.ip().is_loopback() && a.port() == 9));
    }
}
