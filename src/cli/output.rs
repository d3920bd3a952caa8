//! The terminal, redacted: every byte the CLI writes to stdout or stderr — results, `--json`,
//! progress lines, errors and log lines — goes through a [`Redactor`] here.
//!
//! This is the only file allowed to name `std::io::stdout`/`std::io::stderr` (clippy's
//! `disallowed_methods` in `clippy.toml`, and `print_stdout`/`print_stderr` are denied in
//! `cli/`), so a new command cannot print a secret by forgetting to redact.

#![allow(clippy::disallowed_methods)]

use std::io::{self, Write};
use std::sync::Arc;

use crate::audit::redact::Redactor;

/// The redactor of this process's environment: every well-known secret variable and every
/// variable whose name says it holds a secret.
pub(crate) fn process_redactor() -> anyhow::Result<Arc<Redactor>> {
    Ok(Arc::new(Redactor::from_process_env(&[])?))
}

/// A writer that masks secrets line by line: complete lines are redacted and written as
/// they come, a partial last line when flushed or dropped. Whole lines are the unit so a
/// secret written in two `write` calls (a `format!` argument after another) is still seen
/// whole.
pub(crate) struct Redacting<W: Write> {
    redactor: Arc<Redactor>,
    inner: W,
    pending: Vec<u8>,
}

impl<W: Write> Redacting<W> {
    /// Wrap `inner`.
    pub(crate) fn new(redactor: Arc<Redactor>, inner: W) -> Self {
        Self {
            redactor,
            inner,
            pending: Vec::new(),
        }
    }

    fn emit(&mut self, upto: usize) -> io::Result<()> {
        let chunk: Vec<u8> = self.pending.drain(..upto).collect();
        self.inner.write_all(&self.redactor.redact_bytes(&chunk))
    }
}

impl<W: Write> Write for Redacting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        if let Some(last) = self.pending.iter().rposition(|b| *b == b'\n') {
            self.emit(last + 1)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let n = self.pending.len();
        if n > 0 {
            self.emit(n)?;
        }
        self.inner.flush()
    }
}

impl<W: Write> Drop for Redacting<W> {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// Standard output, redacted.
pub(crate) fn stdout(redactor: &Arc<Redactor>) -> Redacting<io::StdoutLock<'static>> {
    Redacting::new(redactor.clone(), io::stdout().lock())
}

/// Standard error, redacted.
pub(crate) fn stderr(redactor: &Arc<Redactor>) -> Redacting<io::StderrLock<'static>> {
    Redacting::new(redactor.clone(), io::stderr().lock())
}

/// One line on standard output, redacted.
pub(crate) fn say(line: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    writeln!(stdout(&process_redactor()?), "{line}")?;
    Ok(())
}

/// One line on standard error, redacted.
pub(crate) fn warn(line: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    writeln!(stderr(&process_redactor()?), "{line}")?;
    Ok(())
}

/// Whether standard error is a terminal (for the live progress line).
pub(crate) fn stderr_is_terminal() -> bool {
    use std::io::IsTerminal as _;
    io::stderr().is_terminal()
}

/// Log lines for `tracing_subscriber`, redacted: each event is formatted whole and then
/// written once, so one event is one redaction.
#[derive(Clone)]
pub(crate) struct LogWriter {
    redactor: Arc<Redactor>,
}

impl LogWriter {
    /// Logs to standard error through `redactor`.
    pub(crate) fn new(redactor: Arc<Redactor>) -> Self {
        Self { redactor }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = Redacting<io::StderrLock<'static>>;

    fn make_writer(&'a self) -> Self::Writer {
        stderr(&self.redactor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "ghs_OutputCanaryOutputCanaryOutput0123";

    #[test]
    fn a_secret_written_in_pieces_is_masked_whole() {
        let r = Arc::new(Redactor::new([CANARY]).unwrap());
        let mut out = Redacting::new(r, Vec::new());
        // `write!` hands each argument over in its own call.
        write!(out, "run echo {}", &CANARY[..10]).unwrap();
        write!(out, "{} sk-", &CANARY[10..]).unwrap();
        writeln!(out, "done").unwrap();
        write!(out, "tail {CANARY}").unwrap();
        out.flush().unwrap();
        let text = String::from_utf8(out.inner.clone()).unwrap();
        assert_eq!(text, "run echo *** sk-done\ntail ***");
    }
}
