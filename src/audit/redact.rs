//! Masking of secrets in text that leaves the process.
//!
//! A [`Redactor`] knows the values of the secrets in the environment (the well-known names
//! plus those the configuration names) and masks each value together with its encodings:
//! base64 at all three byte offsets (standard and URL-safe alphabets), percent-encoding,
//! form-encoding and JSON string escaping. It also masks well-known token shapes (GitHub,
//! OpenAI, Anthropic, AWS, Slack, JWTs, PEM private keys) whatever their value.
//!
//! [`StreamRedactor`] does the same over a stream of chunks, holding back just enough bytes
//! that a secret split across two chunks is still caught. [`scan_diff`] lists the secrets a
//! unified diff adds, already redacted; [`scan_changes`] is the push-time scan over the blobs
//! themselves (binary included) that also finds known secrets hex-encoded, reversed, rot13'd,
//! base64'd at any wrapping, escaped or split, and private keys by shape.

mod scan;

pub use scan::{ChangedFile, DiffScanner, scan_changes};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use regex::bytes::{Regex, RegexBuilder};
use serde::Serialize;

/// What replaces a secret.
pub const MASK: &str = "***";

/// Environment variables whose values are always treated as secrets when set.
pub const WELL_KNOWN_SECRET_VARS: &[&str] = &[
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "GITHUB_PAT",
    "GIT_AGENT_APP_KEY",
    "GIT_AGENT_WEBHOOK_SECRET",
    "GIT_AGENT_STATUS_TOKEN",
    "GIT_AGENT_DATABASE_URL",
    "DATABASE_URL",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENROUTER_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "ACTIONS_RUNTIME_TOKEN",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
    "NPM_TOKEN",
    "CARGO_REGISTRY_TOKEN",
    "PYPI_TOKEN",
    "SLACK_TOKEN",
];

/// Secret values shorter than this are not masked as values: masking every `1` or `true` in
/// the output would destroy it without protecting anything.
pub const MIN_SECRET_LEN: usize = 8;

/// Bytes a streaming redactor holds back for token patterns whose length is open-ended.
const PATTERN_WINDOW: usize = 512;

/// Above this much held-back text a stream emits anyway (masked), so memory stays bounded.
const MAX_CARRY: usize = 256 * 1024;

/// Errors from building a redactor.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The secrets' combined pattern could not be compiled (too many or too long).
    #[error("cannot build the secret-redaction pattern: {0}")]
    Pattern(#[from] regex::Error),
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A well-known token shape.
struct TokenPattern {
    kind: &'static str,
    re: &'static str,
}

const TOKEN_PATTERNS: &[TokenPattern] = &[
    TokenPattern {
        kind: "pem-private-key",
        // An unterminated block masks to the end: a truncated key is still a key.
        re: r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?s:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|.*)",
    },
    TokenPattern {
        kind: "github-token",
        re: r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b",
    },
    TokenPattern {
        kind: "github-pat",
        re: r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b",
    },
    TokenPattern {
        kind: "anthropic-key",
        re: r"\bsk-ant-[A-Za-z0-9_\-]{20,}",
    },
    TokenPattern {
        kind: "openai-key",
        re: r"\bsk-[A-Za-z0-9_\-]{20,}",
    },
    TokenPattern {
        kind: "aws-access-key-id",
        re: r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    },
    TokenPattern {
        kind: "slack-token",
        re: r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",
    },
    TokenPattern {
        kind: "jwt",
        re: r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
    },
];

/// Masks known secret values, their encodings and well-known token patterns.
///
/// Cheap to clone behind an `Arc`; immutable once built. `Debug` never shows the secrets.
pub struct Redactor {
    /// Every masked form of every known value, then every token pattern, as one alternation.
    all: Regex,
    /// Each token pattern alone, to name what a finding is.
    kinds: Vec<(&'static str, Regex)>,
    /// Known-value forms alone, to tell a known value from a pattern in findings.
    known: Option<Regex>,
    /// Length of the longest known form, for the streaming window.
    longest_form: usize,
    secret_count: usize,
    /// The secret values themselves, for the push-time scan's encodings and fragments.
    values: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secret_count)
            .finish_non_exhaustive()
    }
}

