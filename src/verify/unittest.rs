//! Python's `unittest` text runner (also nose2's and Django's `manage.py test`, which print
//! the same): with `-v`, one `description ... status` line per test; with or without it, a
//! `FAIL:`/`ERROR:` section per failure and the `Ran N tests` footer.
//!
//! A test is named by its id, `package.module.Class.method`, whichever form the Python version
//! prints: `test_add (tests.test_calc.AddTest)` before 3.11, `test_add
//! (tests.test_calc.AddTest.test_add)` from 3.11 on; nose2's function tests print the id alone
//! (`tests.test_funcs.test_plain`, `…test_generator:2`). A module that fails to import is named
//! by the module (`tests.test_broken`), without the loader's wrapper class.

use std::collections::BTreeSet;

use regex::Regex;

use super::report::{Acc, Counts, Format, TestReport, num, re};

/// Wrappers the loaders put around a module that fails to import.
const IMPORT_FAILURE: [&str; 2] = [
    "unittest.loader._FailedTest.",
    "nose2.loader.ModuleImportFailure.",
];

struct Patterns {
    /// `method (dotted.id)`, optionally followed by a subtest's `(params)`.
    classic: Regex,
    /// nose2's function tests: `pkg.mod.func` or `pkg.mod.func:N`.
    bare: Regex,
}

impl Patterns {
    fn new() -> Self {
        Patterns {
            classic: re(r"^\s*(\S+) \(([A-Za-z_][\w.]*)\)(?: \(.*\))?$"),
            bare: re(r"^([A-Za-z_]\w*(?:\.\w+)+(?::\d+)?)$"),
        }
    }

    /// The test id a description names, if it names one.
    fn id(&self, desc: &str) -> Option<String> {
        let id = if let Some(c) = self.classic.captures(desc) {
            let (method, within) = (&c[1], &c[2]);
            if within == method || within.ends_with(&format!(".{method}")) {
                within.to_owned()
            } else {
                format!("{within}.{method}")
            }
        } else {
            self.bare.captures(desc.trim())?[1].to_owned()
        };
        Some(
            IMPORT_FAILURE
                .iter()
                .find_map(|w| id.strip_prefix(w))
                .map_or(id.clone(), str::to_owned),
        )
    }
}

#[derive(Clone, Copy)]
enum Status {
    Pass,
    Fail,
    Skip,
}

fn status(text: &str) -> Option<Status> {
    match text.trim() {
        "ok" => Some(Status::Pass),
        "FAIL" | "ERROR" | "unexpected success" => Some(Status::Fail),
        "expected failure" => Some(Status::Skip),
        t if t.starts_with("skipped") => Some(Status::Skip),
        _ => None,
    }
}

fn record(acc: &mut Acc, id: String, s: Status) {
    acc.lists_passes = true;
    match s {
        Status::Pass => acc.pass(id),
        Status::Fail => acc.fail(id),
        Status::Skip => acc.skip(id),
    }
}

