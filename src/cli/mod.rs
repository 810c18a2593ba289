//! The subcommands of the `rocketmq-actor` binary.
//!
//! This module tree belongs to the binary (`src/main.rs`), not to the library, whose root is
//! also `src/`: the library never declares `mod cli`.

pub mod admin;
pub mod consume;
pub mod embedded;
pub mod format;
pub mod manage;
pub mod output;
pub mod produce;
pub mod signal;
pub mod watch;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rocketmq_actor::acl::Credentials;
use rocketmq_actor::namespace::Namespace;
use rocketmq_actor::route::{NameServerList, TopicRoute};
use rocketmq_actor::tls::{PemIdentity, TlsConfig};
use rocketmq_actor::{Client, ClientConfig, Error};

/// How a command that ran ended (its exit status: 0 or 130).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It did what it was asked (exit 0).
    Done,
    /// SIGINT or SIGTERM came before it was done (exit 130).
    Interrupted,
}

/// Why a command could not do its work — network, broker, name server, I/O (exit 1). Usage
/// errors never get this far: clap reports them (exit 2) before anything runs.
#[derive(Debug)]
pub struct Failure(pub String);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        match &error {
            Error::AccessDenied { .. } => Failure(format!(
                "{error} (check --access-key/--secret-key or ROCKETMQ_ACCESS_KEY/ROCKETMQ_SECRET_KEY, and the account's permissions)"
            )),
            _ => Failure(error.to_string()),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(error: std::io::Error) -> Self {
        Failure(error.to_string())
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure(message)
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Self {
        Failure(message.to_owned())
    }
}

/// What a command returns.
pub type CliResult<T = Outcome> = Result<T, Failure>;

/// Where the cluster is and how long its servers may take to answer.
#[derive(clap::Args, Clone, Debug)]
pub struct Connect {
    /// Name-server addresses, `;`-separated (`host:port;host:port`); without it the
    /// `NAMESRV_ADDR` environment variable, as Java clients and mqadmin read it.
    #[arg(
        short,
        long,
        env = "NAMESRV_ADDR",
        value_parser = namesrv_list,
        value_name = "ADDRS"
    )]
    pub namesrv: String,
    /// How long a name server or broker may take to answer one request (e.g. `3s`, `500ms`).
    /// A name server that does not answer within it ends the command with exit status 1.
    #[arg(long, value_parser = positive_duration, value_name = "DURATION", default_value = "3s")]
    pub request_timeout: Duration,
    /// Access key of an account of a cluster with ACL: every request is signed with it and
    /// `--secret-key`.
    #[arg(
        long,
        env = "ROCKETMQ_ACCESS_KEY",
        requires = "secret_key",
        value_name = "KEY"
    )]
    pub access_key: Option<String>,
    /// Secret key of that account (better given by the environment than on the command line,
    /// where other users of the host can read it). Never printed.
    #[arg(
        long,
        env = "ROCKETMQ_SECRET_KEY",
        hide_env_values = true,
        requires = "access_key",
        value_name = "SECRET"
    )]
    pub secret_key: Option<String>,
    /// Connect to the name servers and brokers over TLS, trusting the webpki (Mozilla) roots
    /// unless `--tls-ca` or `--tls-insecure` says otherwise.
    #[arg(long)]
    pub tls: bool,
    /// Trust the CA certificates of this PEM file (implies `--tls`).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Accept any server certificate without checking it, as the Java client does by default:
    /// encrypted, but not protected from whoever can intercept the connection (implies `--tls`).
    #[arg(long, conflicts_with = "tls_ca")]
    pub tls_insecure: bool,
    /// Expect this name in the servers' certificates instead of their IP address (implies
    /// `--tls`).
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
    /// Present this certificate (PEM chain) to servers that require one (implies `--tls`).
    #[arg(long, value_name = "FILE", requires = "tls_client_key")]
    pub tls_client_cert: Option<PathBuf>,
    /// The private key (PEM) of `--tls-client-cert`.
    #[arg(long, value_name = "FILE", requires = "tls_client_cert")]
    pub tls_client_key: Option<PathBuf>,
    /// Namespace (Java's `namespace`): the topics and groups given here are `NS%name` on the
    /// wire (their retry and dead-letter topics `%RETRY%NS%group`, `%DLQ%NS%group`), and every
    /// topic printed is shown without it.
    #[arg(long, value_parser = namespace_arg, value_name = "NS")]
    pub namespace: Option<String>,
}

