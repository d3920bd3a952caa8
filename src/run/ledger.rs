//! What a run writes down: the record, the audit chain, the conversation and the transcript,
//! and the state machine's transitions, each written before the run acts on it.
//!
//! Two strengths of write: [`Ledger::save`] inside a step (atomic, safe against `kill -9`, no
//! fsync) and [`Ledger::persist`] at a transition or checkpoint (the audit synced, the record
//! and conversation fsynced, the run directory mirrored to `refs/agent/runs/<id>`). The
//! conversation file is append-only: a save writes what the turn added, redacted once. When
//! the run stops (ended or paused) the ledger renders the report (`pr.md`) from the record
//! and the audit trail.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use super::record::Outcome;
use super::services::{RunEvent, Services};

/// How the report's note on files left uncommitted begins.
pub(super) const NOT_COMMITTED: &str = "Not committed (unverified): ";
/// How a note on a paused run begins (`Waiting for approval to run …`, `… : the plan …`).
pub(super) const WAITING: &str = "Waiting for approval";

/// Whether a note describes the run as it stood when it paused (waiting for a person, files
/// not committed): true then, stale once the run goes on.
pub(super) fn describes_a_pause(note: &str) -> bool {
    note.starts_with(WAITING) || note.starts_with(NOT_COMMITTED)
}
use super::error::{Error, Result};
use super::record::{PrRef, RunRecord, files};
use super::report::{self, CostLine};
use super::state::{RunState, write_atomic};
use crate::audit::Redacted;
use crate::audit::chain::{self, Appender, Head, Kind};
use crate::audit::redact::Redactor;
use crate::model::{Message, Router};
use crate::tools::{EventSink, ToolEvent};
use crate::workspace::Worktree;

/// The conversation so far, and how much of it is already in its file.
#[derive(Debug)]
pub(super) struct Conversation {
    path: PathBuf,
    messages: Vec<Message>,
    /// How many of `messages` are in the file (it is append-only).
    written: usize,
}

impl Conversation {
    /// Read the conversation file: one message per line. A torn last line (a crash
    /// mid-write) is cut off, so the next append starts on a clean line.
    pub(super) fn open(path: PathBuf, redactor: &Redactor) -> Result<Self> {
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(Error::io("cannot read", &path, e)),
        };
        let mut messages = Vec::new();
        let mut good = 0;
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            if !line.ends_with(b"\n") {
                break;
            }
            match serde_json::from_slice::<Message>(line) {
                Ok(m) => {
                    messages.push(m);
                    good += line.len();
                }
                Err(_) => break,
            }
        }
        if good < bytes.len() {
            tracing::warn!(path = %path.display(), "the conversation ends in a torn line; cutting it off");
            // What is kept was written redacted; it goes through the redactor again all the
            // same, since the writer takes nothing else.
            let kept = redactor.clean(&String::from_utf8_lossy(&bytes[..good]));
            write_atomic(&path, &kept).map_err(|e| Error::io("cannot rewrite", &path, e))?;
        }
        let written = messages.len();
        Ok(Self {
            path,
            messages,
            written,
        })
    }

    /// The messages, oldest first.
    pub(super) fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Add a message (written at the next save).
    pub(super) fn push(&mut self, m: Message) {
        self.messages.push(m);
    }

    /// Append the messages not yet written, each redacted once; `durable` adds an fsync
    /// (and touches the file even when nothing is new, so it exists once a run persisted).
    fn flush(&mut self, redactor: &Redactor, durable: bool) -> Result<()> {
        if self.written == self.messages.len() && !durable {
            return Ok(());
        }
        let mut text = Redacted::default();
        for m in &self.messages[self.written..] {
            let line = redactor
                .clean_json(m, false)
                .map_err(|e| Error::Invalid(format!("cannot encode a message: {e}")))?;
            text.push(&line);
            text.push_static("\n");
        }
        append_bytes(&self.path, &text, durable)?;
        self.written = self.messages.len();
        Ok(())
    }
}

/// The audit sink handed to tools: their events become audit events.
struct AuditSink {
    audit: Arc<Appender>,
}

