//! The failure summary handed to the model: which tests fail and the lines that say why,
//! within a byte budget, instead of the whole log.

use regex::Regex;

use super::report::{TestReport, strip_ansi};

/// At most this many failing tests are listed by name; the rest are counted.
const MAX_LISTED: usize = 30;
/// At most this many bytes of detail per failing test before the budget is shared out.
const PER_TEST: usize = 1500;

/// A focused summary of a failed test run, at most `budget` bytes.
///
/// With a report: counts, the failing tests by name, then for each the decisive lines of its
/// failure (assertion messages, panics, the last frames of tracebacks, expected/received).
/// Without one, or when no failing test is named (build errors, crashes): the decisive lines
/// of the whole output (compiler errors with their locations, panics, exceptions) and its last
/// lines.
pub fn failure_summary(report: Option<&TestReport>, output: &str, budget: usize) -> String {
    let mut out = Budget::new(budget);
    let text = without_passes(&strip_ansi(output));
    if let Some(r) = report {
        out.push(&format!(
            "{} passed, {} failed, {} skipped ({:?} output)\n",
            r.counts.passed, r.counts.failed, r.counts.skipped, r.format
        ));
        if !r.failed.is_empty() {
            out.push("Failing tests:\n");
            for name in r.failed.iter().take(MAX_LISTED) {
                out.push(&format!("- {name}\n"));
            }
            if r.failed.len() > MAX_LISTED {
                out.push(&format!("- … and {} more\n", r.failed.len() - MAX_LISTED));
            }
            let named = r
                .failed
                .iter()
                .filter(|n| r.details.contains_key(*n))
                .count();
            let share = out
                .remaining()
                .checked_div(named)
                .map_or(0, |s| s.clamp(200, PER_TEST));
            for name in r.failed.iter() {
                let Some(detail) = r.details.get(name) else {
                    continue;
                };
                if out.full() {
                    break;
                }
                // A test's own failure text is already focused: drop the noise, and filter
                // down to decisive lines only when it is still too long.
                let condensed = drop_noise(detail);
                let body = if condensed.len() <= share {
                    condensed
                } else {
                    let lines = decisive_lines(&condensed);
                    if lines.is_empty() {
                        condensed
                    } else {
                        lines.join("\n")
                    }
                };
                out.push(&format!("\n--- {name}\n"));
                out.push(&cut(&body, share));
                out.push("\n");
            }
            if named > 0 {
                return out.finish();
            }
        }
    }
    // No per-test details: say what the output itself says.
    let lines = decisive_lines(&text);
    if !lines.is_empty() {
        out.push("Decisive lines of the output:\n");
        let tail_reserve = out.remaining() / 4;
        out.push(&cut(
            &lines.join("\n"),
            out.remaining().saturating_sub(tail_reserve),
        ));
        out.push("\n");
    }
    // The lines after the last decisive one (all of the last lines when none was found):
    // nothing when the output ends in a traceback or a compiler error.
    let all: Vec<&str> = text.lines().collect();
    let decisive: std::collections::HashSet<&str> = lines.iter().map(String::as_str).collect();
    let after_last = all
        .iter()
        .rposition(|l| decisive.contains(l))
        .map_or(0, |p| p + 1);
    let tail: Vec<&str> = all[after_last.max(all.len().saturating_sub(15))..]
        .iter()
        .copied()
        .filter(|l| !l.trim().is_empty())
        .collect();
    if !tail.is_empty() && !out.full() {
        out.push("Last lines of the output:\n");
        let remaining = out.remaining();
        out.push(&cut_from_end(&tail.join("\n"), remaining));
        out.push("\n");
    }
    out.finish()
}

