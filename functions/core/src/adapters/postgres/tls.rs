//! TLS to Postgres (`DB_SSLMODE` or `DATABASE_URL`'s `sslmode`, support/config/database.rs): rustls on the AWS SDK's aws-lc-rs provider.
//!
//! `verify-full` trusts the AWS roots compiled in (functions/core/data/README.md: the RDS
//! bundle for a database's own endpoint, the Amazon Trust Services roots for an RDS Proxy's)
//! and the CAs of `DB_SSLROOTCERT`, and checks that the certificate names the host connected
//! to. `require` encrypts without checking the certificate at all, as libpq's `require` does.
//!
//! The rustls configuration (the provider, 120 parsed roots) is made on the first connection,
//! not when the instance starts: a cold instance's first answer that needs no database (a 400,
//! a 415) does not wait for it (docs/PERFORMANCE.md, "Cold start"). `DB_SSLROOTCERT` is still
//! read and checked at start, so a wrong path fails the instance, not its first request.

use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::ports::StoreError;
use crate::support::config::{Config, DbSslMode};

/// AWS's RDS CA bundle (every region's RDS roots), for a database's own endpoint.
pub const RDS_BUNDLE: &[u8] = include_bytes!("../../../data/rds-global-bundle.pem");
/// The Amazon Trust Services roots an RDS Proxy endpoint's certificate chains to.
pub const RDS_PROXY_ROOTS: &[u8] = include_bytes!("../../../data/rds-proxy-roots.pem");

/// How the pool's connections are made: in the clear, or over TLS with `connector`.
#[derive(Clone)]
pub struct Tls {
    connector: Option<LazyConnector>,
}

impl Tls {
    /// The connections `Database::sslmode` and `DB_SSLROOTCERT` ask for.
    pub fn from_config(config: &Config) -> Result<Self, StoreError> {
        Self::new(
            config.database.sslmode,
            config.database.sslrootcert.as_deref(),
        )
    }

    /// The connections `mode` asks for; for `verify-full`, trusting the AWS roots and those in
    /// the PEM file `extra_roots`. A file that cannot be read or holds no certificate fails.
    pub fn new(mode: DbSslMode, extra_roots: Option<&Path>) -> Result<Self, StoreError> {
        let verifier = match mode {
            DbSslMode::Disable => return Ok(Self { connector: None }),
            DbSslMode::Require => Verifier::AnyCertificate,
            DbSslMode::VerifyFull => Verifier::Roots(match extra_roots {
                Some(path) => extra_certificates(path)?,
                None => Vec::new(),
            }),
        };
        Ok(Self {
            connector: Some(LazyConnector(Arc::new(Lazy {
                verifier,
                made: OnceLock::new(),
            }))),
        })
    }

    /// tokio-postgres' `sslmode`: TLS or nothing when there is a connector (no fallback to the
    /// clear), never TLS without one.
    pub(super) fn ssl_mode(&self) -> SslMode {
        match self.connector {
            Some(_) => SslMode::Require,
            None => SslMode::Disable,
        }
    }

    pub(super) fn connector(&self) -> Option<&LazyConnector> {
        self.connector.as_ref()
    }
}

/// How a server's certificate is checked.
enum Verifier {
    /// `require`.
    AnyCertificate,
    /// `verify-full`: the AWS roots and these (`DB_SSLROOTCERT`'s).
    Roots(Vec<CertificateDer<'static>>),
}

/// tokio-postgres-rustls' connector, made on the first connection and shared by every clone.
#[derive(Clone)]
pub struct LazyConnector(Arc<Lazy>);

struct Lazy {
    verifier: Verifier,
    made: OnceLock<MakeRustlsConnect>,
}

impl LazyConnector {
    fn made(&self) -> &MakeRustlsConnect {
        self.0.made.get_or_init(|| {
            MakeRustlsConnect::new(client_config(&self.0.verifier).with_no_client_auth())
        })
    }

    /// Whether the rustls configuration has been made (a connection was attempted).
    #[cfg(test)]
    fn is_made(&self) -> bool {
        self.0.made.get().is_some()
    }
}

impl<S> MakeTlsConnect<S> for LazyConnector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = <MakeRustlsConnect as MakeTlsConnect<S>>::Stream;
    type TlsConnect = <MakeRustlsConnect as MakeTlsConnect<S>>::TlsConnect;
    type Error = Infallible;

    fn make_tls_connect(&mut self, hostname: &str) -> Result<Self::TlsConnect, Self::Error> {
        MakeTlsConnect::<S>::make_tls_connect(&mut self.made().clone(), hostname)
    }
}

/// rustls' client configuration for `verifier`, before the client's own certificate (none).
fn client_config(
    verifier: &Verifier,
) -> rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    // TLS 1.2 and 1.3, which aws-lc-rs' default provider always offers: rustls fails this
    // only for a provider without the versions' suites.
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(rustls::DEFAULT_VERSIONS)
        .unwrap_or_else(|_| unreachable!("aws-lc-rs' default provider has TLS 1.2 and 1.3"));
    match verifier {
        Verifier::AnyCertificate => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider))),
        Verifier::Roots(extra) => builder.with_root_certificates(trusted_roots(extra)),
    }
}

