//! A MariaDB server that goes away and comes back: a throwaway instance of the test's own
//! (mariadb-install-db in a temporary directory, on a free port), never the shared one.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::outage::daemon_survives_restart;
use crate::util::free_port;

/// A MariaDB server listening on 127.0.0.1 only, with its data in a temporary directory.
pub struct ThrowawayMariadb {
    dir: tempfile::TempDir,
    pub port: u16,
    server: Option<Child>,
    /// More server options (`--ssl-cert=...` in the TLS tests).
    pub options: Vec<String>,
}

fn tool(name: &str) -> PathBuf {
    ["/usr/bin", "/usr/sbin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} is required: apt-get install mariadb-server"))
}

impl ThrowawayMariadb {
    pub fn start() -> ThrowawayMariadb {
        Self::start_with(|_| vec![])
    }

    /// Starts a server with the options `options(dir)` returns; `dir` is the server's own
    /// directory, where its files may be put first.
    pub fn start_with(options: impl FnOnce(&Path) -> Vec<String>) -> ThrowawayMariadb {
        let dir = tempfile::Builder::new()
            .prefix("sqlcron-my")
            .tempdir()
            .unwrap();
        let options = options(dir.path());
        let data = dir.path().join("data");
        // Its own folder for temporary tables too: in the shared /tmp, a bootstrap once failed
        // on a temporary table's file it could not remove (`#sql-temptable-PID-...`), with
        // several servers starting at once.
        std::fs::create_dir(dir.path().join("tmp")).unwrap();
        let out = Command::new(tool("mariadb-install-db"))
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", dir.path().join("tmp").display()))
            .args([
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--user=root",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mariadb-install-db: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut db = ThrowawayMariadb {
            dir,
            port: free_port(),
            server: None,
            options,
        };
        db.up();
        db
    }

    pub fn up(&mut self) {
        let data = self.dir.path().join("data");
        let child = Command::new(tool("mariadbd"))
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!(
                "--socket={}",
                self.dir.path().join("sock").display()
            ))
            .arg(format!(
                "--pid-file={}",
                self.dir.path().join("pid").display()
            ))
            .arg(format!("--port={}", self.port))
            .arg(format!(
                "--tmpdir={}",
                self.dir.path().join("tmp").display()
            ))
            .args(["--bind-address=127.0.0.1", "--user=root", "--skip-log-bin"])
            .args(&self.options)
            .arg(format!(
                "--log-error={}",
                self.dir.path().join("err.log").display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.server = Some(child);
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "throwaway MariaDB did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn down(&mut self) {
        if let Some(mut child) = self.server.take() {
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            child.wait().unwrap();
        }
    }

    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/mysql", self.port)
    }
}

impl Drop for ThrowawayMariadb {
    fn drop(&mut self) {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_restart_daemon_keeps_running_reports_and_resumes() {
    let mut db = ThrowawayMariadb::start();
    // A database of our own on the throwaway server.
    let admin = sqlcron::store::Store::connect(&crate::util::db_url(&db.url()), 1).unwrap();
    admin.execute_raw("CREATE DATABASE sqlcron").await.unwrap();
    admin.close().await;
    let url = db.url().replace("/mysql", "/sqlcron");
    daemon_survives_restart(
        &url,
        Duration::from_secs(15),
        Duration::from_secs(30),
        |up| if up { db.up() } else { db.down() },
    )
    .await;
}
