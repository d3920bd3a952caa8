//! A conservative parser of POSIX shell command lines, for judging, never for running.
//!
//! It splits a command line into every simple command it would run: the parts of `&&`, `||`,
//! `;`, `&`, pipelines, subshells `( … )` and groups `{ …; }`, command substitutions `$(…)` and
//! backticks (also inside double quotes), process substitutions `<(…)`, the scripts of
//! `sh -c '…'`, and the commands behind wrappers such as `env`, `timeout`, `xargs` or
//! `find -exec` (read with each wrapper's own option grammar, in [`wrappers`]).
//! Redirections are kept with their targets, and every command carries the directories it may
//! run in, so that `cd / && rm -rf x` is judged as removing `/x`. Anything it does not
//! understand (unbalanced quotes, here-documents, `for`/`case` loops, brace expansion,
//! `CDPATH`) is an error, which the policy turns into `ask`.

use serde::Serialize;

/// The commands behind wrappers, read with each wrapper's own option grammar; part of the
/// parser (an `sh -c` behind a wrapper is parsed again).
pub(super) mod wrappers;

/// A redirection of one simple command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Redirect {
    /// The operator, e.g. `>`, `>>`, `2>`, `<`, `&>`.
    pub op: String,
    /// The target word (a path, or `&1`-style descriptor).
    pub target: String,
}

impl Redirect {
    /// Whether the redirection writes to its target.
    pub fn writes(&self) -> bool {
        let descriptor = self.target.starts_with('&')
            || (self.op.ends_with('&')
                && (self.target == "-" || self.target.chars().all(|c| c.is_ascii_digit())));
        self.op.contains('>') && !descriptor
    }
}

/// One command the line would run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SimpleCommand {
    /// The words, quotes removed. `$VAR` and `${…}` stay as written.
    pub argv: Vec<String>,
    /// Redirections.
    pub redirects: Vec<Redirect>,
    /// Whether its standard input comes from a pipe.
    pub stdin_piped: bool,
    /// Whether the command name itself is only known at run time (`$cmd args`, a glob).
    pub dynamic_name: bool,
    /// Whether this command was found inside another (substitution, `sh -c`, a wrapper).
    pub nested: bool,
    /// Every directory it may run in, as far as the line tells (`cd`, `env -C`, `find
    /// -execdir`): `.` is the worktree root, others are worktree-relative, absolute, `~` or
    /// hold a `$` when only known at run time. Empty means the worktree root.
    pub dirs: Vec<String>,
    /// Whether more arguments arrive only at run time (`xargs` reads them from its input).
    pub args_from_stdin: bool,
}

impl SimpleCommand {
    /// The directories it may run in (`["."]` when the line never changes directory).
    pub fn dirs(&self) -> Vec<&str> {
        if self.dirs.is_empty() {
            vec!["."]
        } else {
            self.dirs.iter().map(String::as_str).collect()
        }
    }

    /// A command run by this one (behind a wrapper, or a canonical form of it): it inherits
    /// where this one runs and what it reads.
    pub(super) fn inner(&self, argv: Vec<String>) -> SimpleCommand {
        let dynamic_name = argv
            .first()
            .is_some_and(|a| a.contains('$') || a.contains(['*', '?', '[']));
        SimpleCommand {
            argv,
            redirects: Vec::new(),
            stdin_piped: self.stdin_piped,
            dynamic_name,
            nested: true,
            dirs: self.dirs.clone(),
            args_from_stdin: self.args_from_stdin,
        }
    }
}

/// Why a command line could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word { text: String, dynamic: bool },
    Op(String),
}

/// Deepest nesting of substitutions, `sh -c` scripts and wrappers followed.
pub(super) const MAX_DEPTH: usize = 8;

/// Most directories tracked for one command before the rest count as unknown.
const MAX_DIRS: usize = 32;

