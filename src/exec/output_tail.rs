//! The last bytes of a run's output, as the run writes them. The runner feeds it; the daemon
//! may read it while the run runs (a copy, under a short lock) to store what a long run has
//! printed so far, so that the dashboard can follow it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// The last `cap` bytes of a run's output, and how many bytes it was given in all.
#[derive(Debug)]
pub struct OutputTail {
    cap: usize,
    bytes: VecDeque<u8>,
    pushed: u64,
}

/// A tail shared by the runner (writing) and the daemon (reading while the run runs).
pub type SharedTail = Arc<Mutex<OutputTail>>;

impl OutputTail {
    pub fn new(cap: usize) -> OutputTail {
        OutputTail {
            cap,
            bytes: VecDeque::new(),
            pushed: 0,
        }
    }

    pub fn shared(cap: usize) -> SharedTail {
        Arc::new(Mutex::new(OutputTail::new(cap)))
    }

    pub fn push(&mut self, data: &[u8]) {
        self.pushed += data.len() as u64;
        if self.cap == 0 {
            return;
        }
        let data = if data.len() > self.cap {
            &data[data.len() - self.cap..]
        } else {
            data
        };
        let overflow = (self.bytes.len() + data.len()).saturating_sub(self.cap);
        self.bytes.drain(..overflow);
        self.bytes.extend(data);
    }

    /// Bytes given in all (kept or not): a reader compares it with what it stored last.
    pub fn pushed(&self) -> u64 {
        self.pushed
    }

    /// What is kept, as text (invalid UTF-8 as U+FFFD).
    pub fn text(&self) -> String {
        let bytes: Vec<u8> = self.bytes.iter().copied().collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_bytes_and_counts_them_all() {
        let mut t = OutputTail::new(4);
        t.push(b"ab");
        t.push(b"cdef");
        assert_eq!((t.text().as_str(), t.pushed()), ("cdef", 6));
        t.push(b"0123456789");
        assert_eq!((t.text().as_str(), t.pushed()), ("6789", 16));
        let mut none = OutputTail::new(0);
        none.push(b"xyz");
        assert_eq!((none.text().as_str(), none.pushed()), ("", 3));
    }
}
