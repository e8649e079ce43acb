//! TLS to PostgreSQL and MariaDB: throwaway servers with TLS on and a certificate authority
//! made by the test. Verification succeeds with the right CA and host name and fails clearly
//! with a wrong CA or a wrong host name.

use std::path::{Path, PathBuf};
use std::process::Command;

use sqlcron::store::Store;

use crate::mariadb_outage::ThrowawayMariadb;
use crate::outage::ThrowawayPostgres;

/// A CA and a server certificate for `localhost` only (no IP address), and a second CA that
/// signed nothing, written to `dir`: ca.pem, other-ca.pem, server.crt, server.key.
pub fn make_certs(dir: &Path) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl is required: apt-get install openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for ca in ["ca", "other-ca"] {
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN=sqlcron test {ca}"),
            "-keyout",
            &format!("{ca}.key"),
            "-out",
            &format!("{ca}.pem"),
        ]);
    }
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        "-out",
        "server.crt",
    ]);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        dir.join("server.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
}

/// `sqlcron doctor` on `url` warns that the server's certificate (`certs`/server.crt, valid for
/// two days) expires soon, naming its subject and the expiry `openssl` reads from the file.
fn doctor_warns_of_the_expiry(url: &str, certs: &Path) {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-enddate", "-dateopt", "iso_8601", "-in"])
        .arg(certs.join("server.crt"))
        .output()
        .unwrap();
    let end = String::from_utf8_lossy(&out.stdout).into_owned();
    // notAfter=2026-11-27 14:03:12Z
    let end = end.trim().trim_start_matches("notAfter=");
    assert!(end.len() >= 16, "openssl's expiry: {end:?}");
    let expected = format!("expiring on {}", &end[..16]);
    let config = certs.join("doctor.toml");
    std::fs::write(&config, crate::util::node_config(url, "tls-doctor", "")).unwrap();
    let out = crate::util::sqlcron(&["--config", config.to_str().unwrap(), "doctor"]);
    let text = crate::util::stdout(&out);
    let line = text
        .lines()
        .find(|l| l.contains("certificate"))
        .unwrap_or_else(|| panic!("no certificate line:\n{text}"));
    assert!(line.starts_with("WARN"), "{line}");
    assert!(line.contains("CN=localhost"), "{line}");
    assert!(line.contains(&expected), "{line}, expected {expected}");
    assert!(line.contains("renew the certificate"), "{line}");
    assert_ne!(out.status.code(), Some(0), "a warning:\n{text}");
}

/// Connects and reads the clock; the error text otherwise.
async fn try_connect(url: &str) -> Result<Store, String> {
    let store = Store::connect(&crate::util::db_url(url), 1).map_err(|e| e.to_string())?;
    match store.now().await {
        Ok(_) => Ok(store),
        Err(e) => Err(e.to_string()),
    }
}

/// The error of a connection that must fail.
async fn refused(url: &str, why: &str) -> String {
    match try_connect(url).await {
        Ok(_) => panic!("{why}: {url} connected"),
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tls_verifies_the_ca_and_the_host_name() {
    let mut certs = PathBuf::new();
    let pg = ThrowawayPostgres::start_with(|dir| {
        make_certs(dir);
        certs = dir.to_path_buf();
        vec![
            "ssl=on".into(),
            format!("ssl_cert_file={}", dir.join("server.crt").display()),
            format!("ssl_key_file={}", dir.join("server.key").display()),
        ]
    });
    let ca = certs.join("ca.pem");
    let other = certs.join("other-ca.pem");
    let url = |host: &str, q: &str| format!("postgres://postgres@{host}:{}/postgres?{q}", pg.port);

    let store = try_connect(&url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    ))
    .await
    .unwrap();
    let tls = store
        .scalar_i64(
            "SELECT CASE WHEN ssl THEN 1 ELSE 0 END FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        )
        .await
        .unwrap();
    assert_eq!(tls, Some(1), "the connection is encrypted");
    store.migrate().await.unwrap();
    store.close().await;
    doctor_warns_of_the_expiry(
        &url(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
        ),
        &certs,
    );
    // verify-ca checks the chain, not the name: 127.0.0.1 is fine.
    try_connect(&url(
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={}", ca.display()),
    ))
    .await
    .unwrap()
    .close()
    .await;
    try_connect(&url("127.0.0.1", "sslmode=require"))
        .await
        .unwrap()
        .close()
        .await;

    let e = refused(
        &url(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={}", other.display()),
        ),
        "a wrong CA must fail",
    )
    .await;
    eprintln!("wrong CA: {e}");
    assert!(e.contains("invalid peer certificate: UnknownIssuer"), "{e}");
    let e = refused(
        &url(
            "127.0.0.1",
            &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
        ),
        "a wrong host name must fail",
    )
    .await;
    eprintln!("wrong host name: {e}");
    assert!(
        e.contains("certificate not valid for name \"127.0.0.1\""),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_tls_verifies_the_ca_and_the_host_name() {
    let mut certs = PathBuf::new();
    let my = ThrowawayMariadb::start_with(|dir| {
        make_certs(dir);
        certs = dir.to_path_buf();
        vec![
            format!("--ssl-ca={}", dir.join("ca.pem").display()),
            format!("--ssl-cert={}", dir.join("server.crt").display()),
            format!("--ssl-key={}", dir.join("server.key").display()),
        ]
    });
    let ca = certs.join("ca.pem");
    let other = certs.join("other-ca.pem");
    let url = |host: &str, q: &str| format!("mysql://root@{host}:{}/mysql?{q}", my.port);

    let store = try_connect(&url(
        "localhost",
        &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", ca.display()),
    ))
    .await
    .unwrap();
    let cipher: Option<String> = store
        .scalar("SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'Ssl_cipher'")
        .await
        .unwrap();
    assert!(
        cipher.is_some_and(|c| !c.is_empty()),
        "the connection is encrypted"
    );
    store
        .execute_raw("CREATE DATABASE sqlcron_doctor")
        .await
        .unwrap();
    store.close().await;
    let doctor_url = format!(
        "mysql://root@localhost:{}/sqlcron_doctor?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        my.port,
        ca.display()
    );
    let store = try_connect(&doctor_url).await.unwrap();
    store.migrate().await.unwrap();
    store.close().await;
    doctor_warns_of_the_expiry(&doctor_url, &certs);
    try_connect(&url(
        "127.0.0.1",
        &format!("ssl-mode=VERIFY_CA&ssl-ca={}", ca.display()),
    ))
    .await
    .unwrap()
    .close()
    .await;
    try_connect(&url("127.0.0.1", "ssl-mode=REQUIRED"))
        .await
        .unwrap()
        .close()
        .await;

    let e = refused(
        &url(
            "localhost",
            &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", other.display()),
        ),
        "a wrong CA must fail",
    )
    .await;
    eprintln!("wrong CA: {e}");
    assert!(e.contains("invalid peer certificate: UnknownIssuer"), "{e}");
    let e = refused(
        &url(
            "127.0.0.1",
            &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", ca.display()),
        ),
        "a wrong host name must fail",
    )
    .await;
    eprintln!("wrong host name: {e}");
    assert!(
        e.contains("certificate not valid for name \"127.0.0.1\""),
        "{e}"
    );
}