/// Every simple command of `line`, in order.
pub fn parse(line: &str) -> Result<Vec<SimpleCommand>, ParseError> {
    // `CDPATH` makes `cd sub` go wherever it points, which the line alone cannot tell.
    if line.contains("CDPATH") {
        return Err(ParseError(
            "`CDPATH` changes where `cd` goes; such lines are not judged".into(),
        ));
    }
    parse_depth(line, 0, &[".".to_string()])
}

/// Parse `line` running in any of `dirs`. Substitutions are parsed before the line's own `cd`s
/// are known, so when the line changes directory they are parsed again from every directory
/// the line may reach.
pub(super) fn parse_depth(
    line: &str,
    depth: usize,
    dirs: &[String],
) -> Result<Vec<SimpleCommand>, ParseError> {
    if depth > MAX_DEPTH {
        return Err(ParseError("commands nested too deeply to judge".into()));
    }
    let (cmds, reached, had_nested) = parse_once(line, depth, dirs, dirs)?;
    if had_nested && reached.len() > dirs.len() {
        return Ok(parse_once(line, depth, dirs, &reached)?.0);
    }
    Ok(cmds)
}

/// One pass: the commands, every directory reached, and whether substitutions were found.
fn parse_once(
    line: &str,
    depth: usize,
    dirs: &[String],
    sub_dirs: &[String],
) -> Result<(Vec<SimpleCommand>, Vec<String>, bool), ParseError> {
    let mut nested = Vec::new();
    let toks = tokenize(line, depth, sub_dirs, &mut nested)?;
    let mut out = Vec::new();
    let mut cur = SimpleCommand::default();
    let mut piped_next = false;
    let mut i = 0;
    let mut at_start = true;
    let mut here = dirs.to_vec();
    let mut reached = dirs.to_vec();
    let mut subshells: Vec<Vec<String>> = Vec::new();
    while i < toks.len() {
        match &toks[i] {
            Tok::Op(op) => match op.as_str() {
                "&&" | "||" | ";" | "&" | "\n" | "|" | "|&" | "(" | ")" => {
                    if !cur.argv.is_empty() || !cur.redirects.is_empty() {
                        finish_command(std::mem::take(&mut cur), &mut here, &mut reached, &mut out);
                    } else if matches!(op.as_str(), "|" | "|&" | "&&" | "||") && out.is_empty() {
                        return Err(ParseError(format!("`{op}` with nothing before it")));
                    }
                    // A subshell's `cd` ends with it.
                    if op == "(" {
                        subshells.push(here.clone());
                    } else if op == ")"
                        && let Some(before) = subshells.pop()
                    {
                        here = before;
                    }
                    piped_next = matches!(op.as_str(), "|" | "|&");
                    cur.stdin_piped = piped_next;
                    at_start = true;
                }
                r if is_redirect(r) => {
                    let Some(Tok::Word { text, .. }) = toks.get(i + 1) else {
                        return Err(ParseError(format!("redirection `{r}` without a target")));
                    };
                    cur.redirects.push(Redirect {
                        op: r.to_string(),
                        target: text.clone(),
                    });
                    i += 1;
                }
                other => return Err(ParseError(format!("unsupported shell syntax `{other}`"))),
            },
            Tok::Word { text, dynamic } => {
                if at_start && cur.argv.is_empty() {
                    match text.as_str() {
                        "if" | "then" | "else" | "elif" | "fi" | "while" | "until" | "do"
                        | "done" | "!" | "{" | "}" => {
                            i += 1;
                            continue;
                        }
                        "for" | "case" | "esac" | "select" | "function" | "[[" | "coproc" => {
                            return Err(ParseError(format!(
                                "`{text}` constructs are not judged command by command"
                            )));
                        }
                        _ => {}
                    }
                    if is_assignment(text) {
                        nested.extend(wrappers::assignment(text, depth, &here)?);
                        i += 1;
                        continue;
                    }
                    cur.dynamic_name = *dynamic || text.contains(['*', '?', '[']);
                    at_start = false;
                }
                cur.argv.push(text.clone());
            }
        }
        i += 1;
    }
    if !cur.argv.is_empty() || !cur.redirects.is_empty() {
        finish_command(cur, &mut here, &mut reached, &mut out);
    } else if piped_next {
        return Err(ParseError("pipeline ends without a command".into()));
    }
    // Commands behind wrappers and inside `sh -c` are judged too.
    let mut all = Vec::new();
    for cmd in out {
        let inner = wrappers::unwrap(&cmd, depth)?;
        all.push(cmd);
        all.extend(inner);
    }
    let had_nested = !nested.is_empty();
    all.extend(nested);
    Ok((all, reached, had_nested))
}

