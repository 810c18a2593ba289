//! Who this client is to the brokers: the client IP and the client id (`ip@instance`).
//!
//! Brokers tell consumers apart only by client id, and allocation gives each id its share of
//! the queues: two members with one id both take the same share and consume it twice. Java
//! builds the id from the host's first non-loopback address and the pid; in containers every
//! process is pid 1, so the instance name here also carries a token drawn once per process
//! start.

use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::OnceLock;

/// The address to put into client ids and message ids: the first non-loopback, non-link-local
/// IPv4 address, else such an IPv6 address, else 127.0.0.1 (as Java's
/// `NetworkUtil.getLocalAddress` prefers IPv4).
///
/// ```
/// use std::net::IpAddr;
/// use rocketmq_actor::identity::pick_client_ip;
/// let addrs: Vec<IpAddr> = ["127.0.0.1", "fe80::1", "10.1.2.3"].iter().map(|a| a.parse().unwrap()).collect();
/// assert_eq!(pick_client_ip(&addrs), "10.1.2.3".parse::<IpAddr>().unwrap());
/// assert_eq!(pick_client_ip(&[]), "127.0.0.1".parse::<IpAddr>().unwrap());
/// ```
pub fn pick_client_ip(addrs: &[IpAddr]) -> IpAddr {
    let usable = |ip: &&IpAddr| match ip {
        IpAddr::V4(v4) => !v4.is_loopback() && !v4.is_link_local() && !v4.is_unspecified(),
        IpAddr::V6(v6) => {
            !v6.is_loopback() && !v6.is_unspecified() && (v6.segments()[0] & 0xffc0) != 0xfe80
        }
    };
    addrs
        .iter()
        .filter(usable)
        .find(|ip| ip.is_ipv4())
        .or_else(|| addrs.iter().find(|ip| usable(ip)))
        .copied()
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// A random token drawn once per process start, as 8 hex digits.
pub fn process_token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| {
        // RandomState is seeded from the OS's randomness once per process.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        format!("{:08X}", hasher.finish() as u32)
    })
}

/// The default instance name: `pid#token#n` — unique per client instance in the process and,
/// through the token, across processes that share a pid (containers) and IP.
///
/// ```
/// use rocketmq_actor::identity::default_instance_name;
/// assert_eq!(default_instance_name(1, "0A1B2C3D", 0), "1#0A1B2C3D#0");
/// ```
pub fn default_instance_name(pid: u32, token: &str, counter: u64) -> String {
    format!("{pid}#{token}#{counter}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefers_ipv4_then_ipv6_and_skips_loopback_and_link_local() {
        let parse =
            |list: &[&str]| -> Vec<IpAddr> { list.iter().map(|a| a.parse().unwrap()).collect() };
        assert_eq!(
            pick_client_ip(&parse(&[
                "::1",
                "2001:db8::5",
                "169.254.0.9",
                "192.168.1.4"
            ])),
            "192.168.1.4".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            pick_client_ip(&parse(&["127.0.0.1", "fe80::2", "2001:db8::5"])),
            "2001:db8::5".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn the_process_token_is_stable_within_a_process() {
        assert_eq!(process_token(), process_token());
        assert_eq!(process_token().len(), 8);
    }
}
