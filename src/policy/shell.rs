//! A conservative parser of POSIX shell command lines, for judging, never for running.
//!
//! It splits a command line into every simple command it would run: the parts of `&&`, `||`,
//! `;`, `&`, pipelines, subshells `( … )` and groups `{ …; }`, command substitutions `$(…)` and
//! backticks (also inside double quotes), process substitutions `<(…)`, the scripts of
//! `sh -c '…'`, and the commands behind wrappers such as `env`, `timeout`, `xargs` or
//! `find -exec`. Redirections are kept with their targets. Anything it does not understand
//! (unbalanced quotes, here-documents, `for`/`case` loops, `eval`-like constructs) is an error,
//! which the policy turns into `ask`.

use serde::Serialize;

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

/// Deepest nesting of substitutions and `sh -c` scripts followed.
const MAX_DEPTH: usize = 8;

/// Every simple command of `line`, in order.
pub fn parse(line: &str) -> Result<Vec<SimpleCommand>, ParseError> {
    parse_depth(line, 0)
}

fn parse_depth(line: &str, depth: usize) -> Result<Vec<SimpleCommand>, ParseError> {
    if depth > MAX_DEPTH {
        return Err(ParseError("commands nested too deeply to judge".into()));
    }
    let mut nested = Vec::new();
    let toks = tokenize(line, depth, &mut nested)?;
    let mut out = Vec::new();
    let mut cur = SimpleCommand::default();
    let mut piped_next = false;
    let mut i = 0;
    let mut at_start = true;
    while i < toks.len() {
        match &toks[i] {
            Tok::Op(op) => match op.as_str() {
                "&&" | "||" | ";" | "&" | "\n" | "|" | "|&" | "(" | ")" => {
                    if !cur.argv.is_empty() || !cur.redirects.is_empty() {
                        out.push(std::mem::take(&mut cur));
                    } else if matches!(op.as_str(), "|" | "|&" | "&&" | "||") && out.is_empty() {
                        return Err(ParseError(format!("`{op}` with nothing before it")));
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
        out.push(cur);
    } else if piped_next {
        return Err(ParseError("pipeline ends without a command".into()));
    }
    // Commands behind wrappers and inside `sh -c` are judged too.
    let mut all = Vec::new();
    for cmd in out {
        let inner = unwrap(&cmd, depth)?;
        all.push(cmd);
        all.extend(inner);
    }
    all.extend(nested);
    Ok(all)
}

fn is_redirect(op: &str) -> bool {
    matches!(
        op.trim_start_matches(|c: char| c.is_ascii_digit()),
        ">" | ">>" | "<" | ">|" | "&>" | "&>>" | ">&" | "<&" | "<>" | "<<<"
    )
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

fn base_name(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// The commands a wrapper runs (`env X=1 cmd`, `timeout 5 cmd`, `sh -c 'script'`, `xargs cmd`,
/// `find … -exec cmd {} ;`).
fn unwrap(cmd: &SimpleCommand, depth: usize) -> Result<Vec<SimpleCommand>, ParseError> {
    let argv = &cmd.argv;
    let Some(first) = argv.first() else {
        return Ok(Vec::new());
    };
    let name = base_name(first);
    let inner_from = |skip: usize| -> Vec<SimpleCommand> {
        if skip < argv.len() {
            let inner = SimpleCommand {
                argv: argv[skip..].to_vec(),
                redirects: Vec::new(),
                stdin_piped: cmd.stdin_piped,
                dynamic_name: argv[skip].contains('$'),
                nested: true,
            };
            let mut out = unwrap(&inner, depth + 1).unwrap_or_default();
            out.insert(0, inner);
            out
        } else {
            Vec::new()
        }
    };
    let skip_opts = |mut i: usize, with_value: &[&str]| -> usize {
        while i < argv.len() && argv[i].starts_with('-') && argv[i] != "-" {
            if argv[i] == "--" {
                return i + 1;
            }
            if with_value.contains(&argv[i].as_str()) {
                i += 1;
            }
            i += 1;
        }
        i
    };
    Ok(match name {
        "sh" | "bash" | "zsh" | "dash" | "ksh" | "ash" => {
            match argv.iter().position(|a| {
                a == "-c"
                    || (a.starts_with('-')
                        && !a.starts_with("--")
                        && a.ends_with('c')
                        && a.len() > 1)
            }) {
                Some(p) if p + 1 < argv.len() => parse_depth(&argv[p + 1], depth + 1)?
                    .into_iter()
                    .map(|mut c| {
                        c.nested = true;
                        c
                    })
                    .collect(),
                Some(_) => return Err(ParseError(format!("`{first} -c` without a script"))),
                None => Vec::new(),
            }
        }
        "env" => {
            let mut i = skip_opts(1, &["-u", "-C", "-S"]);
            while i < argv.len() && is_assignment(&argv[i]) {
                i += 1;
            }
            inner_from(i)
        }
        "nice" => inner_from(skip_opts(1, &["-n"])),
        "timeout" => {
            let i = skip_opts(1, &["-s", "-k", "--signal", "--kill-after"]);
            inner_from(i + 1)
        }
        "nohup" | "time" | "command" | "exec" | "builtin" | "stdbuf" | "ionice" | "chrt"
        | "setsid" | "unbuffer" => inner_from(skip_opts(1, &["-n", "-c", "-p"])),
        "xargs" => inner_from(skip_opts(
            1,
            &["-I", "-n", "-P", "-L", "-d", "-s", "-a", "-E"],
        )),
        "find" | "fd" => {
            let mut out = Vec::new();
            let mut i = 1;
            while i < argv.len() {
                if matches!(
                    argv[i].as_str(),
                    "-exec"
                        | "-execdir"
                        | "-ok"
                        | "-okdir"
                        | "-x"
                        | "--exec"
                        | "-X"
                        | "--exec-batch"
                ) {
                    let end = argv[i + 1..]
                        .iter()
                        .position(|a| a == ";" || a == "+")
                        .map_or(argv.len(), |p| i + 1 + p);
                    if end > i + 1 {
                        let inner = SimpleCommand {
                            argv: argv[i + 1..end].to_vec(),
                            nested: true,
                            ..SimpleCommand::default()
                        };
                        let deeper = unwrap(&inner, depth + 1)?;
                        out.push(inner);
                        out.extend(deeper);
                    }
                    i = end;
                }
                i += 1;
            }
            out
        }
        _ => Vec::new(),
    })
}

fn tokenize(
    line: &str,
    depth: usize,
    nested: &mut Vec<SimpleCommand>,
) -> Result<Vec<Tok>, ParseError> {
    let chars: Vec<char> = line.chars().collect();
    let mut toks = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut dynamic = false;
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
                            let (len, text) = substitution(&chars[i..], depth, nested)?;
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
            '$' | '`' => {
                let (len, sub) = substitution(&chars[i..], depth, nested)?;
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
                    nested.extend(parse_depth(&inner, depth + 1)?.into_iter().map(|mut c| {
                        c.nested = true;
                        c
                    }));
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
                word.push(c);
                in_word = true;
                i += 1;
            }
        }
    }
    flush(&mut toks, &mut word, &mut in_word, &mut dynamic);
    Ok(toks)
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
    nested: &mut Vec<SimpleCommand>,
) -> Result<(usize, Option<()>), ParseError> {
    let mut run = |inner: &str| -> Result<(), ParseError> {
        nested.extend(parse_depth(inner, depth + 1)?.into_iter().map(|mut c| {
            c.nested = true;
            c
        }));
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