impl Redactor {
    /// A redactor for these secret values (values shorter than [`MIN_SECRET_LEN`] are ignored)
    /// plus the token patterns.
    pub fn new<I, S>(secrets: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut forms: Vec<String> = Vec::new();
        let mut values: Vec<Vec<u8>> = Vec::new();
        for s in secrets {
            let s = s.as_ref();
            if s.len() < MIN_SECRET_LEN {
                continue;
            }
            if !values.iter().any(|v| v == s.as_bytes()) {
                values.push(s.as_bytes().to_vec());
            }
            forms.extend(encoded_forms(s));
        }
        let secret_count = values.len();
        forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
        forms.dedup();
        let longest_form = forms.first().map_or(0, String::len);
        let known_alt: Vec<String> = forms.iter().map(|f| regex::escape(f)).collect();
        let known = if known_alt.is_empty() {
            None
        } else {
            Some(build(&known_alt.join("|"))?)
        };
        let mut alts = known_alt;
        alts.extend(
            TOKEN_PATTERNS
                .iter()
                .map(|p| format!("(?:{})", ascii_bounds(p.re))),
        );
        let all = build(&alts.join("|"))?;
        let kinds = TOKEN_PATTERNS
            .iter()
            .map(|p| Ok((p.kind, build(&ascii_bounds(p.re))?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            all,
            kinds,
            known,
            longest_form,
            secret_count,
            values,
        })
    }

    /// A redactor for the secrets in an environment: the variables in
    /// [`WELL_KNOWN_SECRET_VARS`], those in `extra_names` (e.g. the `api_key_env` names of the
    /// configured providers) and any variable whose name says it holds a secret
    /// (`*_TOKEN`, `*_KEY`, `*_SECRET`, `*_PASSWORD`, `*_API_KEY`).
    pub fn from_env<I>(vars: I, extra_names: &[String]) -> Result<Self>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let values = vars
            .into_iter()
            .filter(|(name, _)| is_secret_name(name) || extra_names.iter().any(|e| e == name))
            .map(|(_, v)| v);
        Self::new(values)
    }

    /// A redactor for the secrets in this process's environment (see [`Redactor::from_env`]).
    pub fn from_process_env(extra_names: &[String]) -> Result<Self> {
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        Self::from_env(vars, extra_names)
    }

    /// How many secret values this redactor knows (patterns not counted).
    pub fn secret_count(&self) -> usize {
        self.secret_count
    }

    /// `text` with every secret form and token masked as [`MASK`].
    pub fn redact(&self, text: &str) -> String {
        let out = self.redact_bytes(text.as_bytes());
        // Matches are whole UTF-8 sequences replaced by ASCII, so the result stays UTF-8.
        String::from_utf8(out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// Like [`Redactor::redact`] for bytes that need not be UTF-8 (command output).
    pub fn redact_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        self.all.replace_all(bytes, MASK.as_bytes()).into_owned()
    }

    /// Whether `text` holds anything this redactor would mask.
    pub fn contains_secret(&self, text: &[u8]) -> bool {
        self.all.is_match(text)
    }

    /// A streaming redactor over this one.
    pub fn stream(&self) -> StreamRedactor<'_> {
        StreamRedactor {
            redactor: self,
            carry: Vec::new(),
            in_pem: false,
        }
    }

    /// Bytes a stream must hold back so that no form is cut in two.
    fn window(&self) -> usize {
        self.longest_form.max(PATTERN_WINDOW)
    }

    /// What a match is: `known-secret` or a token pattern's kind.
    fn kind_of(&self, m: &[u8]) -> &'static str {
        if let Some(k) = &self.known
            && k.find(m)
                .is_some_and(|f| f.start() == 0 && f.end() == m.len())
        {
            return "known-secret";
        }
        self.kinds
            .iter()
            .find(|(_, re)| re.is_match(m))
            .map_or("secret", |(k, _)| k)
    }
}

/// Token boundaries are ASCII word boundaries: output need not be UTF-8, and ASCII
/// boundaries keep the whole alternation on the fast automata.
fn ascii_bounds(re: &str) -> String {
    re.replace(r"\b", r"(?-u:\b)")
}