impl Connect {
    /// A client instance on these name servers.
    pub fn client(&self) -> CliResult<Client> {
        let mut config = ClientConfig::new(&self.namesrv);
        config.request_timeout = self.request_timeout;
        if let (Some(access_key), Some(secret_key)) = (&self.access_key, &self.secret_key) {
            config.credentials = Some(Credentials::new(access_key, secret_key));
        }
        config.tls = self.tls_config()?;
        Ok(Client::start(config)?)
    }

    /// A plaintext connection (no address given): the arguments of a command run against an
    /// embedded cluster of this process.
    pub fn plain(namesrv: String, request_timeout: Duration) -> Self {
        Connect {
            namesrv,
            request_timeout,
            tls: false,
            tls_ca: None,
            tls_insecure: false,
            tls_server_name: None,
            tls_client_cert: None,
            tls_client_key: None,
            access_key: None,
            secret_key: None,
            namespace: None,
        }
    }

    /// The TLS setup the `--tls*` flags describe; `None` without any of them.
    pub fn tls_config(&self) -> CliResult<Option<TlsConfig>> {
        let wanted = self.tls
            || self.tls_ca.is_some()
            || self.tls_insecure
            || self.tls_server_name.is_some()
            || self.tls_client_cert.is_some();
        if !wanted {
            return Ok(None);
        }
        let mut tls = match (&self.tls_ca, self.tls_insecure) {
            (Some(ca), _) => TlsConfig::ca_file(ca),
            (None, true) => TlsConfig::accept_any_certificate(),
            (None, false) => TlsConfig::webpki_roots(),
        };
        if let Some(name) = &self.tls_server_name {
            tls = tls.server_name(name);
        }
        if let (Some(cert), Some(key)) = (&self.tls_client_cert, &self.tls_client_key) {
            tls = tls.client_identity(PemIdentity::from_files(cert, key)?);
        }
        Ok(Some(tls))
    }

    /// Asks the name servers for `topic`'s route: any answer, "no such topic" included, shows
    /// they are there (`None` then); only silence or a failed connection is an error, named
    /// after the name servers rather than as a retry that never ends.
    pub async fn probe(&self, client: &Client, topic: &str) -> CliResult<Option<Arc<TopicRoute>>> {
        match client.refresh_route(topic).await {
            Ok(route) => Ok(Some(route)),
            Err(Error::TopicRouteNotFound(_)) => Ok(None),
            Err(e) => Err(self.unreachable(e)),
        }
    }

    /// The namespace of `--namespace` (or of an `MQ_INST_…` name-server address), else none.
    pub fn namespace(&self) -> Namespace {
        // `--namespace` was checked by its parser, and a derived one is always valid.
        Namespace::resolve(self.namespace.as_deref(), &self.namesrv).unwrap_or_default()
    }

    /// An error of a request to the name servers, worded for the operator.
    pub fn unreachable(&self, error: Error) -> Failure {
        match error {
            // A TLS failure or a hang-up is not silence: say what the server did.
            Error::NameServerUnavailable { detail, .. }
                if detail.contains("TLS handshake") || detail.contains("before answering") =>
            {
                let prefix = format!("{}: ", self.namesrv);
                let detail = detail.strip_prefix(&prefix).unwrap_or(&detail);
                Failure(format!("cannot use name server {}: {detail}", self.namesrv))
            }
            Error::NameServerUnavailable { detail, .. } => Failure(format!(
                "name server {} did not answer within {} ({detail})",
                self.namesrv,
                humantime::format_duration(self.request_timeout)
            )),
            other => other.into(),
        }
    }
}

/// `--namesrv`: a non-empty `;`-separated address list.
fn namesrv_list(list: &str) -> Result<String, String> {
    NameServerList::parse(list)
        .map(|_| list.to_owned())
        .map_err(|e| e.to_string())
}

