//! The base's Rust build, kept so a clean checkout need not compile from scratch (issue 40's
//! benchmark: the clean-tree verification of a Rust crate cost 5× the worktree run).
//!
//! [`keep_build`] copies the `target/` directories of a tree that has just built the base —
//! the run's worktree after the baseline, before any model turn — into a directory of the
//! caller's that no command of the run can see. [`seed_checkout`] copies that into a fresh
//! checkout and ages every file the checkout holds unchanged from the base, so cargo finds
//! what the base built fresh and compiles only what the change touched (cargo compares each
//! source's mtime with its build's; a relocated `target/` stays valid, since cargo records
//! workspace paths relative to the workspace and rewrites a build script's old `OUT_DIR`).
//!
//! What this must not do: hand a checkout anything a command of the run wrote (the copy is
//! taken before the first model turn, from a tree that started empty of ignored files, and
//! each checkout gets a copy of its own — a build script of the change that writes into its
//! `target/` writes into that copy only), or age a file that differs from the base (cargo
//! would then keep the base's build of it and the tests would test the base).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::Result;
use super::error::io_err;

/// Build directories nothing later reads: incremental state (cargo compiles a changed crate
/// without it), documentation, scratch and packaging.
const SKIPPED: &[&str] = &["incremental", "doc", "tmp", "package"];

/// The marker written last: a copy without it is incomplete and never seeds anything.
const DONE: &str = ".done";

/// The time a checkout's unchanged files get: older than any build. (Set through a
/// read-only handle: the owner may set a file's times without being able to write it.)
fn aged() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(946_684_800) // 2000-01-01
}

/// What [`keep_build`] kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptBuild {
    /// The build directories, relative to the tree (`target`, `rust/target`).
    pub dirs: Vec<String>,
    /// Bytes copied.
    pub bytes: u64,
}

/// Copy the Rust build directories of `root` (a `target/` holding cargo's `CACHEDIR.TAG`,
/// at the root or one directory down) into `into`, replacing what was there, with their
/// files' times and modes. `None` when there is none, or when they exceed `max_bytes`
/// (then nothing is kept).
pub fn keep_build(root: &Path, into: &Path, max_bytes: u64) -> Result<Option<KeptBuild>> {
    remove_kept(into)?;
    let dirs = build_dirs(root);
    if dirs.is_empty() {
        return Ok(None);
    }
    let mut bytes = 0u64;
    for d in &dirs {
        copy_tree(&root.join(d), &into.join(d), &mut bytes, max_bytes)?;
        if bytes > max_bytes {
            remove_kept(into)?;
            return Ok(None);
        }
    }
    let done = into.join(DONE);
    std::fs::write(&done, dirs.join("\n")).map_err(io_err("cannot write", done))?;
    Ok(Some(KeptBuild { dirs, bytes }))
}

/// Remove a kept build.
pub fn remove_kept(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("cannot remove", dir)(e)),
    }
}

/// Seed the fresh checkout at `root` from the build kept in `kept`: a copy of each build
/// directory, and every file of the checkout for which `unchanged` (its path relative to
/// the checkout) holds aged, so the base's build of it counts as fresh. Returns the bytes
/// copied; 0 when nothing complete is kept.
pub fn seed_checkout(kept: &Path, root: &Path, unchanged: &dyn Fn(&str) -> bool) -> Result<u64> {
    let Ok(listed) = std::fs::read_to_string(kept.join(DONE)) else {
        return Ok(0);
    };
    let dirs: Vec<&str> = listed.lines().filter(|l| !l.is_empty()).collect();
    let mut bytes = 0u64;
    // Written from outside the sandbox into a tree the change controls: only where nothing
    // is yet, under real directories — a committed `target` link would lead the copy out.
    let dirs: Vec<&str> = dirs
        .into_iter()
        .filter(|d| {
            std::fs::symlink_metadata(root.join(d)).is_err() && real_dirs_to(root, d, false)
        })
        .collect();
    for d in &dirs {
        copy_tree(&kept.join(d), &root.join(d), &mut bytes, u64::MAX)?;
    }
    let skip: Vec<PathBuf> = dirs.iter().map(|d| root.join(d)).collect();
    age_unchanged(root, root, &skip, unchanged)?;
    Ok(bytes)
}

