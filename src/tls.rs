//! TLS for the remoting transport (feature `tls`): what a client trusts and presents, what a
//! server (the embedded broker) presents and accepts, and the plain decisions around a
//! handshake — without sockets.
//!
//! RocketMQ's scheme (Java `TlsHelper`, rocketmq-rust `rocketmq-transport`) is plain TLS from the
//! first byte on the ordinary port: no STARTTLS, no separate port. Inside TLS the frames are the
//! usual length-prefixed remoting frames. A server in *permissive* mode (Java's default
//! `tls.server.mode`) serves TLS and plaintext clients on the same port, telling them apart by
//! the first byte a client sends (`0x16`, a TLS handshake record, starts a ClientHello); in
//! *enforcing* mode it closes plaintext connections.
//!
//! A client chooses TLS per kind of peer ([`TlsPeers`]): the name servers, the brokers, or both.
//! What it trusts is explicit ([`TlsTrust`]): the webpki (Mozilla) roots, a CA bundle, or — what
//! the Java client does by default — any certificate at all.
//!
//! ```
//! use rocketmq_actor::tls::{TlsConfig, TlsPeers};
//! use rocketmq_actor::ClientConfig;
//! let mut config = ClientConfig::new("10.0.0.5:9876");
//! config.tls = Some(
//!     TlsConfig::ca_file("/etc/rocketmq/ca.pem")
//!         .server_name("rocketmq.internal")
//!         .peers(TlsPeers::All),
//! );
//! ```
//!
//! The connection actor (`actors/connection.rs`) runs the handshake right after the TCP
//! connect; the embedded broker's listener (`actors/broker/listener.rs`) peeks at the first
//! byte and accepts. Everything they decide is here.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

use crate::error::{Error, Result};

/// The first byte of a TLS handshake record: what a ClientHello starts with.
pub const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Which peers of a client are reached over TLS (the others in plaintext).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsPeers {
    /// Name servers and brokers (the usual case; Java's `useTLS` applies to every connection).
    #[default]
    All,
    /// Only the name servers.
    NameServers,
    /// Only the brokers (any address that is not one of the configured name servers).
    Brokers,
}

impl TlsPeers {
    /// Whether a connection to a name server (`true`) or a broker (`false`) uses TLS.
    pub fn covers(self, name_server: bool) -> bool {
        match self {
            TlsPeers::All => true,
            TlsPeers::NameServers => name_server,
            TlsPeers::Brokers => !name_server,
        }
    }
}

/// Which server certificates a client accepts.
#[derive(Clone, PartialEq, Eq)]
pub enum TlsTrust {
    /// Certificates that chain to the Mozilla root programme's CAs (the `webpki-roots` crate,
    /// compiled in; the operating system's store is not read).
    WebPkiRoots,
    /// Certificates that chain to one of the CA certificates of this PEM bundle.
    CaPem(Vec<u8>),
    /// Certificates that chain to one of the CA certificates of this PEM file (read when the
    /// client starts).
    CaFile(PathBuf),
    /// **Any certificate, unverified** — what the Java client does by default (its test mode,
    /// `tls.client.authServer=false`). The traffic is encrypted but anyone who can intercept
    /// the connection can read and change it: use it only where that is acceptable (a lab, a
    /// broker with a self-signed certificate you cannot get hold of).
    AcceptAnyCertificate,
}

impl fmt::Debug for TlsTrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsTrust::WebPkiRoots => f.write_str("WebPkiRoots"),
            TlsTrust::CaPem(pem) => write!(f, "CaPem({} bytes)", pem.len()),
            TlsTrust::CaFile(path) => f.debug_tuple("CaFile").field(path).finish(),
            TlsTrust::AcceptAnyCertificate => f.write_str("AcceptAnyCertificate"),
        }
    }
}

