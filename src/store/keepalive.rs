//! TCP keepalive on the database connections.
//!
//! sqlx 0.9 opens its sockets itself and offers no keepalive setting. A connection whose server
//! vanished without a reset (a crashed host, a dropped route, a firewall that forgot the flow)
//! would otherwise only be found by the next statement's timeout, and an idle pooled or LISTEN
//! connection not at all. So after each new connection the store turns keepalive on for this
//! process's TCP sockets connected to the database server's port (Linux: the sockets are found
//! in `/proc/self/fd`); a socket that has it already is left alone. Failures are ignored: this
//! only shortens how long a dead connection goes unnoticed.

use std::os::fd::BorrowedFd;
use std::time::Duration;

/// Idle time before the first probe, the time between probes, and the probes before the
/// connection is declared dead: a silent peer is found within about a minute.
pub const IDLE: Duration = Duration::from_secs(30);
pub const INTERVAL: Duration = Duration::from_secs(10);
pub const PROBES: u32 = 3;

/// Turns keepalive on for every TCP socket of this process connected to `port` on the peer
/// side. Returns how many sockets it changed.
pub fn enable_for_peer_port(port: u16) -> usize {
    let params = socket2::TcpKeepalive::new()
        .with_time(IDLE)
        .with_interval(INTERVAL)
        .with_retries(PROBES);
    let mut changed = 0;
    for_each_socket_to(port, |_, socket| {
        if !socket.keepalive().unwrap_or(true) && socket.set_tcp_keepalive(&params).is_ok() {
            changed += 1;
        }
    });
    changed
}

/// Calls `each` with every TCP socket of this process connected to `port` on the peer side,
/// and its descriptor (Linux: the sockets are found in `/proc/self/fd`; elsewhere, none).
pub fn for_each_socket_to(port: u16, mut each: impl FnMut(i32, &socket2::SockRef<'_>)) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for entry in dir.flatten() {
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"));
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if !is_socket {
            continue;
        }
        // SAFETY: the descriptor is borrowed only for these calls; if it was closed (and its
        // number reused) since it was listed, the calls fail or act on another socket of this
        // process, which keepalive (or reading an option) does not harm.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = socket2::SockRef::from(&borrowed);
        let peer_port = socket
            .peer_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .map(|a| a.port());
        if peer_port == Some(port) {
            each(fd, &socket);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalive_is_set_on_sockets_to_the_port_only() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to_db = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let elsewhere = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
        assert!(enable_for_peer_port(port) >= 1);
        assert!(socket2::SockRef::from(&to_db).keepalive().unwrap());
        assert_eq!(
            socket2::SockRef::from(&to_db).tcp_keepalive_time().unwrap(),
            IDLE
        );
        assert!(!socket2::SockRef::from(&elsewhere).keepalive().unwrap());
        // Already on: left alone.
        assert_eq!(enable_for_peer_port(port), 0);
    }
}