pub(super) fn parse_unittest(text: &str) -> Option<TestReport> {
    let p = Patterns::new();
    let ran = re(r"^Ran (\d+) tests? in ");
    let outcome = re(r"^(?:OK|FAILED)(?: \((.*)\))?$");
    let section = re(r"^(FAIL|ERROR): (.+)$");
    let mut acc = Acc::default();
    // A description whose status has not been printed yet: a docstring line, the test's own
    // output or its subtests come first.
    let mut pending: Option<String> = None;
    let mut in_sections = false;
    // The failure section being read: its test and text, and whether the `---` under its
    // header has passed.
    let mut block: Option<(String, String, bool)> = None;
    let mut section_failures: BTreeSet<String> = BTreeSet::new();
    let mut total: Option<u64> = None;
    let mut footer = Counts::default();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        if l.starts_with("======") {
            in_sections = true;
            if let Some((id, body, _)) = block.take() {
                acc.detail(&id, &body);
            }
            if let Some(c) = lines.peek().and_then(|n| section.captures(n))
                && let Some(id) = p.id(&c[2])
            {
                lines.next();
                acc.fail(id.clone());
                section_failures.insert(id.clone());
                block = Some((id, String::new(), false));
            }
            continue;
        }
        if l.starts_with("------") {
            match &mut block {
                Some((_, _, under @ false)) => *under = true,
                Some(_) if lines.peek().is_some_and(|n| ran.is_match(n)) => {
                    if let Some((id, body, _)) = block.take() {
                        acc.detail(&id, &body);
                    }
                }
                _ => {}
            }
            continue;
        }
        if let Some(c) = ran.captures(l) {
            total = Some(num(&c[1]));
            continue;
        }
        if let Some(c) = outcome.captures(l) {
            for item in c.get(1).map_or("", |m| m.as_str()).split(", ") {
                let Some((key, n)) = item.split_once('=') else {
                    continue;
                };
                let n = num(n);
                match key {
                    "failures" | "errors" | "unexpected successes" => footer.failed += n,
                    "skipped" | "expected failures" => footer.skipped += n,
                    _ => {}
                }
            }
            continue;
        }
        if let Some((_, body, under)) = &mut block {
            if *under {
                body.push_str(l);
                body.push('\n');
            }
            continue;
        }
        if in_sections {
            continue;
        }
        // ` ...` ends a description; a line ending in it waits for the test's output, its
        // subtests or (before 3.11, after failing subtests) the next test's description.
        let tokens: Vec<&str> = l.split(" ...").collect();
        if tokens.len() == 1 {
            if let Some(id) = p.id(l) {
                pending = Some(id);
            } else if let Some(s) = status(l)
                && let Some(id) = pending.take()
            {
                record(&mut acc, id, s);
            }
            continue;
        }
        let (last, descs) = tokens.split_last().unwrap_or((&"", &[]));
        let mut current = None;
        for (i, d) in descs.iter().enumerate() {
            // The first may be the docstring line of the description above it.
            let id = match p.id(d) {
                Some(id) => Some(id),
                None if i == 0 => pending.take(),
                None => None,
            };
            // Before 3.11 a test whose subtests failed prints no status of its own before
            // the next description; its `FAIL:` section names it.
            current = id;
        }
        pending = None;
        if let Some(id) = current {
            match status(last) {
                Some(s) => record(&mut acc, id, s),
                None => pending = Some(id),
            }
        }
    }
    if let Some((id, body, _)) = block {
        acc.detail(&id, &body);
    }
    let total = total?;
    if !acc.lists_passes {
        // Without `-v` only failures are named; the rest are counted.
        // The footer counts each failing subtest: a test may stand for several failures, and
        // a run whose footer counts more failures than it names does not name them all.
        let failed = footer.failed.max(section_failures.len() as u64);
        acc.declare(Counts {
            passed: total.saturating_sub(failed + footer.skipped),
            failed,
            skipped: footer.skipped,
        });
    }
    acc.seen = true;
    acc.finish(Format::Unittest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::{Names, Runner, parse_output};

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    // `testdata/unittest_py3*.txt`: `python3 -m unittest -v` on the same project under
    // CPython 3.10.13, 3.11.7 and 3.12.1; `unittest_plain.txt` without `-v`; `nose2.txt`: `nose2 -v` (nose2 0.16, CPython 3.11)
    // with function and generator tests added. See testdata/README.md.

    const FAILED: [&str; 4] = [
        "tests.test_broken",
        "tests.test_calc.AddTest.test_add",
        "tests.test_calc.AddTest.test_error",
        "tests.test_calc.AddTest.test_params",
    ];
    const PASSED: [&str; 3] = [
        "tests.test_calc.AddTest.test_add_zero",
        "tests.test_calc.SubTest.test_sub",
        "tests.test_other.AddTest.test_add",
    ];

    #[test]
    fn unittest_verbose_names_are_the_same_before_and_after_python_3_11() {
        for (version, out) in [
            ("3.10", include_str!("testdata/unittest_py310.txt")),
            ("3.11", include_str!("testdata/unittest_py311.txt")),
        ] {
            let r = parse_output(None, out).unwrap();
            assert_eq!(r.format, Format::Unittest, "{version}");
            assert_eq!(r.names, Names::Full, "{version}");
            assert_eq!(r.failed, set(&FAILED), "{version}");
            assert_eq!(r.passed, set(&PASSED), "{version}");
            assert_eq!(
                r.skipped,
                set(&[
                    "tests.test_calc.SubTest.test_known_bug",
                    "tests.test_calc.SubTest.test_skipped"
                ]),
                "{version}"
            );
            let d = &r.details["tests.test_calc.AddTest.test_add"];
            assert!(d.contains("AssertionError: -1 != 5"), "{version}: {d}");
            assert!(!d.contains("KeyError"), "{version}: {d}");
            assert!(
                r.details["tests.test_calc.AddTest.test_params"].contains("0 != 2"),
                "{version}"
            );
            assert!(
                r.details["tests.test_broken"].contains("No module named 'missing_module'"),
                "{version}"
            );
        }
    }

    #[test]
    fn unittest_3_12_1_skip_line_without_its_description_is_not_a_test() {
        // CPython 3.12.1 prints a skipped test's status without its description.
        let r = parse_output(None, include_str!("testdata/unittest_py312.txt")).unwrap();
        assert_eq!(r.names, Names::Full);
        assert_eq!((r.failed, r.passed), (set(&FAILED), set(&PASSED)));
        assert_eq!(r.skipped, set(&["tests.test_calc.SubTest.test_known_bug"]));
    }

    #[test]
    fn unittest_without_verbose_names_failures_only() {
        let r = parse_output(
            Some(Runner::Unittest),
            include_str!("testdata/unittest_plain.txt"),
        )
        .unwrap();
        assert_eq!(r.format, Format::Unittest);
        assert_eq!(r.names, Names::FailedOnly);
        assert_eq!(r.failed, set(&FAILED));
        assert!(r.passed.is_empty());
        assert_eq!(
            r.counts,
            Counts {
                passed: 3,
                failed: 4,
                skipped: 2
            }
        );
    }

    #[test]
    fn nose2_verbose_names_function_and_generator_tests() {
        let r = parse_output(None, include_str!("testdata/nose2.txt")).unwrap();
        assert_eq!(r.format, Format::Unittest);
        assert_eq!(r.names, Names::Full);
        let mut failed = set(&FAILED);
        failed.extend(set(&[
            "tests.test_funcs.test_plain_function",
            "tests.test_funcs.test_generator:2",
        ]));
        assert_eq!(r.failed, failed);
        let mut passed = set(&PASSED);
        passed.insert("tests.test_funcs.test_generator:1".to_owned());
        assert_eq!(r.passed, passed);
        assert!(r.details["tests.test_funcs.test_plain_function"].contains("AssertionError"));
    }
}