/// A certificate chain and its private key, PEM-encoded (the chain's first certificate is the
/// holder's own; a key in PKCS#8, PKCS#1 or SEC1 form).
#[derive(Clone, PartialEq, Eq)]
pub struct PemIdentity {
    /// The certificate chain, leaf first.
    pub cert_chain_pem: Vec<u8>,
    /// The private key of the leaf certificate.
    pub key_pem: Vec<u8>,
}

impl fmt::Debug for PemIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PemIdentity")
            .field(
                "cert_chain_pem",
                &format_args!("{} bytes", self.cert_chain_pem.len()),
            )
            .field("key_pem", &"<hidden>")
            .finish()
    }
}

impl PemIdentity {
    /// An identity from PEM text.
    pub fn new(cert_chain_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        PemIdentity {
            cert_chain_pem: cert_chain_pem.into(),
            key_pem: key_pem.into(),
        }
    }

    /// An identity read from a certificate-chain file and a key file.
    pub fn from_files(cert_chain: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<Self> {
        Ok(PemIdentity {
            cert_chain_pem: read_file("tls certificate", cert_chain.as_ref())?,
            key_pem: read_file("tls key", key.as_ref())?,
        })
    }

    /// The parsed chain and key, checked to be usable.
    fn parse(
        &self,
        what: &'static str,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
        let chain = parse_certificates(what, &self.cert_chain_pem)?;
        let key = PrivateKeyDer::from_pem_slice(&self.key_pem).map_err(|e| Error::Config {
            option: what,
            value: format!("{} bytes of key PEM", self.key_pem.len()),
            allowed: format!("a PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
        })?;
        Ok((chain, key))
    }
}

/// How a client uses TLS: which peers, what it trusts, which name it expects, and optionally a
/// client certificate (mutual TLS). Set it as [`ClientConfig::tls`](crate::ClientConfig::tls).
///
/// Certificates are checked against the address's IP (RocketMQ addresses are `IP:port`), or
/// against [`server_name`](Self::server_name) when set — then also sent as SNI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// Which peers are reached over TLS.
    pub peers: TlsPeers,
    /// Which server certificates are accepted.
    pub trust: TlsTrust,
    /// The name every server's certificate must carry, instead of the address's IP.
    pub server_name: Option<String>,
    /// A certificate to present to servers that ask for one.
    pub client_identity: Option<PemIdentity>,
}

impl TlsConfig {
    /// TLS to every peer, trusting `trust`.
    pub fn new(trust: TlsTrust) -> Self {
        TlsConfig {
            peers: TlsPeers::All,
            trust,
            server_name: None,
            client_identity: None,
        }
    }

    /// TLS trusting the webpki (Mozilla) roots.
    pub fn webpki_roots() -> Self {
        Self::new(TlsTrust::WebPkiRoots)
    }

    /// TLS trusting the CA certificates of a PEM file.
    pub fn ca_file(path: impl Into<PathBuf>) -> Self {
        Self::new(TlsTrust::CaFile(path.into()))
    }

    /// TLS trusting the CA certificates of PEM text.
    pub fn ca_pem(pem: impl Into<Vec<u8>>) -> Self {
        Self::new(TlsTrust::CaPem(pem.into()))
    }

    /// TLS accepting **any** server certificate, as the Java client does by default: encrypted
    /// but not authenticated. See [`TlsTrust::AcceptAnyCertificate`].
    pub fn accept_any_certificate() -> Self {
        Self::new(TlsTrust::AcceptAnyCertificate)
    }

    /// Expects this name (DNS name or IP) in every server's certificate.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Uses TLS only for these peers.
    pub fn peers(mut self, peers: TlsPeers) -> Self {
        self.peers = peers;
        self
    }

    /// Presents this certificate to servers that ask for one (mutual TLS).
    pub fn client_identity(mut self, identity: PemIdentity) -> Self {
        self.client_identity = Some(identity);
        self
    }