/// Record where `cmd` runs, then follow it if it changes directory. Directories only
/// accumulate (a failed `cd`, `||` and pipelines leave the old one possible), except that a
/// subshell's end restores its start.
fn finish_command(
    mut cmd: SimpleCommand,
    here: &mut Vec<String>,
    reached: &mut Vec<String>,
    out: &mut Vec<SimpleCommand>,
) {
    cmd.dirs = here.clone();
    if let Some(target) = cd_target(&cmd.argv) {
        let next: Vec<String> = here.iter().map(|d| join_dir(d, &target)).collect();
        for d in next {
            add_dir(here, d.clone());
            add_dir(reached, d);
        }
    }
    out.push(cmd);
}

fn add_dir(dirs: &mut Vec<String>, dir: String) {
    if dirs.contains(&dir) {
        return;
    }
    if dirs.len() >= MAX_DIRS {
        let unknown = "$UNKNOWN_DIR".to_string();
        if !dirs.contains(&unknown) {
            dirs.push(unknown);
        }
        return;
    }
    dirs.push(dir);
}

/// Where a `cd`, `pushd` or `chdir` goes (`~` for home); `None` when the command does not
/// change directory or goes back to one already possible (`cd -`, `popd`).
fn cd_target(argv: &[String]) -> Option<String> {
    let mut words = argv;
    while let Some(first) = words.first()
        && matches!(first.as_str(), "command" | "builtin")
    {
        words = &words[1..];
    }
    let name = base_name(words.first()?);
    if !matches!(name, "cd" | "pushd" | "chdir") {
        return None;
    }
    let mut rest = words[1..].iter().skip_while(|a| {
        a.len() > 1 && a.starts_with('-') && a.chars().skip(1).all(|c| "LPe@".contains(c))
    });
    let rest = match rest.next() {
        Some(a) if a == "--" => rest.next(),
        other => other,
    };
    match rest.map(String::as_str) {
        None => Some("~".into()),
        Some("-") => None,
        Some(a) if name == "pushd" && (a.starts_with('+') || a.starts_with('-')) => None,
        Some(a) => Some(a.to_string()),
    }
}

/// `target` seen from `base`: absolute, `~` and run-time targets stand alone.
pub(super) fn join_dir(base: &str, target: &str) -> String {
    let joined = if target.is_empty() || target == "." {
        base.to_string()
    } else if target.starts_with(['/', '~', '$']) || base == "." {
        target.to_string()
    } else {
        format!("{}/{target}", base.trim_end_matches('/'))
    };
    normalize(&joined)
}

/// Fold `.` and inner `..` lexically, so the same directory is written one way.
pub(super) fn normalize(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." if parts.last().is_some_and(|p| *p != "..") => {
                parts.pop();
            }
            ".." if absolute => {}
            c => parts.push(c),
        }
    }
    match (absolute, parts.is_empty()) {
        (true, _) => format!("/{}", parts.join("/")),
        (false, true) => ".".into(),
        (false, false) => parts.join("/"),
    }
}

fn is_redirect(op: &str) -> bool {
    matches!(
        op.trim_start_matches(|c: char| c.is_ascii_digit()),
        ">" | ">>" | "<" | ">|" | "&>" | "&>>" | ">&" | "<&" | "<>" | "<<<"
    )
}

