//! `bench-edits CORPUS.jsonl [--json]`: apply every case of an edit corpus through the edit
//! engine and count applied-correctly / refused / applied-wrongly, per perturbation kind.
//!
//! A case with `expected: null` counts as correct when refused and wrong when applied. Make a
//! corpus with `make-corpus.py GIT_DIR` from any repository's history; see its header.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::process::ExitCode;

use git_agent::tools::edit::apply_edit;
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Case {
    id: String,
    kind: String,
    before: String,
    old_text: String,
    new_text: String,
    expected: Option<String>,
}

#[derive(Default, Serialize, Clone, Copy)]
struct Tally {
    total: u64,
    correct: u64,
    refused: u64,
    wrong: u64,
}

impl Tally {
    fn add(&mut self, outcome: Outcome) {
        self.total += 1;
        match outcome {
            Outcome::Correct => self.correct += 1,
            Outcome::Refused => self.refused += 1,
            Outcome::Wrong => self.wrong += 1,
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Outcome {
    Correct,
    Refused,
    Wrong,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let verbose = args.iter().any(|a| a == "--verbose");
    // `--show ID`: print the diff between the expected and the produced file for one case.
    let show = args
        .iter()
        .position(|a| a == "--show")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let Some(path) = args
        .iter()
        .enumerate()
        .find(|(i, a)| !a.starts_with("--") && (*i == 0 || args[i - 1] != "--show"))
        .map(|(_, a)| a)
    else {
        eprintln!("usage: bench-edits CORPUS.jsonl [--json] [--verbose] [--show CASE_ID]");
        return ExitCode::from(2);
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: cannot open {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut all = Tally::default();
    let mut answered = Tally::default();
    let mut by_kind: BTreeMap<String, Tally> = BTreeMap::new();
    let start = std::time::Instant::now();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: reading {path}: {e}");
                return ExitCode::from(2);
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let case: Case = match serde_json::from_str(&line) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {path}:{}: {e}", n + 1);
                return ExitCode::from(2);
            }
        };
        let result = apply_edit(case.before.as_bytes(), &case.old_text, &case.new_text);
        let outcome = match (&result, &case.expected) {
            (Ok(a), Some(exp)) if a.content == exp.as_bytes() => Outcome::Correct,
            (Ok(_), _) => Outcome::Wrong,
            (Err(_), None) => Outcome::Correct,
            (Err(_), Some(_)) => Outcome::Refused,
        };
        if verbose && outcome != Outcome::Correct {
            let what = match &result {
                Ok(a) => format!("applied as {:?} at line {}", a.kind, a.start_line),
                Err(r) => format!("refused: {}", r.message.lines().next().unwrap_or("")),
            };
            eprintln!("{} [{}] {what}", case.id, case.kind);
        }
        if show.as_deref() == Some(case.id.as_str()) {
            let got = match &result {
                Ok(a) => String::from_utf8_lossy(&a.content).into_owned(),
                Err(r) => format!("(refused) {}", r.message),
            };
            let want = case
                .expected
                .clone()
                .unwrap_or_else(|| "(refusal expected)".into());
            let diff = similar::TextDiff::from_lines(&want, &got);
            eprintln!("--- expected\n+++ produced");
            eprint!("{}", diff.unified_diff().context_radius(2));
        }
        all.add(outcome);
        if case.expected.is_some() {
            answered.add(outcome);
        }
        by_kind.entry(case.kind).or_default().add(outcome);
    }
    let elapsed = start.elapsed();
    if json {
        let v = serde_json::json!({
            "total": all.total, "correct": all.correct, "refused": all.refused, "wrong": all.wrong,
            "by_kind": by_kind,
        });
        println!("{v}");
    } else {
        println!(
            "{:<12} {:>6} {:>8} {:>8} {:>6}",
            "kind", "total", "correct", "refused", "wrong"
        );
        for (k, t) in &by_kind {
            println!(
                "{k:<12} {:>6} {:>8} {:>8} {:>6}",
                t.total, t.correct, t.refused, t.wrong
            );
        }
        println!(
            "{:<12} {:>6} {:>8} {:>8} {:>6}",
            "all", all.total, all.correct, all.refused, all.wrong
        );
        let pct = |t: &Tally| {
            if t.total == 0 {
                0.0
            } else {
                100.0 * t.correct as f64 / t.total as f64
            }
        };
        println!(
            "applied correctly over cases with an answer: {:.2}% ({}/{}); wrong: {}; {} cases in {:.2?}",
            pct(&answered),
            answered.correct,
            answered.total,
            all.wrong,
            all.total,
            elapsed
        );
    }
    ExitCode::SUCCESS
}