    /// The connector this configuration describes: files read, PEM parsed, rustls configured.
    /// Every problem is reported here, when the client starts, not at the first connect.
    pub(crate) fn connector(&self) -> Result<TlsConnector> {
        let provider = provider();
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_setup_error(&e))?;
        let builder = match &self.trust {
            TlsTrust::AcceptAnyCertificate => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate { provider })),
            TlsTrust::WebPkiRoots => {
                let roots = rustls::RootCertStore {
                    roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
                };
                builder.with_root_certificates(roots)
            }
            TlsTrust::CaPem(pem) => builder.with_root_certificates(root_store("tls CA", pem)?),
            TlsTrust::CaFile(path) => {
                let pem = read_file("tls CA file", path)?;
                builder.with_root_certificates(root_store("tls CA file", &pem)?)
            }
        };
        let config = match &self.client_identity {
            None => builder.with_no_client_auth(),
            Some(identity) => {
                let (chain, key) = identity.parse("tls client identity")?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| Error::Config {
                        option: "tls client identity",
                        value: "the certificate and key given".into(),
                        allowed: format!("a certificate with its own private key: {e}"),
                    })?
            }
        };
        let server_name = match &self.server_name {
            Some(name) => Some(
                ServerName::try_from(name.clone()).map_err(|_| Error::Config {
                    option: "tls server_name",
                    value: name.clone(),
                    allowed: "a DNS name or an IP address".into(),
                })?,
            ),
            None => None,
        };
        Ok(TlsConnector {
            config: Arc::new(config),
            server_name,
            peers: self.peers,
        })
    }
}

/// A client's ready TLS setup, shared by all its connections.
#[derive(Clone)]
pub(crate) struct TlsConnector {
    pub(crate) config: Arc<rustls::ClientConfig>,
    server_name: Option<ServerName<'static>>,
    peers: TlsPeers,
}

impl TlsConnector {
    /// Whether a connection to this kind of peer uses TLS.
    pub(crate) fn covers(&self, name_server: bool) -> bool {
        self.peers.covers(name_server)
    }

    /// The name a peer's certificate is checked against: the configured one, else the host of
    /// `addr` (`IP:port`, `[IPv6]:port` or `host:port`).
    pub(crate) fn server_name_for(&self, addr: &str) -> Result<ServerName<'static>, String> {
        if let Some(name) = &self.server_name {
            return Ok(name.clone());
        }
        server_name_of(addr)
    }
}

/// The host part of a remote address as a TLS server name.
pub(crate) fn server_name_of(addr: &str) -> Result<ServerName<'static>, String> {
    let host = match addr.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => host,
        _ => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(ServerName::IpAddress(ip.into()));
    }
    ServerName::try_from(host.to_owned())
        .map_err(|_| format!("`{host}` is neither an IP address nor a DNS name"))
}

/// The crypto of every TLS configuration here: rustls with `ring` (no cmake or nasm to build).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_setup_error(error: &rustls::Error) -> Error {
    Error::Config {
        option: "tls",
        value: "the protocol versions of the ring provider".into(),
        allowed: error.to_string(),
    }
}

fn read_file(option: &'static str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::Config {
        option,
        value: path.display().to_string(),
        allowed: format!("a readable PEM file ({e})"),
    })
}

/// Every certificate of a PEM text; at least one.
fn parse_certificates(option: &'static str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Config {
            option,
            value: format!("{} bytes of PEM", pem.len()),
            allowed: format!("PEM certificates: {e}"),
        })?;
    if certs.is_empty() {
        return Err(Error::Config {
            option,
            value: format!("{} bytes without a certificate", pem.len()),
            allowed: "at least one PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        });
    }
    Ok(certs)
}

fn root_store(option: &'static str, pem: &[u8]) -> Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in parse_certificates(option, pem)? {
        roots.add(cert).map_err(|e| Error::Config {
            option,
            value: format!("{} bytes of PEM", pem.len()),
            allowed: format!("CA certificates usable as trust anchors: {e}"),
        })?;
    }
    Ok(roots)
}

