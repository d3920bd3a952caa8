//! Cutting a CI job's log down to its failure.
//!
//! GitHub Actions logs are long, timestamped and full of set-up noise. The model needs the
//! lines around the first error and the end of the log, within a byte budget.

use std::sync::LazyLock;

use regex::Regex;

#[allow(clippy::expect_used)]
static TIMESTAMP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z ").expect("a constant regex compiles")
});
#[allow(clippy::expect_used)]
static ANSI: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\x1b\[[0-9;?]*[A-Za-z]").expect("a constant regex compiles"));
#[allow(clippy::expect_used)]
static FAILURE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?x)
        ^\#\#\[error\]
        | \berror(\[E\d+\])?:
        | \bFAILED\b | \bFAIL\b
        | panicked\ at
        | ^Traceback\ \(most\ recent
        | \bAssertionError\b
        | ^failures:
        | npm\ ERR!
        | \bERROR\b
        | Process\ completed\ with\ exit\ code\ [1-9]",
    )
    .expect("a constant regex compiles")
});

/// Lines of context kept before the first failure line.
const CONTEXT_BEFORE: usize = 20;

/// Cut `log` to what explains the failure: from a little before the first failure line to
/// the end, at most `max_lines` lines and `max_bytes` bytes (head and tail kept, the middle
/// replaced by a note). Timestamps, colour codes and group markers are removed.
pub fn cut_to_failure(log: &str, max_lines: usize, max_bytes: usize) -> String {
    let lines: Vec<String> = log
        .lines()
        .map(|l| {
            let l = TIMESTAMP.replace(l, "");
            ANSI.replace_all(&l, "").into_owned()
        })
        .filter(|l| !l.starts_with("##[group]") && !l.starts_with("##[endgroup]"))
        .collect();
    let first_failure = lines.iter().position(|l| FAILURE.is_match(l));
    let start = match first_failure {
        Some(i) => i.saturating_sub(CONTEXT_BEFORE),
        None => lines.len().saturating_sub(max_lines),
    };
    let window = &lines[start..];
    let max_lines = max_lines.max(2);
    let kept: Vec<String> = if window.len() > max_lines {
        let head = max_lines / 2;
        let tail = max_lines - head;
        let mut v = window[..head].to_vec();
        v.push(format!("… {} lines cut …", window.len() - head - tail));
        v.extend_from_slice(&window[window.len() - tail..]);
        v
    } else {
        window.to_vec()
    };
    let mut text = kept.join("\n");
    if text.len() > max_bytes {
        // Keep the head (the first error) and the tail (the summary), cut on char boundaries.
        let half = max_bytes / 2;
        let mut head_end = half.min(text.len());
        while !text.is_char_boundary(head_end) {
            head_end -= 1;
        }
        let mut tail_start = text.len().saturating_sub(half);
        while !text.is_char_boundary(tail_start) {
            tail_start += 1;
        }
        let cut = tail_start.saturating_sub(head_end);
        text = format!(
            "{}\n… {cut} bytes cut …\n{}",
            &text[..head_end],
            &text[tail_start..]
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_error_and_the_end() {
        let mut log = String::new();
        for i in 0..500 {
            log.push_str(&format!("2024-05-01T10:00:00.1234567Z setup line {i}\n"));
        }
        log.push_str("2024-05-01T10:00:01.0000000Z error[E0308]: mismatched types\n");
        for i in 0..300 {
            log.push_str(&format!("2024-05-01T10:00:02.0000000Z detail {i}\n"));
        }
        log.push_str("##[error]Process completed with exit code 101.\n");
        let cut = cut_to_failure(&log, 100, 64 * 1024);
        assert!(cut.contains("error[E0308]: mismatched types"));
        assert!(cut.contains("Process completed with exit code 101"));
        assert!(cut.contains("setup line 499"), "context before the failure");
        assert!(!cut.contains("setup line 100"));
        assert!(!cut.contains("2024-05-01T"), "timestamps removed");
        assert!(cut.contains("lines cut"));
        assert!(cut.lines().count() <= 101);
    }

    #[test]
    fn byte_budget_holds_on_multibyte_text() {
        let log = "ERROR ".to_string() + &"é".repeat(10_000);
        let cut = cut_to_failure(&log, 1000, 1000);
        assert!(cut.len() <= 1100);
        assert!(cut.contains("bytes cut"));
    }

    #[test]
    fn without_a_failure_line_the_tail_is_kept() {
        let log: String = (0..50).map(|i| format!("line {i}\n")).collect();
        let cut = cut_to_failure(&log, 10, 10_000);
        assert!(cut.starts_with("line 40"));
        assert!(cut.ends_with("line 49"));
    }
}
