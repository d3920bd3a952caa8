//! ava's default reporter: one line per test (`✔ title`, `✘ [fail]: title message`,
//! `- [skip] title`, `- [todo] title`), then a section per failure between `─` rules, then
//! counts (`2 tests failed`, `1 known failure`, …).
//!
//! Names are ava's own titles: `file › title` when the run has several test files, the bare
//! title when it has one. ava decides that, not us, so a run that adds the project's second
//! test file renames the first file's tests. `ava --tap` prints the same titles as TAP and is
//! read by the TAP parser.

use super::report::{Acc, Format, TestReport, re};

pub(super) fn parse_ava(text: &str) -> Option<TestReport> {
    let pass = re(r"^  ✔ (?:\[expected fail\] )?(.+?)(?: \(\d+(?:\.\d+)?m?s\))?$");
    // A failure line runs the title and the error's message together: `✘ [fail]: t message`.
    let fail = re(r"^  ✘ (?:\[[a-z ]+\]:? )?(.+)$");
    let skip = re(r"^  - \[(?:skip|todo)\] (.+)$");
    let footer = re(
        r"^  \d+ (?:tests? (?:passed|failed|skipped|todo)|known failures?|uncaught exceptions?|unhandled rejections?|tests? remained pending)",
    );
    let rule = "  ─";

    let mut acc = Acc {
        lists_passes: true,
        ..Acc::default()
    };
    let mut fail_lines: Vec<String> = Vec::new();
    let mut saw_footer = false;
    // Failure sections: a title line after a blank line, then the text up to the next title.
    let mut rules = 0;
    let mut sections: Vec<(String, String)> = Vec::new();
    let mut prev_blank = false;
    for l in text.lines() {
        if l == rule {
            rules += 1;
            prev_blank = false;
            continue;
        }
        if footer.is_match(l) {
            saw_footer = true;
        }
        if rules == 1 {
            // Only a failing test's title opens a section: the file:line and diff headings
            // inside one look the same.
            let title = l.strip_prefix("  ").filter(|t| {
                prev_blank
                    && !t.is_empty()
                    && !t.starts_with(' ')
                    && fail_lines
                        .iter()
                        .any(|f| f == t || f.starts_with(&format!("{t} ")))
            });
            match title {
                Some(t) => sections.push((t.to_owned(), String::new())),
                _ => {
                    if let Some((_, body)) = sections.last_mut() {
                        body.push_str(l);
                        body.push('\n');
                    }
                }
            }
            prev_blank = l.trim().is_empty();
            continue;
        }
        if rules > 0 {
            continue;
        }
        if let Some(c) = skip.captures(l) {
            acc.skip(&c[1]);
        } else if let Some(c) = pass.captures(l) {
            acc.pass(&c[1]);
        } else if let Some(c) = fail.captures(l) {
            fail_lines.push(c[1].to_owned());
        }
    }
    if !saw_footer {
        return None;
    }
    // Split each failure line into title and message at the longest section title it starts
    // with; the message (which may change between runs) is not part of the name.
    for line in fail_lines {
        let title = sections
            .iter()
            .map(|(t, _)| t.as_str())
            .filter(|t| line == *t || line.starts_with(&format!("{t} ")))
            .max_by_key(|t| t.len())
            .unwrap_or(line.as_str())
            .to_owned();
        acc.fail(title);
    }
    for (title, body) in &sections {
        if acc.failed.contains(title) {
            acc.detail(title, body);
        }
    }
    acc.finish(Format::Ava)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::{Names, Runner, parse_output};
    use std::collections::BTreeSet;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    // `testdata/ava_*.txt`: ava 7.0.0 on node 20, not on a terminal; see testdata/README.md.

    #[test]
    fn ava_default_reporter_names_every_test() {
        let r = parse_output(Some(Runner::Npm), include_str!("testdata/ava_default.txt")).unwrap();
        assert_eq!(r.format, Format::Ava);
        assert_eq!(r.names, Names::Full);
        assert_eq!(
            r.passed,
            set(&[
                "calc › adds zero",
                "calc › subtracts two numbers",
                "other › adds two numbers"
            ])
        );
        assert_eq!(
            r.failed,
            set(&["calc › adds two numbers", "calc › works asynchronously"])
        );
        assert_eq!(
            r.skipped,
            set(&["calc › subtracts big numbers", "calc › multiplies"])
        );
        let d = &r.details["calc › adds two numbers"];
        assert!(d.contains("test/calc.test.js:5"), "{d}");
        assert!(d.contains("- -1"), "{d}");
        assert!(!d.contains("a: 0"), "{d}");
    }

    /// ava runs tests concurrently: a second run of the same project lists them in another
    /// order, and must give the same names.
    #[test]
    fn ava_names_are_the_same_in_two_runs() {
        let one = parse_output(None, include_str!("testdata/ava_default.txt")).unwrap();
        let two = parse_output(None, include_str!("testdata/ava_default_run2.txt")).unwrap();
        assert_ne!(
            include_str!("testdata/ava_default.txt"),
            include_str!("testdata/ava_default_run2.txt")
        );
        assert_eq!(
            (&one.passed, &one.failed, &one.skipped, &one.details),
            (&two.passed, &two.failed, &two.skipped, &two.details)
        );
    }

    #[test]
    fn ava_run_where_everything_passes() {
        let r = parse_output(None, include_str!("testdata/ava_pass.txt")).unwrap();
        assert_eq!(r.format, Format::Ava);
        assert_eq!(r.names, Names::Full);
        assert_eq!(r.passed, set(&["adds two numbers"]));
        assert!(r.failed.is_empty() && r.skipped.is_empty());
    }

    #[test]
    fn ava_failure_message_is_not_part_of_the_name() {
        let r = parse_output(None, include_str!("testdata/ava_misc.txt")).unwrap();
        assert_eq!(r.format, Format::Ava);
        assert_eq!(r.failed, set(&["throws", "fails with message"]));
        assert_eq!(r.passed, set(&["known bug", "slow one"]));
        assert!(r.details["throws"].contains("message: 'boom'"));
        assert!(r.details["fails with message"].contains("custom message"));
    }

    #[test]
    fn ava_tap_gives_the_same_names_as_the_default_reporter() {
        let tap = parse_output(None, include_str!("testdata/ava_tap.txt")).unwrap();
        let default = parse_output(None, include_str!("testdata/ava_default.txt")).unwrap();
        assert_eq!(tap.names, Names::Full);
        assert_eq!(
            (&tap.passed, &tap.failed, &tap.skipped),
            (&default.passed, &default.failed, &default.skipped)
        );
        assert!(tap.details["calc › adds two numbers"].contains("- -1"));
    }
}