/// `NAME=value` (also `NAME+=value`).
pub(super) fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            let name = name.strip_suffix('+').unwrap_or(name);
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// The last path component of a command name (`/usr/bin/git` → `git`).
pub(super) fn base_name(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

fn tokenize(
    line: &str,
    depth: usize,
    dirs: &[String],
    nested: &mut Vec<SimpleCommand>,
) -> Result<Vec<Tok>, ParseError> {
    let chars: Vec<char> = line.chars().collect();
    let mut toks = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut dynamic = false;
    // Unquoted `{` still open in the current word, and whether a `,` or `..` followed one.
    let mut braces = (0usize, false);
    let mut i = 0;
    let flush = |toks: &mut Vec<Tok>, word: &mut String, in_word: &mut bool, dynamic: &mut bool| {
        if *in_word {
            toks.push(Tok::Word {
                text: std::mem::take(word),
                dynamic: *dynamic,
            });
        }
        *in_word = false;
        *dynamic = false;
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => {
                flush(&mut toks, &mut word, &mut in_word, &mut dynamic);
                i += 1;
            }
            '\\' => {
                if i + 1 < chars.len() {
                    if chars[i + 1] != '\n' {
                        word.push(chars[i + 1]);
                        in_word = true;
                    }
                    i += 2;
                } else {
                    return Err(ParseError("line ends with a backslash".into()));
                }
            }
            '#' if !in_word => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '\'' => {
                let end = chars[i + 1..]
                    .iter()
                    .position(|&c| c == '\'')
                    .ok_or_else(|| ParseError("unbalanced single quote".into()))?;
                word.extend(&chars[i + 1..i + 1 + end]);
                in_word = true;
                i += end + 2;
            }
            '"' => {
                in_word = true;
                i += 1;
                loop {
                    let Some(&c) = chars.get(i) else {
                        return Err(ParseError("unbalanced double quote".into()));
                    };
                    match c {
                        '"' => {
                            i += 1;
                            break;
                        }
                        '\\' if matches!(chars.get(i + 1), Some('"' | '\\' | '$' | '`' | '\n')) => {
                            word.push(chars[i + 1]);
                            i += 2;
                        }
                        '$' | '`' => {
                            let (len, text) = substitution(&chars[i..], depth, dirs, nested)?;
                            if text.is_some() {
                                dynamic = true;
                            }
                            word.extend(&chars[i..i + len]);
                            i += len;
                        }
                        c => {
                            word.push(c);
                            i += 1;
                        }
                    }
                }
            }
            '$' if chars.get(i + 1) == Some(&'\'') => {
                // ANSI-C quoting: `$'\x67it'` is `git` to bash.
                let (len, text) = ansi_c(&chars[i + 2..])?;
                word.push_str(&text);
                in_word = true;
                i += len + 2;
            }
            '$' | '`' => {
                let (len, sub) = substitution(&chars[i..], depth, dirs, nested)?;
                if sub.is_some() || len > 1 {
                    dynamic = true;
                }
                word.extend(&chars[i..i + len]);
                in_word = true;
                i += len;
            }
            '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>' => {
                // A word of digits right before a redirection is its descriptor (`2>`).
                let fd = if matches!(c, '<' | '>')
                    && in_word
                    && !word.is_empty()
                    && word.chars().all(|c| c.is_ascii_digit())
                {
                    in_word = false;
                    std::mem::take(&mut word)
                } else {
                    flush(&mut toks, &mut word, &mut in_word, &mut dynamic);
                    String::new()
                };
                if matches!(c, '<' | '>') && chars.get(i + 1) == Some(&'(') {
                    // Process substitution: judge what it runs.
                    let len = matching_paren(&chars[i + 1..])?;
                    let inner: String = chars[i + 2..i + len].iter().collect();
                    nested.extend(parse_depth(&inner, depth + 1, dirs)?.into_iter().map(
                        |mut c| {
                            c.nested = true;
                            c
                        },
                    ));
                    word.push_str("<(…)");
                    in_word = true;
                    dynamic = true;
                    i += len + 1;
                    continue;
                }
                let rest: String = chars[i..chars.len().min(i + 3)].iter().collect();
                let op = [
                    "&&", "||", ";;", "|&", ">>", "&>>", "&>", ">&", "<&", "<<<", "<<", "<>", ">|",
                ]
                .iter()
                .filter(|op| rest.starts_with(**op))
                .max_by_key(|op| op.len())
                .map_or_else(|| c.to_string(), |op| op.to_string());
                if op == "<<" {
                    return Err(ParseError("here-documents are not judged".into()));
                }
                if op == ";;" {
                    return Err(ParseError("`case` constructs are not judged".into()));
                }
                i += op.chars().count();
                toks.push(Tok::Op(format!("{fd}{op}")));
            }
            _ => {
                if !in_word {
                    braces = (0, false);
                }
                // Brace expansion (`{sudo,ls}`, `{1..3}`) makes several words out of one.
                match c {
                    '{' => braces.0 += 1,
                    ',' if braces.0 > 0 => braces.1 = true,
                    '.' if braces.0 > 0 && chars.get(i + 1) == Some(&'.') => braces.1 = true,
                    '}' if braces.0 > 0 => {
                        braces.0 -= 1;
                        if braces.1 {
                            return Err(ParseError(
                                "brace expansion (`{a,b}`) is not judged".into(),
                            ));
                        }
                    }
                    _ => {}
                }
                word.push(c);
                in_word = true;
                i += 1;
            }
        }
    }
    flush(&mut toks, &mut word, &mut in_word, &mut dynamic);
    Ok(toks)
}

