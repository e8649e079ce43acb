//! A fault-injection proxy between a daemon and its database: a TCP relay on 127.0.0.1 that can
//! stall all traffic (connections stay open, nothing moves), reset every connection, refuse new
//! connections (those open go on), and lose the
//! reply of a given statement (the statement runs and commits on the server; its reply never
//! reaches the client, whose connection is reset instead).
//!
//! The last one knows just enough of the protocols: PostgreSQL (extended query) and MySQL
//! (prepared statements) both send a statement's text once per connection when preparing it,
//! then execute it in a second exchange. The proxy arms on the text, then drops the connection
//! when the server answers the execution. A statement already prepared on a connection is not
//! recognised again: tests start fresh daemons.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, watch};

/// Shared switches of one proxy.
struct Switches {
    upstream: String,
    /// While true, no byte moves in either direction.
    stalled: watch::Sender<bool>,
    /// Bumped to reset every open connection.
    resets: watch::Sender<u64>,
    /// While true, a new connection is closed as soon as it is accepted.
    refusing: std::sync::atomic::AtomicBool,
    /// Statement text whose next execution's reply is lost (once); with `true`, the reply to the
    /// packet carrying the text itself (a simple query such as `COMMIT`, sent and run at once).
    lose_reply_of: Mutex<Option<(Vec<u8>, bool)>>,
    /// Replies lost so far.
    lost: AtomicU64,
}

/// A running proxy; it stops when dropped.
pub struct Proxy {
    pub port: u16,
    switches: Arc<Switches>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.switches.resets.send_modify(|n| *n += 1);
    }
}

impl Proxy {
    /// Starts relaying 127.0.0.1:<port> to `upstream` (`host:port`), on a port below the
    /// ephemeral range: a daemon reconnecting to a dropped proxy's port must not meet an outgoing
    /// connection that took it as its source port (or connect to itself) before the proxy is back.
    pub async fn start(upstream: &str) -> Proxy {
        Self::start_on(crate::util::free_port(), upstream).await
    }

    /// The same on a given port (0: any free one), e.g. the port of a proxy dropped earlier.
    pub async fn start_on(port: u16, upstream: &str) -> Proxy {
        // A dropped proxy's listener closes when its task is cancelled, a moment after.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", port)).await {
                Ok(l) => break l,
                Err(e) if std::time::Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(e) => panic!("proxy cannot listen on port {port}: {e}"),
            }
        };
        let port = listener.local_addr().unwrap().port();
        let switches = Arc::new(Switches {
            upstream: upstream.to_string(),
            stalled: watch::channel(false).0,
            resets: watch::channel(0).0,
            refusing: false.into(),
            lose_reply_of: Mutex::new(None),
            lost: AtomicU64::new(0),
        });
        let s = switches.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if s.refusing.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                tokio::spawn(relay(client, s.clone()));
            }
        });
        Proxy {
            port,
            switches,
            task,
        }
    }

    /// Stops all traffic (or lets it flow again).
    pub fn stall(&self, on: bool) {
        let _ = self.switches.stalled.send(on);
    }

    /// Closes each new connection as soon as it comes (or takes them again); the connections
    /// already open go on.
    pub fn refuse(&self, on: bool) {
        self.switches.refusing.store(on, Ordering::SeqCst);
    }

    /// Resets every open connection now.
    pub fn reset(&self) {
        self.switches.resets.send_modify(|n| *n += 1);
    }

    /// Loses the reply of the next execution of a statement containing `text`.
    pub async fn lose_reply_of(&self, text: &str) {
        *self.switches.lose_reply_of.lock().await = Some((text.as_bytes().to_vec(), false));
    }

    /// Loses the reply to the next simple query containing `text` (such as `COMMIT`): the
    /// server runs it, the client's connection is reset instead of answered.
    pub async fn lose_reply_to(&self, text: &str) {
        *self.switches.lose_reply_of.lock().await = Some((text.as_bytes().to_vec(), true));
    }

    /// How many replies were lost so far.
    pub fn replies_lost(&self) -> u64 {
        self.switches.lost.load(Ordering::SeqCst)
    }
}

/// Where one connection is in losing a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arming {
    Off,
    /// The statement's text went by: its execution comes next.
    Prepared,
    /// The execution went by: the next reply is lost.
    Executed,
}

async fn wait_unstalled(stalled: &mut watch::Receiver<bool>) {
    while *stalled.borrow_and_update() {
        if stalled.changed().await.is_err() {
            return;
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

async fn relay(client: TcpStream, s: Arc<Switches>) {
    let Ok(server) = TcpStream::connect(&s.upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let _ = client.set_zero_linger();
    let _ = server.set_zero_linger();
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let arming = Arc::new(std::sync::Mutex::new(Arming::Off));
    let mut resets = s.resets.subscribe();
    resets.borrow_and_update();
    let up = {
        let s = s.clone();
        let arming = arming.clone();
        let mut stalled = s.stalled.subscribe();
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                wait_unstalled(&mut stalled).await;
                let n = match cr.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                wait_unstalled(&mut stalled).await;
                {
                    let mut target = s.lose_reply_of.lock().await;
                    let mut a = arming.lock().unwrap();
                    match *a {
                        Arming::Off => {
                            if let Some((t, simple)) = target.as_ref()
                                && contains(&buf[..n], t)
                            {
                                *a = if *simple {
                                    Arming::Executed
                                } else {
                                    Arming::Prepared
                                };
                                *target = None;
                            }
                        }
                        Arming::Prepared => *a = Arming::Executed,
                        Arming::Executed => {}
                    }
                }
                if sw.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    };
    let down = {
        let s = s.clone();
        let arming = arming.clone();
        let mut stalled = s.stalled.subscribe();
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                wait_unstalled(&mut stalled).await;
                let n = match sr.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                wait_unstalled(&mut stalled).await;
                if *arming.lock().unwrap() == Arming::Executed {
                    // The statement ran and committed; its reply is lost with the connection.
                    s.lost.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                if cw.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = resets.changed() => {}
    }
    // Dropping both halves of both sockets resets them (linger 0).
}