/// `target` at the root and one directory down, where cargo marked it as its own.
fn build_dirs(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if real_dirs_to(root, "target", true) && root.join("target/CACHEDIR.TAG").is_file() {
        out.push("target".to_string());
    }
    if let Ok(entries) = std::fs::read_dir(root) {
        let mut subs: Vec<String> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| !n.starts_with('.') && n != "target")
            .filter(|n| {
                let d = format!("{n}/target");
                real_dirs_to(root, &d, true) && root.join(&d).join("CACHEDIR.TAG").is_file()
            })
            .map(|n| format!("{n}/target"))
            .collect();
        subs.sort();
        out.extend(subs);
    }
    out
}

/// Whether every directory on the way from `root` to `rela` is a real directory, not a link
/// (`rela` itself too when `itself`; a component may be absent): a link there would take a
/// copy out of the tree, from a place the tree's owner chose.
fn real_dirs_to(root: &Path, rela: &str, itself: bool) -> bool {
    let parts: Vec<&str> = rela.split('/').collect();
    let upto = if itself { parts.len() } else { parts.len() - 1 };
    let mut at = root.to_path_buf();
    parts[..upto].iter().all(|p| {
        at.push(p);
        match std::fs::symlink_metadata(&at) {
            Ok(m) => m.is_dir(),
            Err(_) => true,
        }
    })
}

/// Copy the tree at `from` to `to` (files with their mode and modification time, links as
/// links), leaving out [`SKIPPED`] directories; stops once `bytes` passes `max`.
fn copy_tree(from: &Path, to: &Path, bytes: &mut u64, max: u64) -> Result<()> {
    std::fs::create_dir_all(to).map_err(io_err("cannot create", to))?;
    let entries = std::fs::read_dir(from).map_err(io_err("cannot read", from))?;
    for entry in entries {
        let entry = entry.map_err(io_err("cannot read", from))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().map_err(io_err("cannot stat", &src))?;
        if kind.is_dir() {
            if SKIPPED.iter().any(|s| entry.file_name() == *s) {
                continue;
            }
            copy_tree(&src, &dst, bytes, max)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&src).map_err(io_err("cannot read link", &src))?;
            #[cfg(unix)]
            std::os::unix::fs::symlink(&target, &dst).map_err(io_err("cannot link", &dst))?;
        } else if kind.is_file() {
            *bytes += std::fs::copy(&src, &dst).map_err(io_err("cannot copy", &src))?;
            let modified = entry
                .metadata()
                .and_then(|m| m.modified())
                .map_err(io_err("cannot stat", &src))?;
            std::fs::File::open(&dst)
                .and_then(|f| f.set_modified(modified))
                .map_err(io_err("cannot set the time of", &dst))?;
        }
        if *bytes > max {
            return Ok(());
        }
    }
    Ok(())
}

