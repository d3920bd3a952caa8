//! Who changed what (issue 18): every path that differs from the last checkpoint is
//! attributed to the action that last changed it — a tool call, a model's command, or the
//! test command itself.
//!
//! After each action the run fingerprints the changed paths and compares them with what it
//! saw last; a path whose fingerprint moved belongs to that action. Files that only the test
//! command wrote (a `Cargo.lock` from `cargo test`, a coverage file, a cache the project does
//! not ignore) are not the model's change: [`exclude_test_outputs`] puts them back before a
//! checkpoint unless the plan names them, and the report lists them.

use std::collections::BTreeMap;

use serde_json::json;
use sha2::{Digest as _, Sha256};

use super::error::Result;
use super::ledger::Ledger;
use super::setup::Workbench;
use crate::audit::chain::Kind;
use crate::workspace::Worktree;

/// How the test command is named as a writer; what starts so is not committed on its own.
pub(super) const TEST_COMMAND: &str = "test command";

/// A fingerprint of each changed path of `wt`: a hash of its content (or link target), or
/// `deleted`.
fn fingerprints(wt: &Worktree) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for path in wt.changed_paths()? {
        let full = wt.path().join(&path);
        let fp = match std::fs::symlink_metadata(&full) {
            Err(_) => "deleted".to_string(),
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&full).unwrap_or_default();
                hex(
                    Sha256::digest(target.to_string_lossy().as_bytes()).as_slice(),
                    "link:",
                )
            }
            Ok(_) => match std::fs::read(&full) {
                Ok(bytes) => hex(Sha256::digest(&bytes).as_slice(), ""),
                Err(_) => "unreadable".to_string(),
            },
        };
        out.insert(path, fp);
    }
    Ok(out)
}

fn hex(bytes: &[u8], prefix: &str) -> String {
    let mut s = String::from(prefix);
    for b in bytes.iter().take(16) {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Attribute to `writer` every changed path whose content moved since the last look; forget
/// paths that no longer differ from the checkpoint.
pub(super) fn observe(led: &mut Ledger<'_>, wt: &Worktree, writer: &str) -> Result<()> {
    let now = fingerprints(wt)?;
    for (path, fp) in &now {
        if led.rec.fingerprints.get(path) != Some(fp) {
            led.rec.attribution.insert(path.clone(), writer.to_string());
        }
    }
    led.rec.attribution.retain(|p, _| now.contains_key(p));
    led.rec.fingerprints = now;
    Ok(())
}

/// Put back what only the test command wrote, unless the plan names it: those files are not
/// the model's change. Returns the paths put back (also noted for the report's integrity
/// block and audited).
pub(super) fn exclude_test_outputs(led: &mut Ledger<'_>, bench: &Workbench) -> Result<Vec<String>> {
    observe(led, &bench.worktree, "a tool or command")?;
    let planned = led.rec.planned_files();
    let only_tests: Vec<String> = led
        .rec
        .attribution
        .iter()
        .filter(|(p, w)| w.starts_with(TEST_COMMAND) && !planned.contains(*p))
        .map(|(p, _)| p.clone())
        .collect();
    if only_tests.is_empty() {
        return Ok(only_tests);
    }
    bench.worktree.restore_paths(&only_tests)?;
    led.audit(
        Kind::Policy,
        json!({"not_committed_written_by_tests": only_tests}),
    )?;
    observe(led, &bench.worktree, "a tool or command")?;
    Ok(only_tests)
}

#[cfg(test)]
mod tests {
    use super::super::fixture::World;
    use super::*;

    #[test]
    fn each_change_belongs_to_whoever_made_it_last() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        let bench = Workbench::prepare(&mut led, false).unwrap();
        let wt = bench.worktree.path().to_path_buf();
        std::fs::write(wt.join("value.txt"), "2\n").unwrap();
        observe(&mut led, &bench.worktree, "edit_file c1").unwrap();
        std::fs::write(wt.join("Cargo.lock"), "# generated\n").unwrap();
        std::fs::write(wt.join("cache.txt"), "x\n").unwrap();
        observe(&mut led, &bench.worktree, "test command (before)").unwrap();
        // The model changes one of the test command's files: it is the model's now.
        std::fs::write(wt.join("cache.txt"), "kept\n").unwrap();
        observe(&mut led, &bench.worktree, "run c2").unwrap();
        let a = &led.rec.attribution;
        assert_eq!(a["value.txt"], "edit_file c1");
        assert_eq!(a["Cargo.lock"], "test command (before)");
        assert_eq!(a["cache.txt"], "run c2");

        let put_back = exclude_test_outputs(&mut led, &bench).unwrap();
        assert_eq!(put_back, ["Cargo.lock"]);
        assert!(!wt.join("Cargo.lock").exists());
        assert!(wt.join("cache.txt").exists());
        assert!(!led.rec.attribution.contains_key("Cargo.lock"));
        assert_eq!(
            exclude_test_outputs(&mut led, &bench).unwrap(),
            Vec::<String>::new()
        );
    }
}