impl EventSink for AuditSink {
    fn record(&self, event: ToolEvent) {
        let kind = match &event {
            ToolEvent::Policy(_) | ToolEvent::PlanGate { .. } => Kind::Policy,
            ToolEvent::PlanUpdated(_) | ToolEvent::FileChanged(_) => Kind::ToolResult,
        };
        let data = serde_json::to_value(&event)
            .unwrap_or_else(|e| json!({"unserializable": e.to_string()}));
        if let Err(e) = self.audit.append(kind, data) {
            tracing::error!(error = %e, "cannot append a tool event to the audit log");
        }
    }
}

/// A run's record and everything written beside it in its run directory.
pub(super) struct Ledger<'a> {
    /// The front door's services.
    pub(super) svc: &'a Services,
    /// The record, as the run knows it (saved by [`save`](Self::save)).
    pub(super) rec: RunRecord,
    /// The run directory.
    pub(super) dir: PathBuf,
    audit: Arc<Appender>,
    conversation: Conversation,
    started: std::time::Instant,
}

impl<'a> Ledger<'a> {
    /// Open the run directory `dir` for `rec`: continue its audit chain (a torn last line is
    /// cut off) and read its conversation.
    pub(super) fn open(svc: &'a Services, rec: RunRecord, dir: PathBuf) -> Result<Self> {
        let redactor = svc.redactor.clone();
        let (audit, recovery) = Appender::open(
            &dir.join(files::AUDIT),
            &rec.run_id,
            Arc::new(move |s: &str| redactor.redact(s)),
        )?;
        if recovery.torn_tail.is_some() {
            tracing::warn!(run = %rec.run_id, "the audit log's last line was torn by a crash; continuing the chain after the last whole event");
        }
        let conversation = Conversation::open(dir.join(files::CONVERSATION), &svc.redactor)?;
        Ok(Self {
            svc,
            rec,
            dir,
            // One fsync per durable point (persist), not per event.
            audit: Arc::new(audit.sync_each(false)),
            conversation,
            started: std::time::Instant::now(),
        })
    }

    /// The record as it stands, and where it lives.
    pub(super) fn outcome(&self) -> Outcome {
        Outcome {
            record: self.rec.clone(),
            run_dir: self.dir.clone(),
        }
    }

    /// Append an event to the audit chain.
    pub(super) fn audit(&self, kind: Kind, data: serde_json::Value) -> Result<()> {
        self.audit.append(kind, data)?;
        Ok(())
    }

    /// The chain's head as of now.
    pub(super) fn audit_head(&self) -> Result<Head> {
        Ok(self.audit.head()?)
    }

    /// Where tools send their events: the audit chain.
    pub(super) fn tool_events(&self) -> Arc<dyn EventSink> {
        Arc::new(AuditSink {
            audit: self.audit.clone(),
        })
    }

    /// Tell whoever watches.
    pub(super) fn progress(&self, e: RunEvent) {
        (self.svc.progress)(&e);
    }

    /// The conversation so far.
    pub(super) fn messages(&self) -> &[Message] {
        self.conversation.messages()
    }

    /// Add a message to the conversation (written at the next save).
    pub(super) fn push(&mut self, m: Message) {
        self.conversation.push(m);
    }

    /// Add a line to the model transcript.
    pub(super) fn transcribe(&self, line: &Redacted) -> Result<()> {
        append_line(&self.dir.join(files::TRANSCRIPT), line)
    }

    /// Milliseconds since this process opened the run.
    pub(super) fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Save the record and conversation within a step: atomic (safe against `kill -9`) but
    /// without fsync or the ref mirror; [`persist`](Self::persist) does those at transitions.
    pub(super) fn save(&mut self) -> Result<()> {
        self.write_state(false)
    }

    /// Persist durably at a transition or checkpoint: the audit log synced, the record and
    /// conversation fsynced, the run directory mirrored to `refs/agent/runs/<id>`.
    pub(super) fn persist(&mut self) -> Result<()> {
        self.audit.sync()?;
        self.write_state(true)
    }

