//! The audit trail: a hash-chained, append-only JSON Lines log of everything a run did.
//!
//! This module owns the event format, its canonical encoding and hash chain, durable appends
//! that survive `kill -9`, reading, tamper checking and the one-line-per-event rendering of
//! `git agent log`. Every event's data passes through a redaction function before it is
//! hashed or written, so no secret reaches the disk.
//!
//! It must not know what the events mean (runs, tools, models are the callers' business), must
//! not decide what is secret (the redactor is handed in), and never prints.

pub mod chain;
