//! bench-secret-scan: the push-time secret scan's false-positive rate and speed on real
//! content that holds no secret of ours.
//!
//! Draws random canary secrets of the shapes a run knows (GitHub and OpenAI tokens, an AWS
//! secret key, a database URL with a random password, a hex key, a password), then scans:
//!
//! - `git REPO…`: every commit of each repository's history against its first parent, the way
//!   a checkpoint scans a run's commits;
//! - `dir DIR…`: each subdirectory of each DIR as one unit (every file in it added at once,
//!   so the split-across-files search sees them all together).
//!
//! A known-secret finding is a false positive by construction (the canaries are random).
//! Token-pattern and private-key findings are listed for judgement: real repositories do
//! carry example tokens and test keys.
//!
//! `cargo run --release --features bench --bin bench-secret-scan -- git /path/repo -- dir ~/.cargo/registry/src/x`
#![allow(clippy::disallowed_methods)] // a benchmark prints its figures; nothing secret

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use git_agent::audit::redact::{ChangedFile, Finding, Redactor};
use git_agent::workspace::Repo;

#[derive(Default)]
struct Tally {
    units: usize,
    files: usize,
    bytes: u64,
    time: Duration,
    by_kind: BTreeMap<String, usize>,
    known: Vec<String>,
    patterns: Vec<String>,
}

impl Tally {
    fn add(
        &mut self,
        unit: &str,
        files: &[ChangedFile<'_>],
        scanner: &git_agent::audit::redact::DiffScanner<'_>,
    ) {
        self.units += 1;
        self.files += files.len();
        self.bytes += files.iter().map(|f| f.new.len() as u64).sum::<u64>();
        let t = Instant::now();
        let found: Vec<Finding> = scanner.scan(files);
        self.time += t.elapsed();
        for f in found {
            *self
                .by_kind
                .entry(format!("{} ({})", f.kind, f.encoding))
                .or_default() += 1;
            let line = format!(
                "{unit}: {}:{} {} ({}) {}",
                f.path, f.line, f.kind, f.encoding, f.redacted
            );
            if f.kind == "known-secret" {
                self.known.push(line);
            } else {
                self.patterns.push(line);
            }
        }
    }
}

fn random(alphabet: &[u8], n: usize) -> String {
    (0..n)
        .map(|_| alphabet[fastrand::usize(..alphabet.len())] as char)
        .collect()
}

fn canaries() -> Vec<String> {
    let alnum = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let b64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    vec![
        format!("ghs_{}", random(alnum, 36)),
        format!("ghp_{}", random(alnum, 36)),
        format!("sk-proj-{}", random(alnum, 48)),
        random(b64, 40),
        format!(
            "postgres://agent:{}@localhost:5432/agent",
            random(alnum, 16)
        ),
        random(b"0123456789abcdef", 64),
        random(alnum, 20),
        format!("xoxb-{}-{}", random(b"0123456789", 12), random(alnum, 24)),
    ]
}

fn git_units(
    repo_dir: &Path,
    tally: &mut Tally,
    scanner: &git_agent::audit::redact::DiffScanner<'_>,
) -> Result<(), Box<dyn std::error::Error>> {
    let repo = Repo::discover(repo_dir)?;
    let out = std::process::Command::new("git")
        .args(["rev-list", "--all", "--parents"])
        .current_dir(repo_dir)
        .output()?;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let ids: Vec<&str> = line.split_whitespace().collect();
        let (Some(c), Some(p)) = (ids.first(), ids.get(1)) else {
            continue;
        };
        let blobs = repo.changed_blobs(repo.resolve(p)?, repo.resolve(c)?)?;
        let files = ChangedFile::with_content(&blobs);
        tally.add(
            &format!("{}@{}", repo_dir.display(), &c[..10]),
            &files,
            scanner,
        );
    }
    Ok(())
}

fn walk(dir: &Path, out: &mut Vec<(String, Vec<u8>)>, root: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            walk(&p, out, root);
        } else if ft.is_file()
            && let Ok(bytes) = std::fs::read(&p)
        {
            let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            out.push((rel, bytes));
        }
    }
}

fn dir_units(dir: &Path, tally: &mut Tally, scanner: &git_agent::audit::redact::DiffScanner<'_>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut subs: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    subs.sort();
    for sub in subs {
        let mut contents = Vec::new();
        if sub.is_dir() {
            walk(&sub, &mut contents, dir);
        } else if let Ok(b) = std::fs::read(&sub) {
            contents.push((sub.display().to_string(), b));
        }
        let files: Vec<ChangedFile<'_>> = contents
            .iter()
            .map(|(p, b)| ChangedFile {
                path: p,
                old: b"",
                new: b,
            })
            .collect();
        tally.add(&sub.display().to_string(), &files, scanner);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secrets = canaries();
    let redactor = Redactor::new(&secrets)?;
    let scanner = redactor.diff_scanner();
    let mut mode = String::new();
    let mut report = Vec::new();
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    args.push("--".into());
    let mut tally = Tally::default();
    for a in args {
        match a.as_str() {
            "git" | "dir" => mode = a,
            "--" => {
                if tally.units > 0 {
                    report.push((mode.clone(), std::mem::take(&mut tally)));
                }
            }
            path if mode == "git" => git_units(Path::new(path), &mut tally, &scanner)?,
            path => dir_units(Path::new(path), &mut tally, &scanner),
        }
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "canaries: {} random secrets of {} shapes",
        secrets.len(),
        secrets.len()
    )?;
    for (mode, t) in &report {
        writeln!(
            out,
            "\n[{mode}] units {} files {} bytes {} ({:.1} MB) scan time {:.2} s ({:.1} MB/s)",
            t.units,
            t.files,
            t.bytes,
            t.bytes as f64 / 1e6,
            t.time.as_secs_f64(),
            t.bytes as f64 / 1e6 / t.time.as_secs_f64().max(1e-9)
        )?;
        writeln!(
            out,
            "  known-secret findings (false positives): {}",
            t.known.len()
        )?;
        for l in t.known.iter().take(20) {
            writeln!(out, "    {l}")?;
        }
        writeln!(out, "  pattern/shape findings: {}", t.patterns.len())?;
        for (k, n) in &t.by_kind {
            writeln!(out, "    {n:6} {k}")?;
        }
        for l in t.patterns.iter().take(40) {
            let l: String = l.chars().take(220).collect();
            writeln!(out, "    {l}")?;
        }
    }
    Ok(())
}
