//! mocha's spec reporter (its default): a tree of `describe` titles with `✔ title` for a
//! passing test, `N) title` for a failing one and `- title` for a pending one, then the
//! `N passing` / `N pending` / `N failing` footer and one numbered section per failure.
//!
//! Names are the titles from the outermost `describe` down, joined with ` > `, like node's
//! spec reporter: `calc > add > adds two numbers`. A failing hook is named the way mocha names
//! it (`calc > "before each" hook for "adds"`). The reporter prints no file names, so two
//! tests with the same titles in two files are one name, as they are to mocha's own `--grep`.

use super::report::{Acc, Counts, Format, TestReport, num, re};

pub(super) fn parse_mocha(text: &str) -> Option<TestReport> {
    // `✔` (mocha ≥ 10), `✓` (older), `√` (Windows); slow tests get `(123ms)`.
    let pass = re(r"^(\s+)(?:✔|✓|√) (.+?)(?: \(\d+ms\))?$");
    let fail = re(r"^(\s+)(\d+)\) (.+)$");
    let pending = re(r"^(\s+)- (.+)$");
    let suite = re(r"^( {2,})(\S.*)$");
    let footer = re(r"^\s+(\d+) (passing|pending|failing)(?: \([\d.]+m?s?\))?\s*$");
    let section = re(r"^  (\d+)\) (.+)$");

    let mut acc = Acc {
        lists_passes: true,
        ..Acc::default()
    };
    let mut declared = Counts::default();
    let mut in_footer = false;
    let mut suites: Vec<(usize, String)> = Vec::new();
    // Failure number → name, from the tree.
    let mut numbered: Vec<(String, String)> = Vec::new();
    // The failure section being read: its number, title lines, body.
    let mut block: Option<(String, Vec<String>, String, bool)> = None;

    let name_of = |suites: &[(usize, String)], title: &str| {
        let mut parts: Vec<&str> = suites.iter().map(|(_, s)| s.as_str()).collect();
        parts.push(title);
        parts.join(" > ")
    };

    for l in text.lines() {
        if let Some(c) = footer.captures(l) {
            in_footer = true;
            let n = num(&c[1]);
            match &c[2] {
                "passing" => declared.passed = n,
                "failing" => declared.failed = n,
                _ => declared.skipped = n,
            }
            continue;
        }
        if !in_footer {
            if let Some(c) = pass.captures(l) {
                let indent = c[1].len();
                suites.retain(|(i, _)| *i < indent);
                acc.pass(name_of(&suites, &c[2]));
            } else if let Some(c) = fail.captures(l) {
                let indent = c[1].len();
                suites.retain(|(i, _)| *i < indent);
                let name = name_of(&suites, &c[3]);
                numbered.push((c[2].to_owned(), name.clone()));
                acc.fail(name);
            } else if let Some(c) = pending.captures(l) {
                let indent = c[1].len();
                suites.retain(|(i, _)| *i < indent);
                acc.skip(name_of(&suites, &c[2]));
            } else if let Some(c) = suite.captures(l) {
                let indent = c[1].len();
                suites.retain(|(i, _)| *i < indent);
                suites.push((indent, c[2].trim_end().to_owned()));
            }
            continue;
        }
        // After the footer: `  1) calc` opens the section of failure 1; its title lines run
        // to the one ending in `:`, then comes the error.
        if let Some(c) = section.captures(l) {
            if let Some(b) = block.take() {
                finish_section(&mut acc, &numbered, b);
            }
            let title = c[2].to_owned();
            let done = title.ends_with(':');
            block = Some((c[1].to_owned(), vec![title], String::new(), done));
            continue;
        }
        if let Some((_, titles, body, titles_done)) = &mut block {
            if *titles_done {
                body.push_str(l);
                body.push('\n');
            } else {
                let t = l.trim();
                *titles_done = t.ends_with(':');
                titles.push(t.to_owned());
            }
        }
    }
    if let Some(b) = block.take() {
        finish_section(&mut acc, &numbered, b);
    }
    if !in_footer {
        return None;
    }
    acc.declare(declared);
    acc.finish(Format::Mocha)
}