/// The compiled-in AWS roots and `extra` (`DB_SSLROOTCERT`'s).
fn trusted_roots(extra: &[CertificateDer<'static>]) -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for bundle in [RDS_BUNDLE, RDS_PROXY_ROOTS] {
        roots.add_parsable_certificates(certificates(bundle));
    }
    roots.add_parsable_certificates(extra.iter().cloned());
    roots
}

/// `DB_SSLROOTCERT`'s certificates: at least one that rustls can use as a root.
fn extra_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, StoreError> {
    let text = std::fs::read(path)
        .map_err(|e| StoreError::new(format!("DB_SSLROOTCERT: reading {}: {e}", path.display())))?;
    let found = certificates(&text);
    let (usable, _) = RootCertStore::empty().add_parsable_certificates(found.iter().cloned());
    if usable == 0 {
        return Err(StoreError::new(format!(
            "DB_SSLROOTCERT: {} holds no usable PEM certificate",
            path.display()
        )));
    }
    Ok(found)
}

/// The PEM certificates in `pem`; anything else in it is skipped.
pub fn certificates(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .collect()
}

/// `require`: any certificate is accepted (libpq's meaning), but the handshake's signatures
/// are still checked, so the session is at least encrypted to the holder of that certificate.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every AWS region with RDS in the bundle's source (data/README.md says which are not).
    const REGIONS: [&str; 27] = [
        "af-south-1",
        "ap-east-1",
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-northeast-3",
        "ap-south-1",
        "ap-south-2",
        "ap-southeast-1",
        "ap-southeast-2",
        "ap-southeast-3",
        "ap-southeast-4",
        "ca-central-1",
        "eu-central-1",
        "eu-central-2",
        "eu-north-1",
        "eu-south-1",
        "eu-south-2",
        "eu-west-1",
        "eu-west-2",
        "eu-west-3",
        "me-central-1",
        "me-south-1",
        "sa-east-1",
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
    ];

    /// The subjects (DER) of the trust anchors `pem` makes, all of which must parse.
    fn subjects(pem: &[u8], expected: usize) -> Vec<Vec<u8>> {
        let certificates = certificates(pem);
        assert_eq!(certificates.len(), expected);
        let mut roots = RootCertStore::empty();
        let (added, ignored) = roots.add_parsable_certificates(certificates);
        assert_eq!((added, ignored), (expected, 0));
        roots
            .roots
            .iter()
            .map(|anchor| anchor.subject.to_vec())
            .collect()
    }

    fn names(subjects: &[Vec<u8>], name: &str) -> bool {
        subjects
            .iter()
            .any(|subject| subject.windows(name.len()).any(|w| w == name.as_bytes()))
    }

    #[test]
    fn the_rds_bundle_has_every_regions_current_roots() {
        let subjects = subjects(RDS_BUNDLE, 115);
        for region in REGIONS {
            // rds-ca-rsa2048-g1 (the default), rds-ca-rsa4096-g1, rds-ca-ecc384-g1.
            for ca in ["RSA2048 G1", "RSA4096 G1", "ECC384 G1"] {
                let name = format!("Amazon RDS {region} Root CA {ca}");
                assert!(names(&subjects, &name), "{name} is missing");
            }
        }
    }

    #[test]
    fn the_proxy_roots_are_amazon_trust_services() {
        let subjects = subjects(RDS_PROXY_ROOTS, 5);
        for name in [
            "Amazon Root CA 1",
            "Amazon Root CA 2",
            "Amazon Root CA 3",
            "Amazon Root CA 4",
            "Starfield Services Root Certificate Authority - G2",
        ] {
            assert!(names(&subjects, name), "{name} is missing");
        }
    }

    #[test]
    fn an_extra_root_file_must_hold_a_certificate() {
        let dir = std::env::temp_dir().join(format!("osurender-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        for path in [empty.as_path(), &dir.join("missing.pem")] {
            let error = Tls::new(DbSslMode::VerifyFull, Some(path))
                .err()
                .expect("refused");
            assert!(error.message().starts_with("DB_SSLROOTCERT: "), "{error}");
        }
        let bundle = dir.join("bundle.pem");
        std::fs::write(&bundle, RDS_PROXY_ROOTS).unwrap();
        assert!(Tls::new(DbSslMode::VerifyFull, Some(&bundle)).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn each_mode_connects_as_it_says() {
        let plain = Tls::new(DbSslMode::Disable, None).unwrap();
        assert!(matches!(plain.ssl_mode(), SslMode::Disable));
        for mode in [DbSslMode::Require, DbSslMode::VerifyFull] {
            let tls = Tls::new(mode, None).unwrap();
            assert!(matches!(tls.ssl_mode(), SslMode::Require), "{mode:?}");
            let mut connector = tls.connector().unwrap().clone();
            assert!(
                !connector.is_made(),
                "{mode:?}: nothing made before a connection"
            );
            let made = MakeTlsConnect::<tokio::io::DuplexStream>::make_tls_connect(
                &mut connector,
                "proxy.example.com",
            );
            assert!(made.is_ok(), "{mode:?}");
            assert!(
                tls.connector().unwrap().is_made(),
                "{mode:?}: shared by clones"
            );
        }
    }

    #[test]
    fn verify_full_trusts_every_aws_root_and_the_extra_ones() {
        let extra = certificates(RDS_PROXY_ROOTS)[..1].to_vec();
        let roots = trusted_roots(&extra);
        // The proxy's first root is in both: a store keeps what it is given.
        assert_eq!(roots.len(), 115 + 5 + 1);
    }
}