    fn write_state(&mut self, durable: bool) -> Result<()> {
        let _span = tracing::debug_span!("state_persist").entered();
        self.rec.audit_head = Some(self.audit.head()?);
        self.rec.budget_spent = Some(self.svc.router.spent());
        self.rec.model_usage = self.svc.router.usage();
        self.rec.usage = usage_lines(&self.svc.router);
        // Only the messages not yet written are appended, so a save costs what the turn
        // added, not the whole conversation again.
        self.conversation.flush(&self.svc.redactor, durable)?;
        self.rec
            .save_with(&self.dir, durable, &self.svc.redactor)
            .map_err(|e| Error::io("cannot write the record in", &self.dir, e))?;
        if durable {
            self.svc.repo.mirror_run_record(&self.rec.run_id)?;
        }
        Ok(())
    }

    /// Render the report, write it as `pr.md`, mirror the record. `worktree`: the run's, to
    /// name what was left uncommitted when the run did not succeed.
    pub(super) fn write_report(&mut self, worktree: Option<&Worktree>) -> Result<()> {
        let repo = &self.svc.repo;
        let head = self.rec.commits.last().cloned();
        let diff = match head {
            Some(h) => repo.diff(repo.resolve(&self.rec.base_sha)?, repo.resolve(&h)?)?,
            None => Default::default(),
        };
        if let Some(plan) = &mut self.rec.plan {
            self.rec.unplanned = diff
                .files
                .iter()
                .filter(|f| !plan.names(&f.path))
                .map(|f| f.path.clone())
                .collect();
            let changed: Vec<String> = diff.files.iter().map(|f| f.path.clone()).collect();
            plan.settle(&changed);
        }
        if let Some(wt) = worktree
            && self.rec.state != RunState::Succeeded
            && let Ok(left) = wt.changed_paths()
            && !left.is_empty()
        {
            self.rec.notes.push(format!(
                "{NOT_COMMITTED}{}.",
                left.iter().take(20).cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        self.rec.elapsed_ms += self.elapsed_ms();
        let log = chain::read(&self.dir.join(files::AUDIT))?;
        let lines: Vec<String> = log.events.iter().map(chain::render_event).collect();
        let head = self.audit_head()?;
        let input = self.rec.report_input(
            diff.stat(),
            lines,
            head.hash,
            self.svc.config.settings.budget.max_usd,
        );
        let body = self.svc.redactor.clean(&report::render(&input));
        let pr = self.dir.join(files::PR);
        write_atomic(&pr, &body).map_err(|e| Error::io("cannot write", &pr, e))?;
        self.rec.pr = Some(PrRef::Path(pr));
        self.persist()?;
        Ok(())
    }

    /// Move the state machine to `next`: refused unless it is a transition of
    /// [`RunState::can_move_to`], audited, persisted before the run acts on it, then told.
    pub(super) fn transition(&mut self, next: RunState) -> Result<()> {
        if self.rec.state != next {
            if !self.rec.state.can_move_to(next) {
                return Err(Error::Invalid(format!(
                    "illegal transition {} → {next}",
                    self.rec.state
                )));
            }
            self.audit(
                Kind::State,
                json!({"from": self.rec.state.as_str(), "state": next.as_str()}),
            )?;
            self.rec.state = next;
        }
        self.persist()?;
        self.progress(RunEvent::State(next));
        Ok(())
    }
}

fn usage_lines(router: &Router) -> Vec<CostLine> {
    router
        .usage()
        .into_iter()
        .map(|(role, spec, u)| CostLine {
            role: role.as_str().to_string(),
            model: spec,
            tokens_in: u.tokens_in,
            tokens_out: u.tokens_out,
            cost_usd: (!u.cost_unknown).then_some(u.cost_usd),
        })
        .collect()
}

/// Append to a file of the run directory (creating it); `sync` adds an fsync.
fn append_bytes(path: &Path, text: &Redacted, sync: bool) -> Result<()> {
    use std::io::Write as _;
    let bytes = text.as_str().as_bytes();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io("cannot open", path, e))?;
    f.write_all(bytes)
        .map_err(|e| Error::io("cannot write", path, e))?;
    if sync {
        f.sync_data()
            .map_err(|e| Error::io("cannot sync", path, e))?;
    }
    Ok(())
}

fn append_line(path: &Path, line: &Redacted) -> Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io("cannot open", path, e))?;
    writeln!(f, "{line}").map_err(|e| Error::io("cannot write", path, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixture::World;
    use super::*;

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn a_save_appends_only_what_the_turn_added_redacted() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        led.push(Message::user("first"));
        led.save().unwrap();
        led.push(Message::user(format!("the key is {}", World::SECRET)));
        led.save().unwrap();
        led.save().unwrap();
        let conv = led.dir.join(files::CONVERSATION);
        let text = lines(&conv);
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text[0].contains("first"));
        assert!(!text[1].contains(World::SECRET), "{}", text[1]);
        // The record on disk is the ledger's, and read back as such.
        let back = RunRecord::load(&led.dir).unwrap();
        assert_eq!(back.run_id, led.rec.run_id);
        assert_eq!(back.audit_head, led.rec.audit_head);
    }