/// The output without the lines that report a passing test: they never say why something
/// failed, and with pytest's `-rA` (which the detected command adds) or a verbose runner they
/// fill the decisive lines (`PASSED …test_expected_value`) and the tail of a long run.
fn without_passes(text: &str) -> String {
    let pass = Regex::new(
        r"(?x)
        ^PASSED\ \S                                 # pytest -rA short summary
        | ^\S+::\S.*\ PASSED(\s+\[\s*\d+%\])?$         # pytest -v
        | ^test\ .+\ \.\.\.\ ok$                       # libtest
        | ^\s*---\ PASS:\ \S                           # go test -v
        | \ \.\.\.\ ok$                                # unittest -v
        ",
    );
    let Ok(pass) = pass else {
        return text.to_owned();
    };
    let mut out = String::with_capacity(text.len());
    for l in text.lines().filter(|l| !pass.is_match(l)) {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// A string builder that never exceeds its byte budget.
struct Budget {
    text: String,
    budget: usize,
    cut: bool,
}

impl Budget {
    fn new(budget: usize) -> Self {
        Budget {
            text: String::new(),
            budget,
            cut: false,
        }
    }
    /// Bytes left, keeping room for the cut marker.
    fn remaining(&self) -> usize {
        self.budget.saturating_sub(self.text.len() + CUT.len())
    }
    fn full(&self) -> bool {
        self.cut || self.remaining() == 0
    }
    fn push(&mut self, s: &str) {
        if self.cut {
            return;
        }
        if s.len() <= self.remaining() {
            self.text.push_str(s);
        } else {
            let keep = floor_char_boundary(s, self.remaining());
            self.text.push_str(&s[..keep]);
            self.cut = true;
        }
    }
    fn finish(mut self) -> String {
        if self.cut && self.text.len() + CUT.len() <= self.budget {
            self.text.push_str(CUT);
        }
        if self.text.len() > self.budget {
            let keep = floor_char_boundary(&self.text, self.budget);
            self.text.truncate(keep);
        }
        self.text
    }
}

const CUT: &str = "\n… (cut to fit)";

fn floor_char_boundary(s: &str, max: usize) -> usize {
    let mut i = max.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let marker = " …";
    let keep = floor_char_boundary(s, max.saturating_sub(marker.len()));
    format!("{}{marker}", &s[..keep])
}

fn cut_from_end(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut start = s.len() - max.saturating_sub(2);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…\n{}", &s[start..])
}

/// A failure's text without what never helps: runtime-internal stack frames (all but the
/// first frame of a JS stack), backtrace hints, blank-line runs.
fn drop_noise(detail: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let mut in_stack = false;
    for l in detail.lines() {
        let t = l.trim_start();
        if t.starts_with("at ") {
            if in_stack || t.contains("node:") || t.contains("node_modules") {
                continue;
            }
            in_stack = true;
            out.push(l);
            continue;
        }
        in_stack = false;
        if t.starts_with("note: run with `RUST_BACKTRACE=1`") {
            continue;
        }
        if t.is_empty() && out.last().is_none_or(|p| p.trim().is_empty()) {
            continue;
        }
        out.push(l);
    }
    out.join("\n").trim_end().to_owned()
}

/// The lines of a failure that say what went wrong, in order, without duplicates.
fn decisive_lines(text: &str) -> Vec<String> {
    let decisive = Regex::new(
        r"(?x)
        ^error(\[E\d+\])?: | ^\s*-->\s | ^\S+\.\w+:\d+:\d+:\s | panicked\ at | assertion | ^\s*(left|right):
        | ^E\s | ^\S+\.py:\d+:\s | Error(?-u:\b) | Exception(?-u:\b) | ^\s*raise\s
        | [Ee]xpected | [Rr]eceived | (?-u:\b)want(?-u:\b) | (?-u:\b)got(?-u:\b) | but\ was
        | ^\s*>\s*\d+\s*\| | ^\s*>\s | _test\.go:\d+: | ^\s+at\s.*:\d+:\d+\)?$
        | (?-u:\b)FAIL(ED)?(?-u:\b) | ✕ | ×
        | Segmentation\ fault | core\ dumped | ^Killed | Aborted | [Oo]ut\ of\ memory | [Tt]imed?\ ?out
        ",
    );
    let Ok(decisive) = decisive else {
        return Vec::new();
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut keep = vec![false; lines.len()];
    let mut seen_js_frame = false;
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.starts_with("Traceback (most recent call last)") {
            // Keep the last frame and the exception, not the whole stack.
            let mut j = i + 1;
            let mut last_frame = None;
            while j < lines.len() && (lines[j].starts_with(' ') || lines[j].is_empty()) {
                if lines[j].trim_start().starts_with("File \"") {
                    last_frame = Some(j);
                }
                j += 1;
            }
            keep[i] = true;
            if let Some(f) = last_frame {
                for k in f..j.min(f + 3) {
                    keep[k] = !lines[k].trim().is_empty();
                }
            }
            if j < lines.len() {
                keep[j] = true;
            }
            i = j + 1;
            continue;
        }
        let is_js_frame = l.trim_start().starts_with("at ");
        if is_js_frame {
            // Only the first frame of a JS stack matters; runtime internals never do.
            if !seen_js_frame && !l.contains("node:") && !l.contains("node_modules") {
                keep[i] = true;
                seen_js_frame = true;
            }
            i += 1;
            continue;
        }
        seen_js_frame = false;
        if decisive.is_match(l) {
            keep[i] = true;
            // A compiler error's location and source lines follow it.
            if l.starts_with("error") {
                for k in i + 1..(i + 6).min(lines.len()) {
                    if lines[k].trim().is_empty() {
                        break;
                    }
                    keep[k] = true;
                }
            }
        }
        i += 1;
    }
    let mut seen = std::collections::HashSet::new();
    let mut out: Vec<String> = Vec::new();
    for (l, k) in lines.iter().zip(keep) {
        if k && seen.insert(*l) {
            out.push((*l).to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::parse_output;

    #[test]
    fn summary_names_failures_and_their_decisive_lines() {
        let out = include_str!("testdata/cargo_two_binaries.txt");
        let r = parse_output(None, out).unwrap();
        let s = failure_summary(Some(&r), out, 2000);
        assert!(
            s.starts_with("2 passed, 1 failed, 0 skipped (Cargo output)\n"),
            "{s}"
        );
        assert!(
            s.contains("- fixture_add(src/lib.rs)::tests::adds_two_numbers\n"),
            "{s}"
        );
        assert!(s.contains("panicked at src/lib.rs:19:9"), "{s}");
        assert!(s.contains("left: -1"), "{s}");
        assert!(!s.contains("RUST_BACKTRACE"), "{s}");
    }

    #[test]
    fn compiler_errors_are_summarised_with_their_location() {
        let out = include_str!("testdata/cargo_compile_error.txt");
        let s = failure_summary(parse_output(None, out).as_ref(), out, 1500);
        assert!(s.contains("error[E0308]: mismatched types"), "{s}");
        assert!(s.contains("--> src/lib.rs:19:31"), "{s}");
        assert!(s.contains("expected `i64`, found `&str`"), "{s}");
    }

    #[test]
    fn python_traceback_keeps_only_the_last_frame() {
        let out = "\
Traceback (most recent call last):
  File \"/usr/lib/python3.11/runpy.py\", line 198, in _run_module_as_main
    return _run_code(code, main_globals, None,
  File \"/work/app/main.py\", line 3, in <module>
    import missing_module
ModuleNotFoundError: No module named 'missing_module'
";
        let s = failure_summary(None, out, 1000);
        assert!(s.contains("File \"/work/app/main.py\", line 3"), "{s}");
        assert!(
            s.contains("ModuleNotFoundError: No module named 'missing_module'"),
            "{s}"
        );
        assert!(!s.contains("runpy.py"), "{s}");
    }

    #[test]
    fn js_stack_keeps_the_first_user_frame() {
        let out = include_str!("testdata/node_spec.txt");
        let r = parse_output(None, out).unwrap();
        let s = failure_summary(Some(&r), out, 1500);
        assert!(s.contains("-1 !== 5"), "{s}");
        assert!(s.contains("calc.test.js:6:10"), "{s}");
        assert!(!s.contains("node:internal"), "{s}");
    }

    /// Guards SECURITY.md 24: megabytes of output, non-UTF-8 and all, give at most the budget.
    #[test]
    fn huge_output_stays_within_the_budget() {
        let mut out = String::new();
        // 1.5 MB: enough to show the cap; parsing runs ~5 µs a line per parser in a debug
        // build, so larger inputs only slow the suite down.
        for i in 0..30_000 {
            out.push_str(&format!(
                "test t{i} ... FAILED\nünïcödé {}\n",
                "x".repeat(i % 50)
            ));
        }
        out.push_str(&String::from_utf8_lossy(b"\xff\xfe binary \x00 junk\n"));
        assert!(out.len() > 1_000_000);
        let r = parse_output(None, &out);
        for budget in [0, 1, 7, 100, 1000, 4096] {
            let s = failure_summary(r.as_ref(), &out, budget);
            assert!(s.len() <= budget, "{} > {budget}", s.len());
        }
        let s = failure_summary(r.as_ref(), &out, 4096);
        assert!(s.contains("… and "), "{s}");
    }

    /// Guards issue 19: the `PASSED` lines that `-rA` adds are not part of a failure excerpt.
    #[test]
    fn pytest_ra_passed_lines_stay_out_of_the_summary() {
        let out = include_str!("testdata/pytest_setup_error.txt");
        let r = parse_output(None, out).unwrap();
        assert_eq!(
            r.failed.iter().collect::<Vec<_>>(),
            ["tests/test_api.py::test_uses_db"]
        );
        let s = failure_summary(Some(&r), out, 2000);
        assert!(
            s.contains("ConnectionError: database is not reachable"),
            "{s}"
        );
        assert!(!s.contains("PASSED"), "{s}");
        // Without a report, too: the fallback's decisive and last lines.
        let s = failure_summary(None, out, 2000);
        assert!(
            s.contains("ConnectionError: database is not reachable"),
            "{s}"
        );
        assert!(s.contains("21 passed, 1 error"), "{s}");
        assert!(!s.contains("PASSED"), "{s}");
    }

    #[test]
    fn unrecognised_output_falls_back_to_decisive_and_last_lines() {
        let out = "step 1\nstep 2\nSegmentation fault (core dumped)\nmake: *** [test] Error 139\n";
        let s = failure_summary(None, out, 1000);
        assert!(s.contains("Decisive lines"), "{s}");
        assert!(s.contains("make: *** [test] Error 139"), "{s}");
        assert!(s.contains("Segmentation fault"), "{s}");
    }
}