fn build(pattern: &str) -> Result<Regex> {
    Ok(RegexBuilder::new(pattern)
        .size_limit(64 << 20)
        .dfa_size_limit(64 << 20)
        .build()?)
}

/// Whether a variable's name says it holds a secret.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    WELL_KNOWN_SECRET_VARS.contains(&upper.as_str())
        || [
            "_TOKEN",
            "_KEY",
            "_SECRET",
            "_PASSWORD",
            "_PASSWD",
            "_CREDENTIALS",
        ]
        .iter()
        .any(|s| upper.ends_with(s))
        || upper.contains("SECRET")
        || upper.contains("PASSWORD")
}

/// Every form of `s` that is masked: the value, reversed, rot13, hex in both cases, its base64
/// at the three byte offsets in both alphabets, percent- and form-encoding, and JSON escaping.
fn encoded_forms(s: &str) -> Vec<String> {
    let mut out = vec![s.to_string()];
    // The cheap disguises a model might be told to use to get a value past a filter.
    out.push(s.chars().rev().collect());
    // rot13 moves only ASCII letters, so UTF-8 stays UTF-8.
    if let Ok(r) = String::from_utf8(scan::rot13(s.as_bytes())) {
        out.push(r);
    }
    out.push(hex::encode(s));
    out.push(hex::encode_upper(s));
    let n = s.len();
    for k in 0..3usize {
        // Encode the value after k filler bytes; keep only the characters whose 6 bits all
        // come from the value, which are the same whatever bytes surround it in the stream.
        let mut buf = vec![0u8; k];
        buf.extend_from_slice(s.as_bytes());
        let start = (8 * k).div_ceil(6);
        let end = (8 * (k + n)) / 6;
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let enc = engine.encode(&buf);
            if let Some(core) = enc.get(start..end)
                && core.len() >= MIN_SECRET_LEN
            {
                out.push(core.to_string());
            }
        }
    }
    out.push(percent_encode(s, false));
    out.push(percent_encode(s, true));
    if let Ok(json) = serde_json::to_string(s) {
        out.push(json.trim_matches('"').to_string());
    }
    // Lower-case percent escapes are as valid as upper-case ones.
    let lower: Vec<String> = out
        .iter()
        .filter(|f| f.contains('%'))
        .map(|f| lower_percent(f))
        .collect();
    out.extend(lower);
    out.sort();
    out.dedup();
    out
}

fn percent_encode(s: &str, form: bool) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' if form => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn lower_percent(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let esc = rest.get(i..i + 3).unwrap_or(&rest[i..]);
        out.push_str(&esc.to_ascii_lowercase());
        rest = &rest[i + esc.len()..];
    }
    out.push_str(rest);
    out
}

/// Redacts a stream chunk by chunk; a secret split across chunks is still masked.
///
/// Each [`push`](StreamRedactor::push) returns the text that is safe to release; the last
/// bytes are held back until the next chunk or [`finish`](StreamRedactor::finish).
pub struct StreamRedactor<'a> {
    redactor: &'a Redactor,
    carry: Vec<u8>,
    /// Inside a PEM private key whose END line has not been seen: mask everything until it.
    in_pem: bool,
}

impl StreamRedactor<'_> {
    /// Feed a chunk; returns the redacted bytes that can be released now.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.carry.extend_from_slice(chunk);
        let mut out = Vec::new();
        if self.in_pem {
            match find_pem_end(&self.carry) {
                Some(end) => {
                    out.extend_from_slice(MASK.as_bytes());
                    self.carry.drain(..end);
                    self.in_pem = false;
                }
                None => {
                    // Keep a tail in case the END line is split; drop the rest unseen.
                    let keep = self.carry.len().min(64);
                    let cut = self.carry.len() - keep;
                    self.carry.drain(..cut);
                    return out;
                }
            }
        }
        let window = self.redactor.window();
        let len = self.carry.len();
        let mut cut = len.saturating_sub(window);
        let mut unterminated_pem = false;
        for m in self.redactor.all.find_iter(&self.carry) {
            if m.start() < cut && m.end() > cut {
                if m.end() == len {
                    // The match reaches the end: it may grow with the next chunk.
                    cut = m.start();
                } else {
                    cut = m.end();
                }
            }
        }
        if cut == 0 && len > MAX_CARRY {
            // Pathological: one match (an unterminated key) larger than the bound. Mask it all.
            cut = len;
            unterminated_pem = is_unterminated_pem(&self.carry);
        }
        let head: Vec<u8> = self.carry.drain(..cut).collect();
        out.extend(self.redactor.redact_bytes(&head));
        if unterminated_pem {
            self.in_pem = true;
        }
        out
    }

    /// Release everything held back, redacted.
    pub fn finish(mut self) -> Vec<u8> {
        if self.in_pem {
            return MASK.as_bytes().to_vec();
        }
        let rest = std::mem::take(&mut self.carry);
        self.redactor.redact_bytes(&rest)
    }
}