/// Age every file under `dir` (not under `.git` or `skip`) whose path relative to `root`
/// `unchanged` accepts.
fn age_unchanged(
    root: &Path,
    dir: &Path,
    skip: &[PathBuf],
    unchanged: &dyn Fn(&str) -> bool,
) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(io_err("cannot read", dir))?;
    for entry in entries {
        let entry = entry.map_err(io_err("cannot read", dir))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(io_err("cannot stat", &path))?;
        if kind.is_dir() {
            if entry.file_name() == ".git" || skip.contains(&path) {
                continue;
            }
            age_unchanged(root, &path, skip, unchanged)?;
        } else if kind.is_file() {
            let Some(rela) = path
                .strip_prefix(root)
                .ok()
                .and_then(|p| p.to_str())
                .map(|p| p.replace(std::path::MAIN_SEPARATOR, "/"))
            else {
                continue;
            };
            if unchanged(&rela) {
                std::fs::File::open(&path)
                    .and_then(|f| f.set_modified(aged()))
                    .map_err(io_err("cannot set the time of", &path))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rela: &str, text: &str) {
        let p = root.join(rela);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn mtime(p: &Path) -> SystemTime {
        std::fs::metadata(p).unwrap().modified().unwrap()
    }

    /// The kept copy holds the build without its incremental state, with its times; a seeded
    /// checkout gets a copy of its own, unchanged files aged and changed ones left new.
    #[test]
    fn keep_then_seed_ages_only_what_is_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        let (wt, kept, checkout) = (
            tmp.path().join("wt"),
            tmp.path().join("kept"),
            tmp.path().join("co"),
        );
        write(
            &wt,
            "target/CACHEDIR.TAG",
            "Signature: 8a477f597d28d172789f06886806bc55",
        );
        write(&wt, "target/debug/deps/libx.rlib", "rlib");
        write(&wt, "target/debug/incremental/x/state", "big");
        write(&wt, "sub/target/CACHEDIR.TAG", "tag");
        write(&wt, "other/target/file", "not cargo's");
        let built = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        std::fs::File::open(wt.join("target/debug/deps/libx.rlib"))
            .unwrap()
            .set_modified(built)
            .unwrap();

        let k = keep_build(&wt, &kept, u64::MAX).unwrap().unwrap();
        assert_eq!(k.dirs, ["target", "sub/target"]);
        assert!(!kept.join("target/debug/incremental").exists());
        assert!(!kept.join("other").exists());
        assert_eq!(mtime(&kept.join("target/debug/deps/libx.rlib")), built);

        write(&checkout, "src/lib.rs", "changed");
        write(&checkout, "src/util.rs", "same");
        write(&checkout, ".git/HEAD", "ref");
        let n = seed_checkout(&kept, &checkout, &|p| p != "src/lib.rs").unwrap();
        assert!(n > 0);
        assert_eq!(mtime(&checkout.join("target/debug/deps/libx.rlib")), built);
        assert_eq!(mtime(&checkout.join("src/util.rs")), aged());
        assert!(mtime(&checkout.join("src/lib.rs")) > built);
        assert!(mtime(&checkout.join(".git/HEAD")) > built);
        // The checkout's copy is its own: writing it leaves the kept build as it was.
        std::fs::write(checkout.join("target/debug/deps/libx.rlib"), "poisoned").unwrap();
        assert_eq!(
            std::fs::read_to_string(kept.join("target/debug/deps/libx.rlib")).unwrap(),
            "rlib"
        );
    }

    /// A tree whose `target` (or a directory above one) is a link never has the build
    /// copied through it, either way: a committed `target -> elsewhere` would have the agent
    /// write outside the checkout, or read another project's build into it.
    #[test]
    fn a_linked_build_directory_is_neither_kept_nor_seeded() {
        let tmp = tempfile::tempdir().unwrap();
        let (wt, kept, checkout, outside) = (
            tmp.path().join("wt"),
            tmp.path().join("kept"),
            tmp.path().join("co"),
            tmp.path().join("outside"),
        );
        write(&outside, "target/CACHEDIR.TAG", "tag");
        write(&outside, "target/debug/deps/libother.rlib", "other");
        std::fs::create_dir_all(&wt).unwrap();
        std::os::unix::fs::symlink(outside.join("target"), wt.join("target")).unwrap();
        std::os::unix::fs::symlink(&outside, wt.join("sub")).unwrap();
        assert_eq!(keep_build(&wt, &kept, u64::MAX).unwrap(), None);

        std::fs::remove_file(wt.join("target")).unwrap();
        write(&wt, "target/CACHEDIR.TAG", "tag");
        write(&wt, "target/debug/deps/libx.rlib", "rlib");
        keep_build(&wt, &kept, u64::MAX).unwrap().unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::create_dir_all(&checkout).unwrap();
        std::os::unix::fs::symlink(&elsewhere, checkout.join("target")).unwrap();
        assert_eq!(seed_checkout(&kept, &checkout, &|_| true).unwrap(), 0);
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }

    /// Too big, or never finished: nothing seeds.
    #[test]
    fn an_oversized_or_unfinished_copy_seeds_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let (wt, kept, checkout) = (
            tmp.path().join("wt"),
            tmp.path().join("kept"),
            tmp.path().join("co"),
        );
        write(&wt, "target/CACHEDIR.TAG", "tag");
        write(&wt, "target/debug/deps/libx.rlib", "0123456789");
        assert_eq!(keep_build(&wt, &kept, 5).unwrap(), None);
        assert!(!kept.exists());
        keep_build(&wt, &kept, u64::MAX).unwrap().unwrap();
        std::fs::remove_file(kept.join(DONE)).unwrap();
        write(&checkout, "src/lib.rs", "x");
        assert_eq!(seed_checkout(&kept, &checkout, &|_| true).unwrap(), 0);
        assert!(!checkout.join("target").exists());
        assert!(mtime(&checkout.join("src/lib.rs")) > aged());
    }
}
