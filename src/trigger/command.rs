//! The comment-command grammar: `/agent fix [free text]`, `/agent plan`, `/agent stop`,
//! `/agent approve [RUN]`, `/agent retry`.
//!
//! The command opens the comment (leading blank lines and spaces allowed). The prefix and the
//! verb are matched case-insensitively; words are separated by any whitespace. `fix` takes
//! free text, which may run over several lines; `approve` takes at most one run id; `plan`,
//! `stop` and `retry` take nothing. Anything else is not a command.

/// A parsed comment command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Start a fix run; the text (possibly empty) adds to the request.
    Fix(String),
    /// Start a read-only planning run.
    Plan,
    /// Stop the running run.
    Stop,
    /// Approve a pending `ask`, of the named run or the latest one.
    Approve(Option<String>),
    /// Run the last request again.
    Retry,
}

/// Why a comment is not a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotACommand {
    /// The comment does not start with the prefix at all: ordinary conversation.
    NoPrefix,
    /// It starts with the prefix but does not follow the grammar.
    Malformed(String),
}

/// Parse `body` with the configured `prefix` (e.g. `/agent`).
pub fn parse(prefix: &str, body: &str) -> Result<Command, NotACommand> {
    let text = body.trim_start();
    let prefix = prefix.trim();
    if prefix.is_empty() {
        return Err(NotACommand::NoPrefix);
    }
    let head = text.get(..prefix.len()).ok_or(NotACommand::NoPrefix)?;
    if !head.eq_ignore_ascii_case(prefix) {
        return Err(NotACommand::NoPrefix);
    }
    let rest = &text[prefix.len()..];
    // `/agentfix` or `/agents` is another word, not our command.
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return Err(NotACommand::NoPrefix);
    }
    let rest = rest.trim_start();
    let verb_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let (verb, args) = (&rest[..verb_end], rest[verb_end..].trim());
    let malformed = |why: &str| Err(NotACommand::Malformed(why.to_string()));
    match verb.to_ascii_lowercase().as_str() {
        "fix" => Ok(Command::Fix(args.to_string())),
        "plan" | "stop" | "retry" if !args.is_empty() => {
            malformed(&format!("`{prefix} {verb}` takes no arguments"))
        }
        "plan" => Ok(Command::Plan),
        "stop" => Ok(Command::Stop),
        "retry" => Ok(Command::Retry),
        "approve" => {
            if args.is_empty() {
                return Ok(Command::Approve(None));
            }
            let ok = args.len() <= 64
                && args
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if ok {
                Ok(Command::Approve(Some(args.to_string())))
            } else {
                malformed(&format!("`{prefix} approve` takes one run id"))
            }
        }
        "" => malformed(&format!(
            "`{prefix}` needs a command: fix, plan, stop, approve or retry"
        )),
        _ => malformed(&format!(
            "unknown command `{}`; use fix, plan, stop, approve or retry",
            verb.chars().take(40).collect::<String>()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_case_and_whitespace() {
        assert_eq!(
            parse("/agent", "/agent fix"),
            Ok(Command::Fix(String::new()))
        );
        assert_eq!(
            parse("/agent", "  \n/AGENT   Fix   the parser\nand the tests  "),
            Ok(Command::Fix("the parser\nand the tests".into()))
        );
        assert_eq!(parse("/agent", "/Agent\tplan"), Ok(Command::Plan));
        assert_eq!(parse("/agent", "/agent STOP\n"), Ok(Command::Stop));
        assert_eq!(parse("/agent", "/agent retry"), Ok(Command::Retry));
        assert_eq!(
            parse("/agent", "/agent approve"),
            Ok(Command::Approve(None))
        );
        assert_eq!(
            parse("/agent", "/agent approve 01JD9XYZ"),
            Ok(Command::Approve(Some("01JD9XYZ".into())))
        );
        assert_eq!(parse("@bot", "@BOT plan"), Ok(Command::Plan));
    }

    #[test]
    fn junk_is_rejected() {
        for body in [
            "/agent",
            "/agent   ",
            "/agent fixx",
            "/agent plan now please",
            "/agent stop it",
            "/agent retry 3",
            "/agent approve a b",
            "/agent approve ../../x",
            "/agent rm -rf /",
        ] {
            assert!(
                matches!(parse("/agent", body), Err(NotACommand::Malformed(_))),
                "{body:?}"
            );
        }
        for body in [
            "",
            "please /agent fix",
            "/agentfix",
            "/agents fix",
            "> /agent fix (quoted)",
            "/agen",
            "éé",
        ] {
            assert_eq!(
                parse("/agent", body),
                Err(NotACommand::NoPrefix),
                "{body:?}"
            );
        }
    }
}