/// Accepts every server certificate but still checks that the server holds its key (the
/// handshake signatures), so the session keys are at least bound to *a* certificate.
#[derive(Debug)]
struct AcceptAnyCertificate {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Why a client's TLS handshake failed, in the words an operator needs: which check failed and
/// what to do about it. `error` is what the handshake returned.
pub(crate) fn describe_handshake_failure(error: &std::io::Error) -> String {
    let tls = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match tls {
        Some(tls) => describe_tls_error(tls),
        None => match error.kind() {
            std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe => format!(
                "the peer closed the connection during the handshake ({error}): \
                 it does not speak TLS on this port (a plaintext server drops a ClientHello) \
                 or it refused this client"
            ),
            _ => error.to_string(),
        },
    }
}

fn describe_tls_error(error: &rustls::Error) -> String {
    match error {
        rustls::Error::InvalidCertificate(cert) => match cert {
            // A bad signature: a trusted CA's name, but not its key.
            CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
                "the server's certificate is not signed by a trusted CA ({error}); \
                 trust its CA (--tls-ca FILE) or, knowingly, any certificate (--tls-insecure)"
            ),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!(
                    "the server's certificate is not valid for the name checked ({error}); \
                     set the name it carries as the server name (--tls-server-name NAME)"
                )
            }
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. } => {
                format!("the server's certificate is outside its validity period ({error})")
            }
            _ => format!("the server's certificate was refused ({error})"),
        },
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            format!("the peer does not speak TLS on this port ({error})")
        }
        rustls::Error::AlertReceived(alert) => format!(
            "the server refused the handshake with alert {alert:?} (a server that requires a \
             client certificate sends this when none or an untrusted one is given)"
        ),
        rustls::Error::PeerIncompatible(_) => {
            format!("the server and this client share no TLS version or cipher suite ({error})")
        }
        other => other.to_string(),
    }
}

/// How a server treats plaintext clients (Java's `tls.server.mode`, without `disabled`: a
/// server without a TLS setup is that).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// TLS and plaintext clients on the same port, told apart by their first byte (Java's
    /// default).
    #[default]
    Permissive,
    /// TLS clients only; a plaintext connection is closed at its first byte.
    Enforcing,
}

impl std::str::FromStr for TlsMode {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text {
            "permissive" => Ok(TlsMode::Permissive),
            "enforcing" => Ok(TlsMode::Enforcing),
            other => Err(format!("`{other}`: expected permissive or enforcing")),
        }
    }
}

/// What a TLS-enabled server does with a new connection, decided from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "embedded"), allow(dead_code))]
pub(crate) enum FirstByte {
    /// A ClientHello: run the TLS handshake.
    Tls,
    /// Plaintext frames, allowed in this mode.
    Plain,
    /// Plaintext in enforcing mode (or nothing at all): close.
    Refuse,
}

/// Classifies a connection by the first byte it sent (`None`: it closed without sending one).
#[cfg_attr(not(feature = "embedded"), allow(dead_code))]
pub(crate) fn classify_first_byte(mode: TlsMode, first: Option<u8>) -> FirstByte {
    match (first, mode) {
        (Some(TLS_HANDSHAKE_RECORD), _) => FirstByte::Tls,
        (Some(_), TlsMode::Permissive) => FirstByte::Plain,
        (Some(_), TlsMode::Enforcing) | (None, _) => FirstByte::Refuse,
    }
}

/// How a server (the embedded broker) serves TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsConfig {
    /// Whether plaintext clients are served too.
    pub mode: TlsMode,
    /// The certificate it presents; `None`: a fresh CA and a certificate it signed for the
    /// loopback names (`127.0.0.1`, `::1`, `localhost`) are generated at start.
    pub identity: Option<PemIdentity>,
    /// CA certificates (PEM) of which clients must present a certificate (mutual TLS);
    /// `None`: no client certificate is asked for.
    pub client_ca_pem: Option<Vec<u8>>,
}