fn is_unterminated_pem(b: &[u8]) -> bool {
    let s = String::from_utf8_lossy(b);
    s.contains("PRIVATE KEY-----") && s.rfind("-----BEGIN ") > s.rfind("-----END ")
}

fn find_pem_end(b: &[u8]) -> Option<usize> {
    let re = Regex::new(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----").ok()?;
    re.find(b).map(|m| m.end())
}

/// A secret found on an added line of a diff. Holds no secret: `line` is already redacted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Path of the file in the new tree.
    pub path: String,
    /// 1-based line number in the new file.
    pub line: u32,
    /// `known-secret`, `private-key` or a token kind (`github-token`, `aws-access-key-id`, …).
    pub kind: String,
    /// How the secret was written: `plain`, `hex`, `base64`, `reversed`, `rot13`, `escaped`,
    /// `der`, `openssh`, with `split` or `split across files` when it came in pieces.
    pub encoding: String,
    /// The added line with every secret masked.
    pub redacted: String,
}

/// Scan a unified diff's added lines for secrets and token patterns. An empty list means the
/// diff adds none; any finding must block the push, and the list is safe to report.
pub fn scan_diff(diff: &str, redactor: &Redactor) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut path = String::new();
    let mut new_line: u32 = 0;
    let mut in_pem = false;
    for line in diff.lines() {
        if let Some(p) = line.strip_prefix("+++ ") {
            path = p.strip_prefix("b/").unwrap_or(p).to_string();
            continue;
        }
        if line.starts_with("--- ") || line.starts_with("diff --git ") {
            continue;
        }
        if let Some(h) = line.strip_prefix("@@ ") {
            new_line = hunk_new_start(h).unwrap_or(1);
            continue;
        }
        if let Some(added) = line.strip_prefix('+') {
            let bytes = added.as_bytes();
            let starts_pem = added.contains("-----BEGIN") && added.contains("PRIVATE KEY-----");
            if redactor.contains_secret(bytes) || in_pem {
                let kind = redactor
                    .all
                    .find(bytes)
                    .map_or("pem-private-key", |m| redactor.kind_of(m.as_bytes()));
                findings.push(Finding {
                    path: path.clone(),
                    line: new_line,
                    kind: kind.to_string(),
                    encoding: "plain".to_string(),
                    redacted: if in_pem {
                        MASK.to_string()
                    } else {
                        redactor.redact(added)
                    },
                });
            }
            // A key's body lines carry no marker of their own; report the BEGIN line only.
            if starts_pem {
                in_pem = !added.contains("-----END");
            } else if in_pem && added.contains("-----END") {
                in_pem = false;
            }
            new_line += 1;
        } else if line.starts_with(' ') {
            new_line += 1;
        }
    }
    // Body lines of a key were reported as `***`; keep one finding per key line anyway.
    findings.dedup_by(|a, b| {
        a.path == b.path && a.kind == b.kind && a.redacted == MASK && b.redacted == MASK
    });
    findings
}

