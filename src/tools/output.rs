//! Sizing output for a model: long text is cut to its head and tail with a note of what was cut.

/// Limits on what one tool call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// Largest result in bytes.
    pub max_bytes: usize,
    /// Longest single line shown, in characters.
    pub max_line_chars: usize,
}

impl Default for OutputLimits {
    fn default() -> Self {
        Self {
            max_bytes: 24 * 1024,
            max_line_chars: 400,
        }
    }
}

/// `text` if it fits in `max_bytes`, else its first and last lines (about 60% / 40% of the
/// budget) with a note in between saying how many lines and bytes were cut.
pub fn fit(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let head_budget = max_bytes * 3 / 5;
    let tail_budget = max_bytes - head_budget;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut head = 0;
    let mut used = 0;
    while head < lines.len() && used + lines[head].len() <= head_budget {
        used += lines[head].len();
        head += 1;
    }
    let mut tail = lines.len();
    let mut tused = 0;
    while tail > head && tused + lines[tail - 1].len() <= tail_budget {
        tused += lines[tail - 1].len();
        tail -= 1;
    }
    let mut out = String::with_capacity(max_bytes + 128);
    if head == 0 && tail == lines.len() {
        // A single huge line: cut by characters.
        let h: String = text.chars().take(head_budget).collect();
        let t: String = {
            let n = text.chars().count();
            text.chars().skip(n.saturating_sub(tail_budget)).collect()
        };
        out.push_str(&h);
        out.push_str(&format!(
            "\n[… {} bytes cut …]\n",
            text.len() - h.len() - t.len()
        ));
        out.push_str(&t);
        return out;
    }
    let cut_bytes: usize = lines[head..tail].iter().map(|l| l.len()).sum();
    for l in &lines[..head] {
        out.push_str(l);
    }
    if !out.ends_with('\n') && !out.is_empty() {
        out.push('\n');
    }
    out.push_str(&format!(
        "[… {} lines ({} bytes) cut …]\n",
        tail - head,
        cut_bytes
    ));
    for l in &lines[tail..] {
        out.push_str(l);
    }
    out
}

/// A line cut to `max` characters, with a marker when cut.
pub(crate) fn clip_line(line: &str, max: usize) -> String {
    if line.chars().count() <= max {
        line.to_string()
    } else {
        let mut s: String = line.chars().take(max).collect();
        s.push_str(" …[line cut]");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_untouched() {
        assert_eq!(fit("a\nb\n", 100), "a\nb\n");
    }

    #[test]
    fn long_text_keeps_head_and_tail_with_a_note() {
        let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let out = fit(&text, 1000);
        assert!(out.len() <= 1100, "{}", out.len());
        assert!(out.starts_with("line 0\n"));
        assert!(out.ends_with("line 999\n"));
        assert!(out.contains("lines (") && out.contains("cut"), "{out}");
    }

    #[test]
    fn one_huge_line_is_cut_by_characters() {
        let text = "x".repeat(10_000);
        let out = fit(&text, 100);
        assert!(out.len() < 200 && out.contains("bytes cut"));
    }
}
