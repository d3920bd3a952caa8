//! The audit trail's secret hygiene: every string that leaves the process (audit events,
//! transcripts, PR body, comments, logs) passes [`redact::Redactor`] first.
//!
//! This module owns redaction of known secret values and well-known token patterns, and the
//! scan of a diff's added lines that blocks a push. It must not read files, talk to the
//! network or decide policy; it never stores a secret anywhere but in memory.

pub mod redact;
