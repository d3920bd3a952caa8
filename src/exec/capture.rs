//! Bounded capture of a stream: the first and last bytes are kept, the middle is counted.

use std::collections::VecDeque;

use serde::Serialize;

/// A capped copy of one output stream. Memory stays within the cap however much flows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Captured {
    /// The first bytes (up to half the cap).
    #[serde(serialize_with = "lossy")]
    pub head: Vec<u8>,
    /// The last bytes (up to half the cap), empty when nothing was dropped and all fit in head.
    #[serde(serialize_with = "lossy")]
    pub tail: Vec<u8>,
    /// Bytes between head and tail that were dropped.
    pub dropped: u64,
    /// Bytes the stream carried in all.
    pub total: u64,
}

fn lossy<S: serde::Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(b))
}

impl Captured {
    /// Head and tail as text (invalid UTF-8 replaced), with a marker where bytes were dropped.
    pub fn to_text_lossy(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            s.push_str(&format!("\n[… {} bytes dropped …]\n", self.dropped));
        }
        s.push_str(&String::from_utf8_lossy(&self.tail));
        s
    }

    /// Whether bytes were dropped.
    pub fn truncated(&self) -> bool {
        self.dropped > 0
    }
}

/// Accumulates a stream into a [`Captured`] within `cap` bytes.
#[derive(Debug)]
pub(crate) struct Capture {
    head: Vec<u8>,
    head_cap: usize,
    tail: VecDeque<u8>,
    tail_cap: usize,
    dropped: u64,
    total: u64,
}

impl Capture {
    pub(crate) fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        let tail_cap = cap - head_cap;
        Self {
            head: Vec::new(),
            head_cap,
            tail: VecDeque::new(),
            tail_cap,
            dropped: 0,
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, mut chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if self.head.len() < self.head_cap {
            let n = chunk.len().min(self.head_cap - self.head.len());
            self.head.extend_from_slice(&chunk[..n]);
            chunk = &chunk[n..];
        }
        if chunk.is_empty() {
            return;
        }
        if chunk.len() >= self.tail_cap {
            self.dropped += (self.tail.len() + chunk.len() - self.tail_cap) as u64;
            self.tail.clear();
            self.tail.extend(&chunk[chunk.len() - self.tail_cap..]);
            return;
        }
        let over = (self.tail.len() + chunk.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..over);
        self.dropped += over as u64;
        self.tail.extend(chunk);
    }

    /// Bytes held now (head and tail), never more than the cap.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    pub(crate) fn finish(self) -> Captured {
        Captured {
            head: self.head,
            tail: self.tail.into_iter().collect(),
            dropped: self.dropped,
            total: self.total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let mut c = Capture::new(100);
        c.push(b"hello ");
        c.push(b"world");
        let out = c.finish();
        assert_eq!(out.to_text_lossy(), "hello world");
        assert_eq!((out.dropped, out.total), (0, 11));
    }

    #[test]
    fn large_output_keeps_head_and_tail_and_counts_the_rest() {
        let mut c = Capture::new(10);
        let data: Vec<u8> = (0u8..=255).cycle().take(10_000).collect();
        for chunk in data.chunks(7) {
            c.push(chunk);
            assert!(c.held() <= 10);
        }
        let out = c.finish();
        assert_eq!(out.head, data[..5]);
        assert_eq!(out.tail, data[data.len() - 5..]);
        assert_eq!(out.dropped, 10_000 - 10);
        assert_eq!(out.total, 10_000);
        // One chunk bigger than the tail at once.
        let mut c = Capture::new(10);
        c.push(&data[..3]);
        c.push(&data[..1000]);
        let out = c.finish();
        assert_eq!(out.head, [0, 1, 2, 0, 1]);
        assert_eq!(out.tail, data[995..1000]);
        assert_eq!(out.dropped, 1003 - 10);
    }

    #[test]
    fn binary_output_survives_and_renders_lossily() {
        let mut c = Capture::new(64);
        c.push(&[0xff, 0xfe, b'a', 0]);
        let out = c.finish();
        assert_eq!(out.head, vec![0xff, 0xfe, b'a', 0]);
        assert_eq!(out.to_text_lossy(), "\u{fffd}\u{fffd}a\0");
    }
}
