//! The audit trail: a hash-chained, append-only JSON Lines log of everything a run did, and
//! the secret hygiene of everything that leaves the process.
//!
//! [`chain`] owns the event format, its canonical encoding and hash chain, durable appends
//! that survive `kill -9`, reading, tamper checking and the one-line-per-event rendering of
//! `git agent log`. Every event's data passes through a redaction function before it is
//! hashed or written, so no secret reaches the disk.
//!
//! [`redact`] masks known secret values (and their base64, URL and JSON encodings) and
//! well-known token patterns in every string that leaves the process — audit events,
//! transcripts, PR body, comments, logs — and scans a diff's added lines to block a push.
//! [`Redacted`] is text a redactor made: the run's outputs take only that type, so a new
//! output cannot forget to redact.
//!
//! This module must not know what the events mean (runs, tools, models are the callers'
//! business), must not read files other than its own log, talk to the network or decide
//! policy, and never prints. It never stores a secret anywhere but in memory.

pub mod chain;
pub mod redact;
mod redacted;

pub use redacted::Redacted;