impl ServerTlsConfig {
    /// TLS in `mode` with a generated certificate.
    pub fn generated(mode: TlsMode) -> Self {
        ServerTlsConfig {
            mode,
            identity: None,
            client_ca_pem: None,
        }
    }

    /// TLS in `mode` presenting `identity`.
    pub fn with_identity(mode: TlsMode, identity: PemIdentity) -> Self {
        ServerTlsConfig {
            mode,
            identity: Some(identity),
            client_ca_pem: None,
        }
    }

    /// The rustls server setup, and the PEM of the CA clients should trust when the
    /// certificate was generated (`extra_names`: names besides the loopback ones to put in
    /// it).
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    pub(crate) fn build(
        &self,
        extra_names: &[String],
    ) -> Result<(Arc<rustls::ServerConfig>, Option<String>)> {
        let (identity, ca_pem) = match &self.identity {
            Some(identity) => (identity.clone(), None),
            None => {
                let mut names = vec![
                    "127.0.0.1".to_owned(),
                    "::1".to_owned(),
                    "localhost".to_owned(),
                ];
                names.extend(
                    extra_names
                        .iter()
                        .filter(|n| !names.contains(n))
                        .cloned()
                        .collect::<Vec<_>>(),
                );
                let ca = TestCa::generate()?;
                let identity = ca.issue(&names)?;
                (identity, Some(ca.cert_pem().to_owned()))
            }
        };
        let (chain, key) = identity.parse("tls server identity")?;
        let provider = provider();
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_setup_error(&e))?;
        let builder = match &self.client_ca_pem {
            None => builder.with_no_client_auth(),
            Some(pem) => {
                let roots = Arc::new(root_store("tls client CA", pem)?);
                let verifier =
                    rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider)
                        .build()
                        .map_err(|e| Error::Config {
                            option: "tls client CA",
                            value: format!("{} bytes of PEM", pem.len()),
                            allowed: format!("CA certificates for client authentication: {e}"),
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder
            .with_single_cert(chain, key)
            .map_err(|e| Error::Config {
                option: "tls server identity",
                value: "the certificate and key given".into(),
                allowed: format!("a certificate with its own private key: {e}"),
            })?;
        Ok((Arc::new(config), ca_pem))
    }
}

/// A throw-away certificate authority for tests and the embedded broker: it signs certificates
/// for servers and clients that trust it. Its key lives in memory only.
///
/// ```
/// use rocketmq_actor::tls::TestCa;
/// let ca = TestCa::generate()?;
/// let server = ca.issue(&["127.0.0.1".to_owned(), "localhost".to_owned()])?;
/// assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
/// assert!(!server.key_pem.is_empty());
/// # Ok::<(), rocketmq_actor::Error>(())
/// ```
pub struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    cert_pem: String,
}

impl fmt::Debug for TestCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A new CA with a fresh key (ECDSA P-256).
    pub fn generate() -> Result<Self> {
        let key = rcgen::KeyPair::generate().map_err(generation_error)?;
        let mut params =
            rcgen::CertificateParams::new(Vec::<String>::new()).map_err(generation_error)?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        // A name of its own: two CAs of one name make a client that trusts the other one find
        // the wrong issuer (a bad signature instead of an unknown CA).
        let tag: String = key
            .public_key_raw()
            .iter()
            .take(6)
            .map(|b| format!("{b:02x}"))
            .collect();
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("rocketmq-actor test CA {tag}"),
        );
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).map_err(generation_error)?;
        Ok(TestCa {
            cert_pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        })
    }

    /// The CA's certificate (PEM): what clients and servers trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A certificate for `names` (IP addresses or DNS names, also its subject's common name)
    /// signed by this CA, usable by servers and clients alike, with its fresh key.
    pub fn issue(&self, names: &[String]) -> Result<PemIdentity> {
        let key = rcgen::KeyPair::generate().map_err(generation_error)?;
        let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(generation_error)?;
        if let Some(first) = names.first() {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, first.as_str());
        }
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(generation_error)?;
        Ok(PemIdentity::new(cert.pem(), key.serialize_pem()))
    }
}

