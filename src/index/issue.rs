//! Template noise in issue text: what a reporter pastes because the issue form asks for it,
//! not because it says where the problem is.
//!
//! - Environment and package-version dumps (`show_versions()`, `pip freeze`, `pip list`,
//!   `conda list`, `tox` "installed:" lines): runs of `name: 1.2.3` / `name==1.2.3` /
//!   `name   1.2.3` lines. Their package names are rare words that match the one module that
//!   prints versions, or the optional-dependency shims, in every issue.
//! - HTML comments (`<!-- Thanks for submitting a PR ... -->`): the template's instructions,
//!   which name the project's own changelog and contribution files.
//! - The query string and fragment of a URL (`?urlpath=lab/tree/doc/examples/x.ipynb`,
//!   `#file-foo-py`): parameters of someone else's site, not paths of this project.
//!
//! Noise lines are blanked (kept as empty lines, so line structure such as the title and
//! fences is unchanged).

use regex::Regex;

/// At least this many version lines make a run of `key: value` lines a version dump.
const MIN_VERSION_LINES: usize = 4;

/// The query with environment and version dumps blanked and URL query strings and fragments
/// cut.
pub(crate) fn strip_noise(query: &str, dumps: bool, urls: bool, comments: bool) -> String {
    let stripped;
    let query = if comments {
        stripped = strip_html_comments(query);
        stripped.as_str()
    } else {
        query
    };
    let mut text = if urls {
        strip_url_params(query)
    } else {
        query.to_string()
    };
    if dumps {
        text = strip_version_dumps(&text);
    }
    text
}

/// Blank `<!-- ... -->` comments (the issue or pull-request template's instructions, which
/// GitHub does not render), keeping their line breaks.
fn strip_html_comments(query: &str) -> String {
    let mut out = String::with_capacity(query.len());
    let mut rest = query;
    while let Some(start) = rest.find("<!--") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 4..];
        let Some(end) = after.find("-->") else {
            // Unclosed: GitHub hides the rest too.
            out.extend(after.chars().filter(|c| *c == '\n'));
            return out;
        };
        out.extend(after[..end].chars().filter(|c| *c == '\n'));
        rest = &after[end + 3..];
    }
    out.push_str(rest);
    out
}

fn strip_url_params(query: &str) -> String {
    let Ok(url_re) = Regex::new(r"https?://[^\s?#<>()\[\]`]+([?#][^\s<>()\[\]`]*)?") else {
        return query.to_string();
    };
    url_re
        .replace_all(query, |c: &regex::Captures<'_>| {
            let whole = c.get(0).map_or("", |m| m.as_str());
            match c.get(1) {
                Some(params) => whole[..whole.len() - params.as_str().len()].to_string(),
                None => whole.to_string(),
            }
        })
        .into_owned()
}

#[derive(Clone, Copy, PartialEq)]
enum Line {
    /// `key: value`, `key==value` or `key   value` with a version-like (or `None`) value.
    Version,
    /// Another short `key: value` line (`OS: Linux`, `machine: x86_64`).
    KeyValue,
    /// Blank, a `----` rule or an all-caps header (`INSTALLED VERSIONS`).
    Filler,
    /// Anything else: ends a run.
    Other,
}