/// The text of an ANSI-C quoted string (`$'…'`) whose body starts at `chars[0]`, and the
/// length through its closing quote.
fn ansi_c(chars: &[char]) -> Result<(usize, String), ParseError> {
    let mut out = String::new();
    let mut i = 0;
    // A NUL ends the string for bash; the rest up to the quote is dropped.
    let mut ended = false;
    let push = |out: &mut String, c: Option<char>, ended: &mut bool| match c {
        Some('\0') | None => *ended = true,
        Some(c) if !*ended => out.push(c),
        Some(_) => {}
    };
    let number = |chars: &[char], from: usize, max: usize, radix: u32| -> (usize, u32) {
        let digits: String = chars[from..]
            .iter()
            .take(max)
            .take_while(|c| c.is_digit(radix))
            .collect();
        (
            digits.len(),
            u32::from_str_radix(&digits, radix).unwrap_or(0),
        )
    };
    loop {
        let Some(&c) = chars.get(i) else {
            return Err(ParseError("unbalanced `$'`".into()));
        };
        match c {
            '\'' => return Ok((i + 1, out)),
            '\\' => {
                let Some(&e) = chars.get(i + 1) else {
                    return Err(ParseError("unbalanced `$'`".into()));
                };
                i += 2;
                let simple = match e {
                    'a' => Some('\x07'),
                    'b' => Some('\x08'),
                    'e' | 'E' => Some('\x1b'),
                    'f' => Some('\x0c'),
                    'n' => Some('\n'),
                    'r' => Some('\r'),
                    't' => Some('\t'),
                    'v' => Some('\x0b'),
                    '\\' | '\'' | '"' | '?' => Some(e),
                    _ => None,
                };
                if let Some(c) = simple {
                    push(&mut out, Some(c), &mut ended);
                    continue;
                }
                let (len, value) = match e {
                    '0'..='7' => {
                        let (len, v) = number(chars, i - 1, 3, 8);
                        (len.saturating_sub(1), v)
                    }
                    'x' => number(chars, i, 2, 16),
                    'u' => number(chars, i, 4, 16),
                    'U' => number(chars, i, 8, 16),
                    'c' => match chars.get(i) {
                        Some(&x) => (1, (x as u32) & 0x1f),
                        None => return Err(ParseError("unbalanced `$'`".into())),
                    },
                    other => {
                        push(&mut out, Some('\\'), &mut ended);
                        push(&mut out, Some(other), &mut ended);
                        continue;
                    }
                };
                if len == 0 && matches!(e, 'x' | 'u' | 'U') {
                    push(&mut out, Some('\\'), &mut ended);
                    push(&mut out, Some(e), &mut ended);
                    continue;
                }
                i += len;
                push(&mut out, char::from_u32(value), &mut ended);
            }
            c => {
                push(&mut out, Some(c), &mut ended);
                i += 1;
            }
        }
    }
}