fn hunk_new_start(h: &str) -> Option<u32> {
    let plus = h.split_whitespace().find(|w| w.starts_with('+'))?;
    plus[1..].split(',').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "canary-Sup3r/Secret+value=42 \"q\"";

    fn r() -> Redactor {
        Redactor::new([SECRET]).unwrap()
    }

    #[test]
    fn masks_the_value_and_every_encoding() {
        let r = r();
        let b64 = |k: usize, e: &base64::engine::GeneralPurpose| {
            let mut v: Vec<u8> = b"xyz"[..k].to_vec();
            v.extend_from_slice(SECRET.as_bytes());
            v.extend_from_slice(b"tail");
            e.encode(v)
        };
        let mut cases = vec![SECRET.to_string()];
        for k in 0..3 {
            cases.push(b64(k, &base64::engine::general_purpose::STANDARD));
            cases.push(b64(k, &URL_SAFE_NO_PAD));
        }
        cases.push(percent_encode(SECRET, false));
        cases.push(percent_encode(SECRET, true));
        cases.push(lower_percent(&percent_encode(SECRET, false)));
        cases.push(serde_json::to_string(SECRET).unwrap());
        // The disguises of issue 20: hex in both cases, reversed, rot13.
        cases.push(hex::encode(SECRET));
        cases.push(hex::encode_upper(SECRET));
        cases.push(SECRET.chars().rev().collect());
        cases.push(String::from_utf8(scan::rot13(SECRET.as_bytes())).unwrap());
        for c in cases {
            let text = format!("before {c} after");
            let out = r.redact(&text);
            assert!(out.contains(MASK), "not masked: {c} -> {out}");
            // Nothing long enough to identify the secret survives.
            assert!(!out.contains("Sup3r"), "{out}");
            for k in 0..3 {
                let core = &b64(k, &STANDARD_NO_PAD)[4..12];
                assert!(!out.contains(core), "base64 core {core} survives in {out}");
            }
            assert!(
                out.starts_with("before ") && out.ends_with(" after"),
                "{out}"
            );
        }
    }

    #[test]
    fn masks_token_patterns() {
        let r = Redactor::new(Vec::<String>::new()).unwrap();
        let gh = format!("ghp_{}", "a1B2".repeat(9));
        let cases = [
            gh.clone(),
            format!("gho_{}", "Z".repeat(36)),
            format!("ghu_{}", "9".repeat(36)),
            format!("ghs_{}", "x".repeat(40)),
            format!("ghr_{}", "y".repeat(36)),
            format!("github_pat_11AAAAAAA0{}", "b_c".repeat(20)),
            format!("sk-proj-{}", "abcDEF123".repeat(4)),
            format!("sk-ant-api03-{}", "Q".repeat(40)),
            "AKIAIOSFODNN7EXAMPLE".to_string(),
            "ASIAIOSFODNN7EXAMPL2".to_string(),
            "xoxb-123456789012-abcdefABCDEF".to_string(),
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U".to_string(),
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----".to_string(),
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA truncated".to_string(),
        ];
        for c in cases {
            let out = r.redact(&format!("x={c} ;"));
            assert!(out.starts_with("x=***"), "{c} -> {out}");
            assert!(
                !out.contains(&c[..c.len().min(12)]) || c.len() < 12,
                "{c} -> {out}"
            );
        }
        // Things that look close but are not tokens are left alone.
        for ok in [
            "ghp_short",
            "sk-",
            "AKIA123",
            "task-runner",
            "BEGIN PUBLIC KEY",
        ] {
            assert_eq!(r.redact(ok), ok);
        }
    }

    #[test]
    fn short_values_are_not_masked_as_values() {
        let r = Redactor::new(["true", "1"]).unwrap();
        assert_eq!(r.secret_count(), 0);
        assert_eq!(r.redact("true 1"), "true 1");
    }

    #[test]
    fn from_env_takes_well_known_named_and_suffixed_variables() {
        let vars = vec![
            ("GITHUB_TOKEN".to_string(), "gh-value-123456".to_string()),
            (
                "MY_PROVIDER_KEY_VAR".to_string(),
                "configured-secret-1".to_string(),
            ),
            ("DEPLOY_PASSWORD".to_string(), "hunter2hunter2".to_string()),
            ("PATH".to_string(), "/usr/bin:/bin".to_string()),
        ];
        let r = Redactor::from_env(vars, &["MY_PROVIDER_KEY_VAR".to_string()]).unwrap();
        assert_eq!(r.secret_count(), 3);
        let out = r.redact("gh-value-123456 configured-secret-1 hunter2hunter2 /usr/bin:/bin");
        assert_eq!(out, "*** *** *** /usr/bin:/bin");
    }

    #[test]
    fn stream_catches_a_secret_split_at_every_point() {
        let r = r();
        let text = format!("line one\nthe key is {SECRET} and more\n");
        for split in 0..=text.len() {
            let (a, b) = text.as_bytes().split_at(split);
            let mut s = r.stream();
            let mut out = s.push(a);
            out.extend(s.push(b));
            out.extend(s.finish());
            let out = String::from_utf8(out).unwrap();
            assert_eq!(
                out, "line one\nthe key is *** and more\n",
                "split at {split}"
            );
        }
    }

    #[test]
    fn stream_catches_a_token_split_across_many_small_chunks() {
        let r = Redactor::new(Vec::<String>::new()).unwrap();
        let token = format!("ghp_{}", "k".repeat(36));
        let text = format!("{}{token} end", "noise ".repeat(200));
        let mut s = r.stream();
        let mut out = Vec::new();
        for c in text.as_bytes().chunks(7) {
            out.extend(s.push(c));
        }
        out.extend(s.finish());
        let out = String::from_utf8(out).unwrap();
        assert!(out.ends_with("*** end"), "{}", &out[out.len() - 60..]);
        assert!(!out.contains("ghp_"));
    }

    #[test]
    fn stream_masks_a_long_private_key_across_chunks() {
        let r = Redactor::new(Vec::<String>::new()).unwrap();
        let body = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY\n".repeat(20_000);
        let text =
            format!("start\n-----BEGIN PRIVATE KEY-----\n{body}-----END PRIVATE KEY-----\nend\n");
        let mut s = r.stream();
        let mut out = Vec::new();
        for c in text.as_bytes().chunks(4096) {
            out.extend(s.push(c));
        }
        out.extend(s.finish());
        let out = String::from_utf8(out).unwrap();
        assert!(!out.contains("QUJDREVG"), "key body leaked");
        assert!(
            out.starts_with("start\n") && out.ends_with("\nend\n"),
            "{out}"
        );
    }

    #[test]
    fn stream_of_plain_text_is_unchanged_and_bounded() {
        let r = r();
        let mut s = r.stream();
        let mut out = Vec::new();
        let chunk = vec![b'a'; 1 << 16];
        for _ in 0..64 {
            out.extend(s.push(&chunk));
            assert!(
                s.carry.len() <= r.window(),
                "carry grew to {}",
                s.carry.len()
            );
        }
        out.extend(s.finish());
        assert_eq!(out.len(), 64 << 16);
    }

    #[test]
    fn diff_adding_a_github_token_is_found_and_reported_redacted() {
        let r = r();
        let token = format!("ghp_{}", "T0k3n".repeat(8));
        let diff = format!(
            "diff --git a/src/config.rs b/src/config.rs\n--- a/src/config.rs\n+++ b/src/config.rs\n@@ -10,3 +10,4 @@ fn f() {{\n context\n-old\n+const T: &str = \"{token}\";\n+let fine = 1;\n"
        );
        let f = scan_diff(&diff, &r);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].path, "src/config.rs");
        assert_eq!(f[0].line, 11);
        assert_eq!(f[0].kind, "github-token");
        assert_eq!(f[0].redacted, "const T: &str = \"***\";");
        assert!(!serde_json::to_string(&f).unwrap().contains("T0k3n"));
        // A known value is named as such; removed lines are not findings.
        let diff2 = format!(
            "+++ b/x\n@@ -1 +1 @@\n-{token}\n+url={}\n",
            percent_encode(SECRET, false)
        );
        let f2 = scan_diff(&diff2, &r);
        assert_eq!(f2.len(), 1);
        assert_eq!(f2[0].kind, "known-secret");
        assert_eq!(f2[0].redacted, "url=***");
        assert!(scan_diff("+++ b/x\n@@ -0,0 +1 @@\n+hello\n", &r).is_empty());
    }

    #[test]
    fn debug_does_not_show_secrets() {
        assert!(!format!("{:?}", r()).contains("Sup3r"));
    }
}