/// `--namespace`: Java's name characters without `%` (blank: none).
fn namespace_arg(text: &str) -> Result<String, String> {
    rocketmq_actor::namespace::validate(text)
        .map(|()| text.to_owned())
        .map_err(|e| e.to_string())
}

/// A duration longer than zero (`3s`, `500ms`, `1m`).
pub fn positive_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if duration.is_zero() {
        return Err("must be longer than zero".into());
    }
    Ok(duration)
}

/// A point in time as epoch milliseconds: a Unix time in ms (`1700000000000`), an RFC 3339
/// time (`2026-12-07T10:00:00Z`, `2026-12-07 10:00:00+08:00`), `now`, or a time relative to
/// now (`-1h`, `-90s`, `-2days`: humantime's units).
pub fn parse_time(text: &str) -> Result<i64, String> {
    parse_time_at(text, rocketmq_actor::util::now_ms())
}

/// [`parse_time`] with "now" given.
fn parse_time_at(text: &str, now_ms: i64) -> Result<i64, String> {
    const EXPECTED: &str =
        "expected a Unix time in ms, an RFC 3339 time (2026-12-07T10:00:00Z), now, or -DURATION (-1h)";
    let text = text.trim();
    if text == "now" {
        return Ok(now_ms);
    }
    if let Some(ago) = text.strip_prefix('-') {
        let ago = humantime::parse_duration(ago).map_err(|e| format!("{EXPECTED}: {e}"))?;
        let ago = i64::try_from(ago.as_millis()).map_err(|_| EXPECTED.to_owned())?;
        return Ok(now_ms.saturating_sub(ago));
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().map_err(|_| EXPECTED.to_owned());
    }
    let rfc3339 = text.replacen(' ', "T", 1);
    let time =
        time::OffsetDateTime::parse(&rfc3339, &time::format_description::well_known::Rfc3339)
            // What is wrong with what looks like a date helps; with a word it does not.
            .map_err(|e| match text.starts_with(|c: char| c.is_ascii_digit()) {
                true => format!("{EXPECTED}: {e}"),
                false => EXPECTED.to_owned(),
            })?;
    i64::try_from(time.unix_timestamp_nanos() / 1_000_000).map_err(|_| EXPECTED.to_owned())
}

/// A count of at least 1.
pub fn positive_u64(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Writes one JSON line to stderr: the closing summary of a command whose stdout carries data
/// lines (`consume`), so `| wc -l` and `| jq` see only the data.
pub fn emit_summary(value: &serde_json::Value) {
    let mut err = std::io::stderr().lock();
    // Nothing is left to report a failing stderr to.
    let _ = writeln!(err, "{value}").and_then(|()| err.flush());
}

/// `value` rounded to three decimals, for summaries.
pub fn rounded(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// Writes one JSON line to stdout. A reader that went away (`| head`) is not an error: what it
/// asked for was written.
pub fn emit(value: &serde_json::Value) -> CliResult<()> {
    write_stdout(format!("{value}\n").as_bytes())
}

/// Writes `bytes` to stdout and flushes. A reader that went away (`| head`) is not an error:
/// what it asked for was written.
pub fn write_stdout(bytes: &[u8]) -> CliResult<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure(format!("cannot write to stdout: {e}")))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_every_form() {
        let now = 1_765_000_000_000;
        assert_eq!(parse_time_at("1700000000000", now), Ok(1_700_000_000_000));
        assert_eq!(parse_time_at("now", now), Ok(now));
        assert_eq!(parse_time_at("-1h", now), Ok(now - 3_600_000));
        assert_eq!(parse_time_at("-1m 30s", now), Ok(now - 90_000));
        assert_eq!(
            parse_time_at("2024-01-01T00:00:00Z", now),
            Ok(1_704_067_200_000)
        );
        assert_eq!(
            parse_time_at("2024-01-01 08:00:00.250+08:00", now),
            Ok(1_704_067_200_250)
        );
        for bad in [
            "",
            "yesterday",
            "-",
            "-1 fortnight",
            "2024-13-01T00:00:00Z",
            "2024-01-01",
        ] {
            let error = parse_time_at(bad, now).expect_err(bad);
            assert!(error.starts_with("expected a Unix time"), "{bad}: {error}");
        }
    }
}