/// Files a failure section's text under its test: by number, or by its title lines when the
/// tree did not show that failure (a hook that failed after its tests were reported).
fn finish_section(
    acc: &mut Acc,
    numbered: &[(String, String)],
    (number, titles, body, _): (String, Vec<String>, String, bool),
) {
    let name = match numbered.iter().find(|(n, _)| *n == number) {
        Some((_, name)) => name.clone(),
        None => {
            let joined = titles.join(" > ");
            let name = joined.strip_suffix(':').unwrap_or(&joined).to_owned();
            acc.fail(name.clone());
            name
        }
    };
    acc.detail(&name, &body);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::{Names, Runner, parse_output};
    use std::collections::BTreeSet;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    // `testdata/mocha_*.txt`: mocha 12.0.3 (default spec reporter, not on a terminal) on node
    // 20; see testdata/README.md.

    #[test]
    fn mocha_spec_names_nested_describes_failures_and_pending() {
        let r = parse_output(Some(Runner::Npm), include_str!("testdata/mocha_spec.txt")).unwrap();
        assert_eq!(r.format, Format::Mocha);
        assert_eq!(r.names, Names::Full);
        assert_eq!(
            r.passed,
            set(&[
                "top level test",
                "calc > add > adds zero",
                "calc > sub > subtracts two numbers",
                "other > adds two numbers",
            ])
        );
        assert_eq!(
            r.failed,
            set(&[
                "calc > add > adds two numbers",
                "calc > sub > works asynchronously"
            ])
        );
        assert_eq!(r.skipped, set(&["calc > sub > subtracts big numbers"]));
        assert_eq!(
            r.counts,
            Counts {
                passed: 4,
                failed: 2,
                skipped: 1
            }
        );
        let d = &r.details["calc > add > adds two numbers"];
        assert!(d.contains("-1 !== 5"), "{d}");
        assert!(d.contains("test/calc.test.js:7:14"), "{d}");
        let d = &r.details["calc > sub > works asynchronously"];
        assert!(d.contains("a: 0"), "{d}");
        assert!(!d.contains("-1 !== 5"), "{d}");
    }

    #[test]
    fn mocha_hook_failure_and_slow_test() {
        let r = parse_output(None, include_str!("testdata/mocha_hook.txt")).unwrap();
        assert_eq!(r.format, Format::Mocha);
        assert_eq!(r.names, Names::Full);
        assert_eq!(r.passed, set(&["slow > takes a while"]));
        assert_eq!(
            r.failed,
            set(&[
                "with a broken fixture > \"before each\" hook for \"never runs\"",
                "slow > adds"
            ])
        );
        assert!(
            r.details["with a broken fixture > \"before each\" hook for \"never runs\""]
                .contains("fixture could not be created")
        );
        assert!(r.details["slow > adds"].contains("0 == 2"));
    }

    #[test]
    fn mocha_run_where_everything_passes() {
        let r = parse_output(None, include_str!("testdata/mocha_pass.txt")).unwrap();
        assert_eq!(r.format, Format::Mocha);
        assert_eq!(r.names, Names::Full);
        assert_eq!(
            r.passed,
            set(&["top level test", "other > adds two numbers"])
        );
        assert!(r.failed.is_empty());
        assert_eq!(r.counts.passed, 2);
    }

    /// Durations change between runs; names must not.
    #[test]
    fn mocha_names_are_the_same_in_two_runs() {
        let one = parse_output(None, include_str!("testdata/mocha_hook.txt")).unwrap();
        let two = parse_output(None, include_str!("testdata/mocha_hook_run2.txt")).unwrap();
        assert_ne!(
            include_str!("testdata/mocha_hook.txt"),
            include_str!("testdata/mocha_hook_run2.txt")
        );
        assert_eq!(
            (&one.passed, &one.failed, &one.details),
            (&two.passed, &two.failed, &two.details)
        );
    }

    #[test]
    fn mocha_failure_missing_from_the_tree_is_named_from_its_section() {
        // The real run's tree without its failure lines: the sections still name them.
        let text = include_str!("testdata/mocha_spec.txt")
            .replace("      1) adds two numbers\n", "")
            .replace("      2) works asynchronously\n", "");
        let r = parse_output(None, &text).unwrap();
        assert_eq!(
            r.failed,
            set(&[
                "calc > add > adds two numbers",
                "calc > sub > works asynchronously"
            ])
        );
        assert!(r.details["calc > add > adds two numbers"].contains("-1 !== 5"));
    }
}
