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
/// paths that no longer differ from the checkpoint. What a writer other than the test command
/// wrote is kept (`private/authored/<fingerprint>` in the run directory, never mirrored) so
/// that it can be put back.
pub(super) fn observe(led: &mut Ledger<'_>, wt: &Worktree, writer: &str) -> Result<()> {
    let now = fingerprints(wt)?;
    for (path, fp) in &now {
        if led.rec.fingerprints.get(path) != Some(fp) {
            led.rec.attribution.insert(path.clone(), writer.to_string());
            if !writer.starts_with(TEST_COMMAND) && keep_authored(led, wt, path, fp) {
                led.rec
                    .authored
                    .insert(path.clone(), (fp.clone(), writer.to_string()));
            }
        }
    }
    led.rec.attribution.retain(|p, _| now.contains_key(p));
    led.rec.authored.retain(|p, _| now.contains_key(p));
    led.rec.fingerprints = now;
    Ok(())
}

/// Where the content with fingerprint `fp` is kept.
fn authored_copy(led: &Ledger<'_>, fp: &str) -> std::path::PathBuf {
    led.dir
        .join(super::record::files::PRIVATE)
        .join("authored")
        .join(fp.replace(':', "-"))
}

/// Keep what `path` holds now (fingerprint `fp`): its bytes, or a link's target. A deletion
/// needs nothing kept. False when it cannot be kept (then it is not put back either).
fn keep_authored(led: &Ledger<'_>, wt: &Worktree, path: &str, fp: &str) -> bool {
    if fp == "deleted" {
        return true;
    }
    let to = authored_copy(led, fp);
    if to.exists() {
        return true;
    }
    let Some(bytes) = current_content(wt.path(), path) else {
        return false;
    };
    to.parent()
        .is_some_and(|d| std::fs::create_dir_all(d).is_ok())
        && crate::fsutil::write_atomic(&to, &bytes, crate::fsutil::Durability::Replace).is_ok()
}

/// Put `path` back to what its author last wrote (fingerprint `fp`).
fn restore_authored(led: &Ledger<'_>, wt: &Worktree, path: &str, fp: &str) -> Result<()> {
    let full = wt.path().join(path);
    let io = |e: std::io::Error| super::error::Error::io("cannot put back", &full, e);
    // Written from outside the sandbox: never through a directory the tree links elsewhere.
    let mut at = wt.path().to_path_buf();
    for part in std::path::Path::new(path)
        .parent()
        .into_iter()
        .flat_map(|p| p.components())
    {
        at.push(part);
        if at
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            return Err(io(std::io::Error::other(
                "a directory on its path is a link",
            )));
        }
    }
    if full.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        return Ok(());
    }
    if full.symlink_metadata().is_ok() {
        std::fs::remove_file(&full).map_err(io)?;
    }
    if fp == "deleted" {
        return Ok(());
    }
    let bytes = std::fs::read(authored_copy(led, fp)).map_err(io)?;
    if let Some(d) = full.parent() {
        std::fs::create_dir_all(d).map_err(io)?;
    }
    if fp.starts_with("link:") {
        std::os::unix::fs::symlink(String::from_utf8_lossy(&bytes).as_ref(), &full).map_err(io)
    } else {
        std::fs::write(&full, bytes).map_err(io)
    }
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
    // The model's edit wins over a later rewrite by the test command (a formatter, `cargo`
    // rewriting a manifest the model edited): such a path goes back to the model's content,
    // not to the checkpoint's.
    let (rewritten, only_tests): (Vec<String>, Vec<String>) = only_tests
        .into_iter()
        .partition(|p| led.rec.authored.contains_key(p));
    let mut kept = Vec::new();
    for path in &rewritten {
        let (fp, writer) = led.rec.authored[path].clone();
        restore_authored(led, &bench.worktree, path, &fp)?;
        kept.push((path.clone(), writer));
    }
    if !only_tests.is_empty() {
        bench.worktree.restore_paths(&only_tests)?;
    }
    led.audit(
        Kind::Policy,
        json!({"not_committed_written_by_tests": only_tests, "test_rewrites_undone": rewritten}),
    )?;
    observe(led, &bench.worktree, "a tool or command")?;
    for (path, writer) in kept {
        led.rec.attribution.insert(path, writer);
    }
    Ok(only_tests)
}

