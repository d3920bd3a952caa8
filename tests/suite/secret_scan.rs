//! The push-time secret scan on real commits: each encoding of a canary committed to a real
//! repository is found in the commit's blobs and reported without the canary.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use git_agent::audit::redact::{ChangedFile, Finding, Redactor, scan_changes};
use git_agent::workspace::Repo;

use super::common::git;

/// Files of one commit: (path, content).
type Files = Vec<(&'static str, Vec<u8>)>;

const CANARY: &str = "ghs_ScanCanary9f3Kq7ZxW2mLp8RtV4nB6cYd";

/// Commit `files` on top of a base commit and scan base..head the way a checkpoint does.
fn commit_and_scan(files: &[(&str, Vec<u8>)]) -> Vec<Finding> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    git(dir, &["init", "-q"]);
    std::fs::write(dir.join("README.md"), "# demo\n\nSome text.\n").unwrap();
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "base"]);
    for (path, content) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "change"]);
    scan(dir)
}

fn scan(dir: &Path) -> Vec<Finding> {
    let repo = Repo::discover(dir).unwrap();
    let blobs = repo
        .changed_blobs(
            repo.resolve("HEAD~1").unwrap(),
            repo.resolve("HEAD").unwrap(),
        )
        .unwrap();
    let changed: Vec<ChangedFile<'_>> = blobs
        .iter()
        .map(|b| ChangedFile {
            path: &b.path,
            old: &b.old,
            new: &b.new,
        })
        .collect();
    let r = Redactor::new([CANARY]).unwrap();
    scan_changes(&changed, &r)
}

fn assert_reported_clean(f: &[Finding]) {
    let json = serde_json::to_string(f).unwrap();
    for w in CANARY.as_bytes().windows(8) {
        assert!(!json.contains(std::str::from_utf8(w).unwrap()), "{json}");
    }
}

/// Regression (issue 20, SECURITY 39): each encoding that got a token past the diff scan
/// (hex, reversed, split over two files, base64 wrapped at 12 columns, rot13, behind one
/// `\xff` byte) is found in a real commit, as are the other encodings an attacker would use.
#[test]
fn each_encoding_of_a_canary_in_a_commit_blocks_the_push() {
    let b64 = |prefix: &[u8]| STANDARD.encode([prefix, CANARY.as_bytes()].concat());
    let wrap = |s: String, w: usize| -> Vec<u8> {
        s.as_bytes()
            .chunks(w)
            .flat_map(|c| [c, b"\n"].concat())
            .collect()
    };
    let rev: String = CANARY.chars().rev().collect();
    let rot13: String = CANARY
        .chars()
        .map(|c| match c {
            'a'..='z' => (((c as u8 - b'a') + 13) % 26 + b'a') as char,
            'A'..='Z' => (((c as u8 - b'A') + 13) % 26 + b'A') as char,
            c => c,
        })
        .collect();
    let (h1, h2) = CANARY.split_at(19);
    let cases: Vec<(&str, Files)> = vec![
        ("raw", vec![("a.txt", format!("t={CANARY}\n").into())]),
        ("hex", vec![("a.txt", hex::encode(CANARY).into())]),
        ("HEX", vec![("a.txt", hex::encode_upper(CANARY).into())]),
        ("reversed", vec![("a.txt", rev.into())]),
        ("rot13", vec![("a.txt", rot13.into())]),
        ("base64 wrapped at 12", vec![("a.txt", wrap(b64(b""), 12))]),
        ("base64 offset 1", vec![("a.txt", wrap(b64(b"x"), 64))]),
        ("base64 offset 2", vec![("a.txt", wrap(b64(b"xy"), 76))]),
        (
            "base64url",
            vec![("a.txt", URL_SAFE_NO_PAD.encode(CANARY).into())],
        ),
        (
            "percent",
            vec![(
                "a.txt",
                CANARY
                    .bytes()
                    .map(|b| format!("%{b:02X}"))
                    .collect::<String>()
                    .into(),
            )],
        ),
        (
            "json",
            vec![(
                "a.json",
                format!(
                    "{{\"k\":\"{}\"}}",
                    CANARY
                        .chars()
                        .map(|c| format!("\\u{:04x}", c as u32))
                        .collect::<String>()
                )
                .into(),
            )],
        ),
        (
            "split over lines",
            vec![("a.txt", format!("{h1}\n{h2}\n").into())],
        ),
        (
            "split over two files, second half first",
            vec![
                ("a.txt", format!("{h2}\n").into()),
                ("b.txt", format!("{h1}\n").into()),
            ],
        ),
        (
            "behind one 0xff byte",
            vec![("a.bin", [b"\xff".as_slice(), CANARY.as_bytes()].concat())],
        ),
        (
            "inside a binary",
            vec![(
                "a.bin",
                [
                    vec![0u8, 1, 2, 3, 0xfe],
                    CANARY.as_bytes().to_vec(),
                    vec![0; 64],
                ]
                .concat(),
            )],
        ),
    ];
    for (name, files) in cases {
        let f = commit_and_scan(&files);
        assert!(
            f.iter().any(|f| f.kind == "known-secret"),
            "{name} was not found: {f:?}"
        );
        for (path, _) in &files {
            assert!(
                f.iter().any(|f| &f.path == path),
                "{name}: {path} not named: {f:?}"
            );
        }
        assert_reported_clean(&f);
    }
}

/// A private key body without its header lines, by shape (SECURITY 39).
#[test]
fn a_private_key_body_without_headers_blocks_the_push() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("k");
    let out = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "", "-f"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(out.status.success());
    let pem = std::fs::read_to_string(&key).unwrap();
    let body: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .join("\n");
    let f = commit_and_scan(&[("deploy/id", body.clone().into())]);
    assert!(f.iter().any(|f| f.kind == "private-key"), "{f:?}");
    assert!(!serde_json::to_string(&f).unwrap().contains(&body[30..60]));
    // A public key is not a private one.
    let public = std::fs::read(key.with_extension("pub")).unwrap();
    assert!(commit_and_scan(&[("deploy/id.pub", public)]).is_empty());
}