/// Length of the parenthesized text starting at `chars[0] == '('`, through its `)`.
fn matching_paren(chars: &[char]) -> Result<usize, ParseError> {
    let mut level = 0usize;
    let mut i = 0;
    let mut quote: Option<char> = None;
    while i < chars.len() {
        let c = chars[i];
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => i += 1,
            (Some(_), _) => {}
            (None, '\\') => i += 1,
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => level += 1,
            (None, ')') => {
                level = level.saturating_sub(1);
                if level == 0 {
                    return Ok(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    Err(ParseError("unbalanced parenthesis".into()))
}

/// A `$…` or backtick construct at `chars[0]`: its length, and the commands it runs (parsed
/// into `nested`) when it is a command substitution.
fn substitution(
    chars: &[char],
    depth: usize,
    dirs: &[String],
    nested: &mut Vec<SimpleCommand>,
) -> Result<(usize, Option<()>), ParseError> {
    let mut run = |inner: &str| -> Result<(), ParseError> {
        nested.extend(
            parse_depth(inner, depth + 1, dirs)?
                .into_iter()
                .map(|mut c| {
                    c.nested = true;
                    c
                }),
        );
        Ok(())
    };
    if chars[0] == '`' {
        let end = chars[1..]
            .iter()
            .position(|&c| c == '`')
            .ok_or_else(|| ParseError("unbalanced backtick".into()))?;
        let inner: String = chars[1..1 + end].iter().collect();
        run(&inner)?;
        return Ok((end + 2, Some(())));
    }
    match chars.get(1) {
        Some('(') => {
            if chars.get(2) == Some(&'(') {
                // Arithmetic `$(( … ))`: no commands, but may hide substitutions.
                let len = matching_paren(&chars[1..])?;
                let inner: String = chars[3..len.saturating_sub(1).max(3)].iter().collect();
                if inner.contains("$(") || inner.contains('`') {
                    return Err(ParseError("command substitution inside arithmetic".into()));
                }
                return Ok((len + 1, None));
            }
            let len = matching_paren(&chars[1..])?;
            let inner: String = chars[2..len].iter().collect();
            run(&inner)?;
            Ok((len + 1, Some(())))
        }
        Some('{') => {
            let end = chars
                .iter()
                .position(|&c| c == '}')
                .ok_or_else(|| ParseError("unbalanced `${`".into()))?;
            let inner: String = chars[2..end].iter().collect();
            if inner.contains("$(") || inner.contains('`') {
                return Err(ParseError("command substitution inside `${…}`".into()));
            }
            Ok((end + 1, None))
        }
        Some(c) if c.is_ascii_alphanumeric() || "_@*#?$!-".contains(*c) => {
            let len = if c.is_ascii_alphabetic() || *c == '_' {
                1 + chars[1..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                    .count()
            } else {
                2
            };
            Ok((len, None))
        }
        _ => Ok((1, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argvs(line: &str) -> Vec<String> {
        parse(line)
            .unwrap()
            .iter()
            .map(|c| c.argv.join(" "))
            .collect()
    }

    #[test]
    fn compound_commands_split() {
        assert_eq!(
            argvs("cargo test && curl x | sh"),
            ["cargo test", "curl x", "sh"]
        );
        let p = parse("cargo test && curl x | sh").unwrap();
        assert!(p[2].stdin_piped && !p[1].stdin_piped);
        assert_eq!(argvs("a; b || c & d"), ["a", "b", "c", "d"]);
        assert_eq!(argvs("(cd x && make) ; { y; }"), ["cd x", "make", "y"]);
    }

    #[test]
    fn substitutions_are_parsed() {
        assert_eq!(
            argvs("echo $(curl evil)"),
            ["echo $(curl evil)", "curl evil"]
        );
        assert_eq!(
            argvs("echo \"`rm -rf /`\""),
            ["echo `rm -rf /`", "rm -rf /"]
        );
        assert_eq!(argvs("diff <(ls a) b"), ["diff <(…) b", "ls a"]);
        assert_eq!(argvs("echo 'no $(sub)'"), ["echo no $(sub)"]);
    }

    #[test]
    fn wrappers_and_sh_c_are_unwrapped() {
        assert_eq!(
            argvs("sh -c 'curl x | bash'"),
            ["sh -c curl x | bash", "curl x", "bash"]
        );
        assert_eq!(
            argvs("FOO=1 env A=b timeout 5 wget y"),
            ["env A=b timeout 5 wget y", "timeout 5 wget y", "wget y"]
        );
        assert_eq!(
            argvs("find . -exec rm {} \\;"),
            ["find . -exec rm {} ;", "rm {}"]
        );
    }

    #[test]
    fn redirections_are_kept() {
        let p = parse("cargo test 2>&1 > out.txt < in").unwrap();
        assert_eq!(p[0].argv, ["cargo", "test"]);
        let ops: Vec<(&str, &str)> = p[0]
            .redirects
            .iter()
            .map(|r| (r.op.as_str(), r.target.as_str()))
            .collect();
        assert_eq!(ops, [("2>&", "1"), (">", "out.txt"), ("<", "in")]);
        assert!(!p[0].redirects[0].writes() && p[0].redirects[1].writes());
    }

    /// `cd` changes where the commands after it run; a subshell's `cd` ends with it, and a
    /// failed `cd` leaves the old directory possible.
    #[test]
    fn commands_carry_the_directories_they_may_run_in() {
        let dirs = |line: &str| -> Vec<Vec<String>> {
            parse(line).unwrap().into_iter().map(|c| c.dirs).collect()
        };
        assert_eq!(dirs("cd / && rm -rf x"), [vec!["."], vec![".", "/"]]);
        assert_eq!(
            dirs("(cd sub; make) && ls"),
            [vec!["."], vec![".", "sub"], vec!["."]]
        );
        assert_eq!(
            dirs("cd a && cd ../b && cd"),
            [vec!["."], vec![".", "a"], vec![".", "a", "../b", "b"]]
        );
        // A substitution is parsed again from every directory the line reaches.
        let p = parse("cd / && echo $(rm x)").unwrap();
        let rm = p.iter().find(|c| c.argv == ["rm", "x"]).unwrap();
        assert_eq!(rm.dirs, [".", "/"]);
        assert!(parse("CDPATH=/ cd etc").is_err());
    }

    /// ANSI-C quoting is decoded (bash runs `$'\x67it'` as `git`); brace expansion, which
    /// makes words the parser would not see, is refused.
    #[test]
    fn ansi_c_quoting_and_brace_expansion() {
        assert_eq!(argvs("$'\\x67it' push"), ["git push"]);
        assert_eq!(argvs("$'\\147it' $'a\\tb'"), ["git a\tb"]);
        assert_eq!(argvs("echo $'it\\'s'"), ["echo it's"]);
        for bad in ["{sudo,ls}", "git {push,x}", "echo {1..3}"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            argvs("find . -exec rm {} +"),
            ["find . -exec rm {} +", "rm {}"]
        );
    }

    #[test]
    fn unparseable_is_an_error() {
        for bad in [
            "echo 'open",
            "cat <<EOF\nx\nEOF",
            "for f in *; do rm $f; done",
            "a |",
            "echo $(x",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse("$CMD arg").unwrap()[0].dynamic_name);
    }
}
