//! The database server's TLS certificate, read for `sqlcron doctor`: a connection of its own
//! that asks the server for TLS the way the driver does (PostgreSQL's `SSLRequest`, MySQL's
//! SSL request packet), completes the handshake, reads the certificate and its expiry, and
//! closes. It sends no user name or password and runs no statement.
//!
//! The probe does not judge the certificate (the connections of the store do that, as the URL's
//! `sslmode`/`ssl-mode` says): it reports what the server presents, so that an operator sees the
//! expiry before the day the daemon's connections start failing.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use x509_cert::der::Decode;

use crate::model::database_url::Dialect;

/// What the server presented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerTls {
    /// The server does not offer TLS.
    NotOffered,
    /// The server's own certificate (the first of the chain it sent).
    Certificate {
        subject: String,
        not_after: DateTime<Utc>,
    },
}

/// Connects to `host:port` and reads the server's certificate, within `timeout` for each step.
/// Errors name the step that failed.
pub fn server_certificate(
    dialect: Dialect,
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<ServerTls, String> {
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}:{port}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}:{port}: no address"))?;
    let mut tcp =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("{host}:{port}: {e}"))?;
    tcp.set_read_timeout(Some(timeout)).ok();
    tcp.set_write_timeout(Some(timeout)).ok();
    let offered = match dialect {
        Dialect::Postgres => postgres_ssl_request(&mut tcp),
        Dialect::Mysql => mysql_ssl_request(&mut tcp),
        Dialect::Sqlite => return Err("SQLite has no server".into()),
    }
    .map_err(|e| format!("{host}:{port}: asking for TLS: {e}"))?;
    if !offered {
        return Ok(ServerTls::NotOffered);
    }
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host}: not a host name: {e}"))?;
    let mut tls = rustls::ClientConnection::new(reading_config(), name)
        .map_err(|e| format!("{host}:{port}: {e}"))?;
    while tls.is_handshaking() {
        tls.complete_io(&mut tcp)
            .map_err(|e| format!("{host}:{port}: TLS handshake: {e}"))?;
    }
    let der = tls
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or_else(|| format!("{host}:{port}: the server sent no certificate"))?
        .clone();
    tls.send_close_notify();
    let _ = tls.complete_io(&mut tcp);
    parse(&der).map_err(|e| format!("{host}:{port}: the server's certificate: {e}"))
}

/// The subject and expiry of a DER certificate.
fn parse(der: &[u8]) -> Result<ServerTls, String> {
    let cert = x509_cert::Certificate::from_der(der).map_err(|e| e.to_string())?;
    let tbs = &cert.tbs_certificate;
    let secs = tbs.validity.not_after.to_unix_duration().as_secs();
    let not_after = i64::try_from(secs)
        .ok()
        .and_then(|s| DateTime::from_timestamp(s, 0))
        .ok_or("an expiry beyond any date")?;
    Ok(ServerTls::Certificate {
        subject: tbs.subject.to_string(),
        not_after,
    })
}

/// PostgreSQL: the 8-byte `SSLRequest`; the server answers `S` (TLS follows) or `N`.
fn postgres_ssl_request(tcp: &mut TcpStream) -> std::io::Result<bool> {
    const SSL_REQUEST: u32 = 80_877_103;
    let mut msg = 8u32.to_be_bytes().to_vec();
    msg.extend_from_slice(&SSL_REQUEST.to_be_bytes());
    tcp.write_all(&msg)?;
    let mut answer = [0u8; 1];
    tcp.read_exact(&mut answer)?;
    match answer[0] {
        b'S' => Ok(true),
        b'N' => Ok(false),
        other => Err(std::io::Error::other(format!(
            "unexpected answer {other:#04x} (is this a PostgreSQL server?)"
        ))),
    }
}

/// MySQL/MariaDB: read the server's greeting; if it offers TLS (`CLIENT_SSL`), send the SSL
/// request packet that switches the connection to TLS.
fn mysql_ssl_request(tcp: &mut TcpStream) -> std::io::Result<bool> {
    const CLIENT_LONG_PASSWORD: u32 = 0x1;
    const CLIENT_PROTOCOL_41: u32 = 0x200;
    const CLIENT_SSL: u32 = 0x800;
    const CLIENT_SECURE_CONNECTION: u32 = 0x8000;
    let mut header = [0u8; 4];
    tcp.read_exact(&mut header)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
    if len > 64 * 1024 {
        return Err(std::io::Error::other(
            "a greeting too long for a MySQL server",
        ));
    }
    let mut greeting = vec![0u8; len];
    tcp.read_exact(&mut greeting)?;
    let unexpected = || std::io::Error::other("not a MySQL greeting (is this a MySQL server?)");
    if greeting.first() == Some(&0xff) {
        let text = String::from_utf8_lossy(greeting.get(3..).unwrap_or_default()).into_owned();
        return Err(std::io::Error::other(format!("the server refused: {text}")));
    }
    if greeting.first() != Some(&10) {
        return Err(unexpected());
    }
    // Protocol version, server version (NUL-terminated), thread id (4), scramble (8), filler
    // (1), then the lower two bytes of the capability flags.
    let version_end = greeting[1..]
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(unexpected)?
        + 1;
    let caps_at = version_end + 1 + 4 + 8 + 1;
    let caps = greeting
        .get(caps_at..caps_at + 2)
        .map(|b| u32::from(u16::from_le_bytes([b[0], b[1]])))
        .ok_or_else(unexpected)?;
    if caps & CLIENT_SSL == 0 {
        return Ok(false);
    }
    let flags = CLIENT_LONG_PASSWORD | CLIENT_PROTOCOL_41 | CLIENT_SSL | CLIENT_SECURE_CONNECTION;
    let mut payload = Vec::with_capacity(32);
    payload.extend_from_slice(&flags.to_le_bytes());
    payload.extend_from_slice(&(16u32 << 20).to_le_bytes());
    payload.push(0x21); // utf8_general_ci
    payload.extend_from_slice(&[0u8; 23]);
    let mut packet = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    packet.push(header[3].wrapping_add(1));
    packet.extend_from_slice(&payload);
    tcp.write_all(&packet)?;
    Ok(true)
}

/// A client configuration that accepts whatever certificate the server sends (it is read, not
/// trusted) and checks the handshake's signatures as usual.
fn reading_config() -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ReadOnly(provider)))
        .with_no_client_auth();
    Arc::new(config)
}

/// Reads the certificate, judges nothing: see the module's text.
#[derive(Debug)]
struct ReadOnly(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for ReadOnly {
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
        rustls::crypto::verify_tls12_signature(
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
        rustls::crypto::verify_tls13_signature(
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

    #[test]
    fn garbage_is_not_a_certificate() {
        assert!(parse(b"not a certificate").is_err());
        assert!(parse(&[]).is_err());
    }
}