fn strip_version_dumps(query: &str) -> String {
    let (Ok(kv_re), Ok(ver_re), Ok(freeze_re), Ok(header_re)) = (
        // A key of at most two words, a `:`, `==` or column gap, a short value.
        Regex::new(
            r#"^\s*(?:[-*]\s+)?["']?[A-Za-z_][\w.+\-]*(?: [\w.+\-]+)?["']?(?:\s*:\s*|\s*==\s*|\s{2,})(\S.{0,120})?$"#,
        ),
        Regex::new(
            r"^(?:v?\d+(?:[.\-]\d+)*[\w.+\-]*|None|none|null|N/A|not installed|installed)(?:\W|$)",
        ),
        Regex::new(r"[A-Za-z][\w.\-]*==v?\d"),
        Regex::new(r"^[A-Z][A-Z0-9 _\-]{3,}:?$"),
    ) else {
        return query.to_string();
    };
    let classify = |line: &str| -> Line {
        let t = line.trim();
        if t.is_empty()
            || t.chars().all(|c| matches!(c, '-' | '=' | '_' | ' '))
            || t.chars()
                .all(|c| matches!(c, '{' | '}' | '[' | ']' | ',' | ' '))
            || header_re.is_match(t)
        {
            return Line::Filler;
        }
        // `tox`/`pip freeze` on one line: `a==1.0,b==2.0,c==3.1`.
        if freeze_re.find_iter(t).count() >= 3 {
            return Line::Version;
        }
        match kv_re.captures(line) {
            Some(c) => {
                // JSON (`python -m requests.help`): `"version": "2.0.9",`, `"version": null`.
                let raw = c.get(1).map_or("", |m| m.as_str().trim());
                let value = raw.trim_end_matches(',').trim_matches(['"', '\'']);
                if ver_re.is_match(value) || raw.starts_with('"') && value.is_empty() {
                    Line::Version
                } else {
                    Line::KeyValue
                }
            }
            None => Line::Other,
        }
    };
    let lines: Vec<&str> = query.lines().collect();
    let kinds: Vec<Line> = lines.iter().map(|l| classify(l)).collect();
    let mut noise = vec![false; lines.len()];
    let mut start = 0;
    while start < lines.len() {
        if kinds[start] == Line::Other {
            start += 1;
            continue;
        }
        let mut end = start;
        while end < lines.len() && kinds[end] != Line::Other {
            end += 1;
        }
        let versions = kinds[start..end]
            .iter()
            .filter(|k| **k == Line::Version)
            .count();
        if versions >= MIN_VERSION_LINES {
            for (k, n) in kinds[start..end].iter().zip(&mut noise[start..end]) {
                *n = *k != Line::Other;
            }
        }
        start = end;
    }
    // A freeze line inside a log is noise on its own.
    for (i, l) in lines.iter().enumerate() {
        if freeze_re.find_iter(l).count() >= 3 {
            noise[i] = true;
        }
    }
    let mut out = String::with_capacity(query.len());
    for (line, n) in lines.iter().zip(&noise) {
        if !n {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_dumps_are_blanked_and_prose_is_kept() {
        let q = "Title about swap_dims\nSome prose: it fails.\n<details>\nINSTALLED VERSIONS\n\
                 ------------------\ncommit: None\npython: 3.8.13 | packaged by conda-forge\n\
                 OS: Windows\nlibhdf5: 1.12.1\n\nxarray: 2022.6.0\npydap: None\nh5netcdf: None\n\
                 cfgrib: None\n</details>\nMore prose after.";
        let out = strip_noise(q, true, true, true);
        assert!(out.contains("Title about swap_dims"));
        assert!(out.contains("Some prose: it fails."));
        assert!(out.contains("More prose after."));
        for gone in ["pydap", "cfgrib", "libhdf5", "INSTALLED", "OS: Windows"] {
            assert!(!out.contains(gone), "{gone} left in {out}");
        }
        assert_eq!(out.lines().count(), q.lines().count());
    }

    #[test]
    fn freeze_lines_and_pip_list_columns_are_noise() {
        let q = "bug\npy37 installed: attrs==19.3.0,pluggy==0.13.0,py==1.8.0,zipp==0.6.0\n\
                 ```\nPackage    Version\n---------- -------\nnumpy      1.23.4\npandas     1.5.1\n\
                 scipy      1.9.3\nxarray     2022.10.0\n```\n";
        let out = strip_noise(q, true, true, true);
        for gone in ["pluggy", "zipp", "numpy", "scipy"] {
            assert!(!out.contains(gone), "{gone} left in {out}");
        }
    }

    #[test]
    fn json_version_reports_are_noise() {
        let q = "bug\n```json\n{\n  \"chardet\": {\n    \"version\": null\n  },\n  \"idna\": {\n    \"version\": \"3.3\"\n  },\n  \"cryptography\": {\n    \"version\": \"\"\n  },\n  \"urllib3\": {\n    \"version\": \"1.26.7\"\n  }\n}\n```\n";
        let out = strip_noise(q, true, true, true);
        for gone in ["chardet", "idna", "urllib3", "cryptography"] {
            assert!(!out.contains(gone), "{gone} left in {out}");
        }
    }

    #[test]
    fn short_key_value_code_is_not_a_dump() {
        let q = "x\n```\ntimeout: 10\nname: foo\n```\n";
        assert!(strip_noise(q, true, true, true).contains("timeout: 10"));
    }

    #[test]
    fn html_comments_are_blanked() {
        let q = "Marks lost\n<!--\nThanks!\nSee [changelog/README.rst](x) -->\nkept <!-- gone --> too\n";
        let out = strip_noise(q, true, true, true);
        assert!(!out.contains("changelog"), "{out}");
        assert!(!out.contains("gone"), "{out}");
        assert!(out.contains("kept") && out.contains("too") && out.contains("Marks lost"));
        assert_eq!(out.lines().count(), q.lines().count());
    }

    #[test]
    fn url_parameters_are_cut() {
        let q = "see [Binder](https://mybinder.org/v2/gh/pydata/xarray/main?urlpath=lab/tree/doc/examples/blank_template.ipynb) and https://github.com/o/r/blob/main/src/app.py#L10";
        let out = strip_noise(q, true, true, true);
        assert!(!out.contains("blank_template"), "{out}");
        assert!(
            out.contains("https://github.com/o/r/blob/main/src/app.py"),
            "{out}"
        );
        assert!(!out.contains("#L10"), "{out}");
    }
}