    #[test]
    fn a_torn_last_line_is_cut_off_and_the_next_append_starts_clean() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        led.push(Message::user("kept"));
        led.save().unwrap();
        let conv = led.dir.join(files::CONVERSATION);
        let mut bytes = std::fs::read(&conv).unwrap();
        bytes.extend_from_slice(b"{\"type\":\"user\",\"con");
        std::fs::write(&conv, &bytes).unwrap();
        let rec = led.rec.clone();
        let dir = led.dir.clone();
        drop(led);
        let mut led = Ledger::open(&svc, rec, dir).unwrap();
        assert_eq!(led.messages(), &[Message::user("kept")]);
        led.push(Message::user("after"));
        led.save().unwrap();
        let text = lines(&conv);
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text[1].contains("after"));
        let again = Conversation::open(conv, &svc.redactor).unwrap();
        assert_eq!(again.messages().len(), 2);
    }

    #[test]
    fn transitions_are_checked_audited_and_mirrored() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        led.transition(RunState::Analyzing).unwrap();
        let err = led.transition(RunState::Succeeded).unwrap_err();
        assert!(
            err.to_string()
                .contains("illegal transition analyzing → succeeded"),
            "{err}"
        );
        assert_eq!(led.rec.state, RunState::Analyzing);
        assert_eq!(
            RunRecord::load(&led.dir).unwrap().state,
            RunState::Analyzing
        );
        let log = crate::audit::chain::read(&led.dir.join(files::AUDIT)).unwrap();
        let states: Vec<_> = log
            .events
            .iter()
            .filter(|e| e.kind == Kind::State)
            .map(|e| e.data["state"].clone())
            .collect();
        assert_eq!(states, [json!("analyzing")]);
        // Persisted means mirrored: the run's ref exists in the repository.
        let r = format!("refs/agent/runs/{}", led.rec.run_id);
        assert!(svc.repo.resolve(&r).is_ok(), "{r} missing");
        assert_eq!(w.events(), ["state analyzing"]);
    }

    #[test]
    fn the_report_is_written_redacted_and_names_what_was_left_uncommitted() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        let bench = super::super::setup::Workbench::prepare(&mut led, false).unwrap();
        std::fs::write(bench.worktree.path().join("value.txt"), "3\n").unwrap();
        led.rec
            .notes
            .push(format!("the model said {}", World::SECRET));
        led.transition(RunState::Failed).unwrap();
        led.write_report(Some(&bench.worktree)).unwrap();
        let pr = led.dir.join(files::PR);
        assert_eq!(led.rec.pr, Some(PrRef::Path(pr.clone())));
        let body = std::fs::read_to_string(&pr).unwrap();
        assert!(
            body.contains("Not committed (unverified): value.txt."),
            "{body}"
        );
        assert!(!body.contains(World::SECRET));
        assert_eq!(RunRecord::load(&led.dir).unwrap().pr, led.rec.pr);
    }
}