/// A path's content in the work tree as git would store it (a link's target for a symbolic
/// link); `None` when it is gone.
pub(super) fn current_content(root: &std::path::Path, rela: &str) -> Option<Vec<u8>> {
    let full = root.join(rela);
    let meta = std::fs::symlink_metadata(&full).ok()?;
    if meta.file_type().is_symlink() {
        return std::fs::read_link(&full)
            .ok()
            .map(|t| t.to_string_lossy().into_owned().into_bytes());
    }
    std::fs::read(&full).ok()
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

    /// Issue 40 point 4: the model edits a file, then the test command rewrites it (a
    /// formatter, cargo rewriting what the model edited): what is kept is the model's edit,
    /// never the checkpoint's content (that would silently revert the model) and never the
    /// command's rewrite (the plan does not name the file).
    #[test]
    fn a_test_commands_rewrite_goes_back_to_the_models_edit() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        let bench = Workbench::prepare(&mut led, false).unwrap();
        let wt = bench.worktree.path().to_path_buf();
        std::fs::write(wt.join("value.txt"), "2\n").unwrap();
        observe(&mut led, &bench.worktree, "edit_file c1").unwrap();
        std::fs::write(wt.join("value.txt"), "2 # reformatted\n").unwrap();
        std::fs::write(wt.join("Cargo.lock"), "# generated\n").unwrap();
        observe(&mut led, &bench.worktree, "test command (attempt 1)").unwrap();
        assert_eq!(led.rec.attribution["value.txt"], "test command (attempt 1)");

        let put_back = exclude_test_outputs(&mut led, &bench).unwrap();
        assert_eq!(put_back, ["Cargo.lock"]);
        assert_eq!(
            std::fs::read_to_string(wt.join("value.txt")).unwrap(),
            "2\n"
        );
        assert_eq!(led.rec.attribution["value.txt"], "edit_file c1");
        assert!(!wt.join("Cargo.lock").exists());
        // The copy stays on this machine: the record's mirror never holds it.
        let (fp, _) = &led.rec.authored["value.txt"];
        let copy = format!("private/authored/{fp}");
        assert!(led.dir.join(&copy).is_file());
        led.save().unwrap();
        let mirror = svc.repo.mirror_run_record(&led.rec.run_id).unwrap();
        let at = mirror.to_string();
        assert!(svc.repo.read_file_at(&at, "record.json").unwrap().is_some());
        assert_eq!(svc.repo.read_file_at(&at, &copy).unwrap(), None);

        // A file the model deleted and the test command wrote again stays deleted.
        std::fs::remove_file(wt.join("value.txt")).unwrap();
        observe(&mut led, &bench.worktree, "run c2").unwrap();
        std::fs::write(wt.join("value.txt"), "regenerated\n").unwrap();
        observe(&mut led, &bench.worktree, "test command (attempt 2)").unwrap();
        exclude_test_outputs(&mut led, &bench).unwrap();
        assert!(!wt.join("value.txt").exists());
        assert_eq!(led.rec.attribution["value.txt"], "run c2");

        // Putting back is done outside the sandbox: never through a directory that is a link
        // (here to a directory outside the tree).
        std::fs::create_dir(wt.join("sub")).unwrap();
        std::fs::write(wt.join("sub/v.txt"), "mine\n").unwrap();
        observe(&mut led, &bench.worktree, "edit_file c3").unwrap();
        let (fp, _) = led.rec.authored["sub/v.txt"].clone();
        let outside = tempfile::tempdir().unwrap();
        std::fs::remove_dir_all(wt.join("sub")).unwrap();
        std::os::unix::fs::symlink(outside.path(), wt.join("sub")).unwrap();
        assert!(restore_authored(&led, &bench.worktree, "sub/v.txt", &fp).is_err());
        assert!(!outside.path().join("v.txt").exists());
    }
}