fn generation_error(error: rcgen::Error) -> Error {
    Error::Config {
        option: "tls generated certificate",
        value: "a CA and a certificate signed by it".into(),
        allowed: format!("generation failed: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_byte_decides_in_each_mode() {
        use FirstByte::*;
        assert_eq!(classify_first_byte(TlsMode::Permissive, Some(0x16)), Tls);
        assert_eq!(classify_first_byte(TlsMode::Enforcing, Some(0x16)), Tls);
        // A remoting frame starts with its length's high byte: 0 for any frame under 16 MiB.
        assert_eq!(classify_first_byte(TlsMode::Permissive, Some(0x00)), Plain);
        assert_eq!(classify_first_byte(TlsMode::Enforcing, Some(0x00)), Refuse);
        assert_eq!(classify_first_byte(TlsMode::Permissive, None), Refuse);
    }

    #[test]
    fn peers_select_name_servers_brokers_or_both() {
        assert!(TlsPeers::All.covers(true) && TlsPeers::All.covers(false));
        assert!(TlsPeers::NameServers.covers(true) && !TlsPeers::NameServers.covers(false));
        assert!(!TlsPeers::Brokers.covers(true) && TlsPeers::Brokers.covers(false));
    }

    #[test]
    fn server_names_come_from_the_address_unless_overridden() {
        let ip = server_name_of("127.0.0.1:10911").unwrap();
        assert!(matches!(ip, ServerName::IpAddress(_)));
        let v6 = server_name_of("[::1]:9876").unwrap();
        assert!(matches!(v6, ServerName::IpAddress(_)));
        let dns = server_name_of("broker-a.internal:10911").unwrap();
        assert_eq!(dns.to_str(), "broker-a.internal");
        let connector = TlsConfig::accept_any_certificate()
            .server_name("rocketmq.internal")
            .connector()
            .unwrap();
        let name = connector.server_name_for("10.0.0.1:9876").unwrap();
        assert_eq!(name.to_str(), "rocketmq.internal");
    }

    #[test]
    fn bad_trust_material_is_reported_when_the_client_starts() {
        let missing = TlsConfig::ca_file("/nonexistent/ca.pem").connector();
        let message = missing.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("/nonexistent/ca.pem"), "{message}");
        let empty = TlsConfig::ca_pem(b"not a certificate".to_vec()).connector();
        let message = empty.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            message.contains("at least one PEM certificate"),
            "{message}"
        );
        let name = TlsConfig::webpki_roots()
            .server_name("not a name!")
            .connector();
        assert!(name.is_err());
    }

    #[test]
    fn a_generated_ca_signs_a_usable_server_identity() {
        let ca = TestCa::generate().unwrap();
        assert!(TlsConfig::ca_pem(ca.cert_pem()).connector().is_ok());
        let (config, ca_pem) = ServerTlsConfig::generated(TlsMode::Enforcing)
            .build(&["10.1.2.3".to_owned()])
            .unwrap();
        assert!(ca_pem.is_some());
        drop(config);
        let given = ca.issue(&["localhost".to_owned()]).unwrap();
        let (_, ca_pem) = ServerTlsConfig::with_identity(TlsMode::Permissive, given)
            .build(&[])
            .unwrap();
        assert!(
            ca_pem.is_none(),
            "only a generated certificate has a CA to show"
        );
    }

    #[test]
    fn handshake_failures_say_what_to_do() {
        let unknown = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        assert!(describe_handshake_failure(&unknown).contains("not signed by a trusted CA"));
        let name = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::NotValidForName),
        );
        assert!(describe_handshake_failure(&name).contains("not valid for the name"));
        let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "tls handshake eof");
        assert!(describe_handshake_failure(&eof).contains("does not speak TLS"));
    }
}
