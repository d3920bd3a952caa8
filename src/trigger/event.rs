//! One GitHub event, parsed once: its name and the parts of its payload the agent reads.
//!
//! Every reader of GitHub's payload shape reads this type — the receiver (the job's lane and
//! label), the runner (the App installation), the Action (the default branch) and
//! [`super::evaluate`] — so the shape is written down once, here, and the repository's name
//! comes from one rule ([`Event::repo`]).
//!
//! [`Event::parse`] takes a body whole and strictly: text that is not UTF-8 or not one JSON
//! value is [`Malformed::NotJson`]; a field the agent reads holding a value of another type,
//! or given twice, is [`Malformed::Shape`]. Everything else in a payload (most of it: a
//! `repository` object of ~100 URLs and counters, users with a dozen URLs each, the issue's
//! body) is checked to be JSON and skipped. [`Event::stored`] is the payload written back with
//! only what is read — what the webhook bot stores of a delivery (an 11.8 KB `issues.labeled`
//! example keeps ~0.4 KB) and parses again when the job runs.

use std::borrow::Cow;

use serde::de::{Deserializer, IgnoredAny, Visitor};
use serde::ser::{SerializeMap as _, Serializer};
use serde::{Deserialize, Serialize};

use crate::task::RepoRef;

/// Events that can start or control a run; the webhook bot answers every other event 200 and
/// drops it unparsed.
pub const HANDLED: &[&str] = &[
    "issues",
    "issue_comment",
    "pull_request_review_comment",
    "workflow_run",
];

/// Longest owner or repository name taken from a payload (GitHub's limit is 100 for names and
/// 39 for owners).
const MAX_NAME: usize = 100;

/// A body that is not a GitHub event.
#[derive(Debug, thiserror::Error)]
pub enum Malformed {
    /// The text is not UTF-8.
    #[error("payload is not UTF-8: {0}")]
    NotUtf8(#[source] std::str::Utf8Error),
    /// The text is not one JSON value (or nests deeper than 128).
    #[error("payload is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// JSON, but a field the agent reads has another type, or is given twice.
    #[error("payload does not have the shape of a GitHub event: {0}")]
    Shape(#[source] serde_json::Error),
}

impl Malformed {
    /// Whether the text was not JSON at all (rather than JSON of another shape).
    pub fn is_not_json(&self) -> bool {
        !matches!(self, Malformed::Shape(_))
    }
}

/// One event: its name (`X-GitHub-Event`, or `GITHUB_EVENT_NAME` in Actions) and payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Event<'a> {
    /// The event's name.
    pub name: &'a str,
    /// What the agent reads of its payload.
    pub payload: Payload<'a>,
}

impl<'a> Event<'a> {
    /// Parse `body` as the payload of event `name`, borrowing its strings where they need no
    /// unescaping.
    pub fn parse(name: &'a str, body: &'a [u8]) -> Result<Self, Malformed> {
        let text = std::str::from_utf8(body).map_err(Malformed::NotUtf8)?;
        let Obj(payload) = serde_json::from_str(text).map_err(|e| match e.classify() {
            serde_json::error::Category::Data => Malformed::Shape(e),
            _ => Malformed::NotJson(e),
        })?;
        Ok(Event { name, payload })
    }

    /// The payload as the webhook bot stores it: only what is read, as compact JSON.
    /// [`Event::parse`] of it gives this event back.
    pub fn stored(&self) -> Vec<u8> {
        #[allow(clippy::expect_used)]
        serde_json::to_vec(&self.payload)
            .expect("strings, integers and maps with string keys always serialize")
    }

    /// `action`, or `""` when there is none.
    pub fn action(&self) -> &str {
        self.payload.action.as_deref().unwrap_or("")
    }

    /// The repository the event is about — the one rule every reader uses: `owner.login` and
    /// `name`, else `full_name` split at its `/`. `None` when neither is there, or a part is
    /// not a name GitHub gives (letters, digits, `-`, `_`, `.`; not `.` or `..`; at most 100
    /// bytes), so it can never climb out of a directory or change a URL it is put into.
    pub fn repo(&self) -> Option<RepoRef> {
        let r = self.payload.repository.as_ref()?;
        let owner = r.owner.as_ref().and_then(|o| o.login.as_deref());
        let (owner, name) = match (owner, r.name.as_deref()) {
            (Some(owner), Some(name)) => (owner, name),
            _ => r.full_name.as_deref()?.split_once('/')?,
        };
        (is_name(owner) && is_name(name)).then(|| RepoRef {
            owner: owner.to_string(),
            name: name.to_string(),
        })
    }

    /// The repository's default branch, when the payload says.
    pub fn default_branch(&self) -> Option<&str> {
        self.payload.repository.as_ref()?.default_branch.as_deref()
    }

    /// The App installation the delivery came through.
    pub fn installation_id(&self) -> Option<u64> {
        self.payload.installation.as_ref()?.id
    }

    /// The lane of the event: the issue or pull request it belongs to (`owner/name#N`), or for
    /// a CI run without a pull request its branch (`owner/name@branch`). `None` for events
    /// that name neither.
    pub fn lane(&self) -> Option<String> {
        let repo = self.repo()?;
        let p = &self.payload;
        let number = match self.name {
            "issues" | "issue_comment" => p.issue.as_ref()?.number?,
            "pull_request_review_comment" => p.pull_request.as_ref()?.number?,
            "workflow_run" => {
                let run = p.workflow_run.as_ref()?;
                match run.pull_request_number() {
                    Some(n) => n,
                    None => return Some(format!("{repo}@{}", run.head_branch.as_deref()?)),
                }
            }
            _ => return None,
        };
        Some(format!("{repo}#{number}"))
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The parts of a payload the agent reads. Absent and `null` fields are `None`.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
pub struct Payload<'a> {
    /// `action` (`labeled`, `created`, `completed`, …).
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub action: Option<Cow<'a, str>>,
    /// `installation`: which App installation sent it.
    #[serde(
        default,
        deserialize_with = "object",
        skip_serializing_if = "Option::is_none"
    )]
    pub installation: Option<Installation>,
    /// `label`: the label just added (`issues.labeled`).
    #[serde(
        borrow,
        default,
        deserialize_with = "object",
        skip_serializing_if = "Option::is_none"
    )]
    pub label: Option<Label<'a>>,
    /// `sender`: who caused the event.
    #[serde(
        borrow,
        default,
        deserialize_with = "object",
        skip_serializing_if = "Option::is_none"
    )]
    pub sender: Option<User<'a>>,
    /// `repository`.
    #[serde(
        borrow,
        default,
        deserialize_with = "object",
        skip_serializing_if = "Option::is_none"
    )]
    pub repository: Option<Repository<'a>>,
    /// `issue` (also the issue side of a pull request, for comments on one).
    #[serde(
        borrow,
        default,
        deserialize_with = "object",
        skip_serializing_if = "Option::is_none"
    )]
    pub issue: Option<Issue<'a>>,
    /// `pull_request` (review comments).
    #[serde(
        default,
        deserialize_with = "object",
        skip_serializing_if = "Option::is_none"
    )]
    pub pull_request: Option<Numbered>,
    /// `comment`.
    #[serde(
        borrow,
        default,
        deserialize_with = "object",
        skip_serializing_if = "Option::is_none"
    )]
    pub comment: Option<Comment<'a>>,
    /// `workflow_run`.
    #[serde(
        borrow,
        default,
        deserialize_with = "object",
        skip_serializing_if = "Option::is_none"
    )]
    pub workflow_run: Option<WorkflowRun<'a>>,
}

/// `installation`.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
pub struct Installation {
    /// Its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
}

/// `label`.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
pub struct Label<'a> {
    /// Its name.
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub name: Option<Cow<'a, str>>,
}

/// A user: `sender`.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
pub struct User<'a> {
    /// Login.
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub login: Option<Cow<'a, str>>,
    /// Numeric id (for the noreply address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// `User`, `Bot` or `Organization`.
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        rename = "type",
        skip_serializing_if = "Option::is_none"
    )]
    pub kind: Option<Cow<'a, str>>,
}

/// A user named by login only (`repository.owner`, `comment.user`).
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
pub struct Login<'a> {
    /// Login.
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub login: Option<Cow<'a, str>>,
}

/// `repository`.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
pub struct Repository<'a> {
    /// `name`.
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub name: Option<Cow<'a, str>>,
    /// `owner/name`.
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub full_name: Option<Cow<'a, str>>,
    /// The default branch.
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub default_branch: Option<Cow<'a, str>>,
    /// The owner.
    #[serde(
        borrow,
        default,
        deserialize_with = "object",
        skip_serializing_if = "Option::is_none"
    )]
    pub owner: Option<Login<'a>>,
}

/// `issue`.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
pub struct Issue<'a> {
    /// Its number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u64>,
    /// `open` or `closed`.
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub state: Option<Cow<'a, str>>,
    /// There when the issue is a pull request (whatever it holds, `null` too).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub pull_request: Option<Mark>,
}

/// A field whose presence is all that is read: any value reads as one, and it is stored as
/// `{}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark;

impl<'de> Deserialize<'de> for Mark {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(d).map(|_| Mark)
    }
}

impl Serialize for Mark {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_map(Some(0))?.end()
    }
}

/// `Some` for any value, `null` too (where `Option`'s own reading would say `None`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Mark>, D::Error> {
    Mark::deserialize(d).map(Some)
}

/// An object read for its `number` (`pull_request`, `workflow_run.pull_requests[]`).
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
pub struct Numbered {
    /// The number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u64>,
}

/// `comment` (issue and review comments).
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
pub struct Comment<'a> {
    /// Its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// Its text.
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub body: Option<Cow<'a, str>>,
    /// Its author.
    #[serde(
        borrow,
        default,
        deserialize_with = "object",
        skip_serializing_if = "Option::is_none"
    )]
    pub user: Option<Login<'a>>,
    /// The file a review comment is on.
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub path: Option<Cow<'a, str>>,
    /// The line a review comment is on (`null` once outdated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// The line it was first made on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_line: Option<u64>,
    /// The diff around a review comment.
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub diff_hunk: Option<Cow<'a, str>>,
}

/// `workflow_run`.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
pub struct WorkflowRun<'a> {
    /// Its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// The workflow's name.
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub name: Option<Cow<'a, str>>,
    /// `success`, `failure`, … (`null` while it runs).
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub conclusion: Option<Cow<'a, str>>,
    /// The branch it ran on.
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub head_branch: Option<Cow<'a, str>>,
    /// The commit it ran on.
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub head_sha: Option<Cow<'a, str>>,
    /// The repository holding that branch.
    #[serde(
        borrow,
        default,
        deserialize_with = "object",
        skip_serializing_if = "Option::is_none"
    )]
    pub head_repository: Option<FullName<'a>>,
    /// The pull requests of the branch (empty for a fork's).
    #[serde(
        default,
        deserialize_with = "objects",
        skip_serializing_if = "Option::is_none"
    )]
    pub pull_requests: Option<Vec<Numbered>>,
}

impl WorkflowRun<'_> {
    /// The first of its pull requests that has a number.
    pub fn pull_request_number(&self) -> Option<u64> {
        self.pull_requests.as_ref()?.iter().find_map(|p| p.number)
    }
}

/// A repository named by `full_name` only (`workflow_run.head_repository`).
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
pub struct FullName<'a> {
    /// `owner/name`.
    #[serde(
        borrow,
        default,
        deserialize_with = "text",
        skip_serializing_if = "Option::is_none"
    )]
    pub full_name: Option<Cow<'a, str>>,
}

/// Optional text, borrowed from the body when it has no escapes (`Option<Cow<str>>` on its
/// own would always copy it).
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    #[derive(Deserialize)]
    struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(Option::<Text<'de>>::deserialize(d)?.map(|Text(t)| t))
}

/// `T` read from a JSON object only: serde reads a struct from an array too (its elements in
/// field order), a reading no GitHub payload means and the payload's own JSON would not give.
struct Obj<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(MapOnly(d)).map(Obj)
    }
}

/// An optional object (`null` reads as absent).
fn object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    Ok(Option::<Obj<T>>::deserialize(d)?.map(|Obj(t)| t))
}

/// An optional array of objects.
fn objects<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Vec<T>>, D::Error> {
    Ok(Option::<Vec<Obj<T>>>::deserialize(d)?.map(|v| v.into_iter().map(|Obj(t)| t).collect()))
}

/// A deserializer that reads a struct as a map only.
struct MapOnly<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for MapOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn parse(v: &Value) -> Result<Payload<'static>, Malformed> {
        let body: &'static [u8] = Box::leak(serde_json::to_vec(v).unwrap().into_boxed_slice());
        Event::parse("issues", body).map(|e| e.payload)
    }

    /// What the bot stores of `v`, as JSON.
    fn stored(v: &Value) -> Value {
        let body = serde_json::to_vec(v).unwrap();
        let event = Event::parse("issues", &body).unwrap();
        let stored = event.stored();
        // The stored payload reads as the event it came from.
        assert_eq!(Event::parse("issues", &stored).unwrap(), event);
        serde_json::from_slice(&stored).unwrap()
    }

    #[test]
    fn keeps_the_fields_read_and_drops_the_rest() {
        let full = json!({
            "action": "labeled",
            "label": {"name": "agent", "color": "fff"},
            "issue": {"number": 4, "state": "open", "body": "long text", "user": {"login": "a"},
                      "pull_request": {"url": "u"}},
            "repository": {"name": "r", "full_name": "o/r", "owner": {"login": "o", "id": 1},
                           "forks": 3, "default_branch": "main"},
            "sender": {"login": "o", "id": 7, "type": "User", "avatar_url": "x"},
            "workflow_run": {"pull_requests": [{"number": 9, "url": "u"}, {}], "id": 1},
            "organization": {"login": "o"},
            "installation": {"id": 5, "node_id": "MDIz"},
        });
        assert_eq!(
            stored(&full),
            json!({
                "action": "labeled",
                "label": {"name": "agent"},
                "issue": {"number": 4, "state": "open", "pull_request": {}},
                "repository": {"name": "r", "full_name": "o/r", "owner": {"login": "o"},
                               "default_branch": "main"},
                "sender": {"login": "o", "id": 7, "type": "User"},
                "workflow_run": {"pull_requests": [{"number": 9}, {}], "id": 1},
                "installation": {"id": 5},
            })
        );
        // `null` reads as absent, except where presence is what is read.
        let nulls = json!({"action": null, "sender": null, "issue": {"number": 1,
                           "pull_request": null, "state": null}});
        assert_eq!(
            stored(&nulls),
            json!({"issue": {"number": 1, "pull_request": {}}})
        );
    }

    /// Jobs queued by the version before keep the scanner's cut of the payload (the same
    /// fields, as sent): they read as the event they were cut from.
    #[test]
    fn payloads_stored_by_the_scanner_read_the_same() {
        let whole = json!({
            "action": "labeled", "label": {"name": "agent", "color": "fff"},
            "issue": {"number": 4, "state": "open", "body": "long text",
                      "pull_request": {"url": "u"}},
            "repository": {"name": "r", "full_name": "o/r", "owner": {"login": "o", "id": 1},
                           "default_branch": "main"},
            "sender": {"login": "o", "id": 7, "type": "User", "avatar_url": "x"},
            "installation": {"id": 5, "node_id": "MDIz"},
        });
        let cut = br#"{"action":"labeled","label":{"name":"agent"},"issue":{"number":4,"state":"open","pull_request":{"url":"u"}},"repository":{"name":"r","full_name":"o/r","owner":{"login":"o"},"default_branch":"main"},"sender":{"login":"o","id":7,"type":"User"},"installation":{"id":5}}"#;
        assert_eq!(
            Event::parse("issues", cut).unwrap().payload,
            parse(&whole).unwrap()
        );
    }

    /// A field the agent reads holding a value of another type is refused, never read as
    /// absent or half read: objects (even as an array serde would read by position), numbers
    /// that are not unsigned integers, strings.
    #[test]
    fn values_of_another_shape_are_refused() {
        for odd in [
            json!({"repository": 42}),
            json!({"repository": "o/r"}),
            json!({"issue": [{"number": 1, "x": 2}]}),
            json!({"repository": ["r", "o/r", "main", {"login": "o"}]}),
            json!({"label": "agent"}),
            json!({"comment": {"body": {"nested": [1, 2.5, true]}}}),
            json!({"comment": {"id": 1.5e3}}),
            json!({"comment": {"id": -1}}),
            json!({"comment": {"id": "1"}}),
            json!({"sender": {"login": 7}}),
            json!({"workflow_run": {"pull_requests": [{"number": 9}, 5]}}),
            json!({"workflow_run": {"pull_requests": {"number": 9}}}),
            json!({"installation": {"id": true}}),
            json!([1, {"action": "x"}]),
            json!(["labeled"]),
            json!("text"),
            json!(null),
        ] {
            let err = parse(&odd).unwrap_err();
            assert!(matches!(err, Malformed::Shape(_)), "{odd}: {err}");
            assert!(!err.is_not_json());
        }
        // What is not read may be anything.
        let ok = json!({"organization": [1, {"x": null}], "issue": {"labels": "x", "number": 2}});
        assert_eq!(parse(&ok).unwrap().issue.unwrap().number, Some(2));
    }

    #[test]
    fn escaped_keys_read_as_json_reads_them_and_repeated_keys_are_refused() {
        let body = br#"{"act\u0069on": "a", "sender": {"login": "x"}}"#;
        let event = Event::parse("issues", body).unwrap();
        assert_eq!(event.action(), "a");
        // A field given twice could be read two ways (JSON leaves it open): refused.
        for body in [
            &br#"{"action": "a", "act\u0069on": "b"}"#[..],
            br#"{"sender": {"login": "x", "login": "y"}}"#,
        ] {
            let err = Event::parse("issues", body).unwrap_err();
            assert!(err.to_string().contains("duplicate field"), "{err}");
        }
        // A repeated field that is not read is skipped like the rest.
        assert!(Event::parse("issues", br#"{"x": 1, "x": 2}"#).is_ok());
    }

    #[test]
    fn strings_are_read_unescaped_and_stored_so_they_read_the_same() {
        let body = r#"{
  "comment": {
    "body": "say \"hi\"\n\u00e9 é \ud83d\ude00",
    "id": 1500, "user": { "login" : "a" }
  },
  "action": null
}"#;
        let event = Event::parse("issue_comment", body.as_bytes()).unwrap();
        let comment = event.payload.comment.as_ref().unwrap();
        assert_eq!(comment.body.as_deref(), Some("say \"hi\"\né é 😀"));
        // Text without escapes is borrowed from the body, not copied.
        assert!(matches!(
            comment.user.as_ref().unwrap().login,
            Some(Cow::Borrowed("a"))
        ));
        let stored = event.stored();
        assert_eq!(
            String::from_utf8(stored.clone()).unwrap(),
            r#"{"comment":{"id":1500,"body":"say \"hi\"\né é 😀","user":{"login":"a"}}}"#
        );
        assert_eq!(Event::parse("issue_comment", &stored).unwrap(), event);
    }

    #[test]
    fn bodies_that_are_not_json_are_refused() {
        for bad in [
            &b"{not json"[..],
            b"",
            b"{\"a\": 1} trailing",
            b"{\"a\": [1,}",
            b"\xff{}",
        ] {
            let err = Event::parse("issues", bad).unwrap_err();
            assert!(
                err.is_not_json(),
                "{:?}: {err}",
                String::from_utf8_lossy(bad)
            );
        }
        // Skipped values are checked too.
        assert!(Event::parse("issues", br#"{"organization": {"login": tru}}"#).is_err());
        for bad in [
            &br#"{"organization": "a\qb"}"#[..],
            br#"{"organization": "\u12g4"}"#,
            b"{\"organization\": \"tab\there\"}",
            br#"{"organization": 01}"#,
            br#"{"organization": 1.}"#,
            br#"{"organization": -}"#,
            br#"{"organization": 1e+}"#,
            br#"{"organization": [1,]}"#,
            br#"{"organization": {"a" 1}}"#,
            br#"{"organization": {"a": 1,}}"#,
            br#"{"organization": {1: 1}}"#,
            br#"{"organization": "unterminated}"#,
        ] {
            let refused = Event::parse("issues", bad).unwrap_err();
            assert!(
                serde_json::from_slice::<Value>(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
            assert!(refused.is_not_json(), "{refused}");
            assert!(
                refused.to_string().contains(" at line 1 column "),
                "{refused}"
            );
        }
        // Not UTF-8, even inside a string that is not read.
        let err = Event::parse("issues", b"{\"organization\": \"\xff\"}").unwrap_err();
        assert!(matches!(err, Malformed::NotUtf8(_)), "{err}");
    }

    #[test]
    fn where_a_body_is_refused_is_said_by_line_and_column() {
        let err = Event::parse("issues", b"{\n  \"action\": \"a\",\n  \"x\": [1,]\n}").unwrap_err();
        assert_eq!(
            err.to_string(),
            "payload is not JSON: expected value at line 3 column 11"
        );
    }

    /// Nesting never grows the stack: what is not read is skipped without recursion (however
    /// deep; the body's size bounds it), what is read nests a few levels and refuses more.
    #[test]
    fn nesting_cannot_exhaust_the_stack() {
        let deep = |n: usize| format!("{{\"x\": {}{}}}", "[".repeat(n), "]".repeat(n));
        assert!(Event::parse("issues", deep(1_000_000).as_bytes()).is_ok());
        let err =
            Event::parse("issues", deep(1_000_000).replace("x", "sender").as_bytes()).unwrap_err();
        assert!(matches!(err, Malformed::Shape(_)), "{err}");
        let unclosed = "[".repeat(1_000_000);
        let err = Event::parse("issues", unclosed.as_bytes()).unwrap_err();
        assert!(matches!(err, Malformed::Shape(_)), "{err}");
        let unclosed = format!("{{\"x\": {unclosed}");
        let err = Event::parse("issues", unclosed.as_bytes()).unwrap_err();
        assert!(err.is_not_json(), "{err}");
    }

    fn event(v: Value) -> Event<'static> {
        let body: &'static [u8] = Box::leak(serde_json::to_vec(&v).unwrap().into_boxed_slice());
        Event::parse("issues", body).unwrap()
    }

    /// One rule for the repository's name, used for the trigger's target and the job's lane
    /// alike; a name GitHub would not give never comes out of it.
    #[test]
    fn the_repository_comes_from_one_rule() {
        let repo = |v: Value| {
            event(json!({"repository": v}))
                .repo()
                .map(|r| r.to_string())
        };
        let both = json!({"full_name": "o/r", "name": "r", "owner": {"login": "o"}});
        assert_eq!(repo(both).as_deref(), Some("o/r"));
        assert_eq!(repo(json!({"full_name": "o/r"})).as_deref(), Some("o/r"));
        assert_eq!(
            repo(json!({"name": "r.js", "owner": {"login": "my-org_1"}})).as_deref(),
            Some("my-org_1/r.js")
        );
        // Owner and name read together, else the full name.
        assert_eq!(
            repo(json!({"full_name": "a/b", "name": "r", "owner": {"login": "o"}})).as_deref(),
            Some("o/r")
        );
        assert_eq!(
            repo(json!({"full_name": "a/b", "name": "r"})).as_deref(),
            Some("a/b")
        );
        for bad in [
            json!({}),
            json!({"name": "r"}),
            json!({"full_name": "o"}),
            json!({"full_name": "o/r/x"}),
            json!({"full_name": "../r"}),
            json!({"full_name": "o/.."}),
            json!({"name": ".", "owner": {"login": "o"}}),
            json!({"name": "..", "owner": {"login": "o"}}),
            json!({"name": "../../etc", "owner": {"login": "o"}}),
            json!({"name": "r", "owner": {"login": "o/x"}}),
            json!({"name": "r?ref=x", "owner": {"login": "o"}}),
            json!({"name": "r x", "owner": {"login": "o"}}),
            json!({"name": "", "owner": {"login": "o"}}),
            json!({"name": "é", "owner": {"login": "o"}}),
            json!({"name": "r".repeat(101), "owner": {"login": "o"}}),
        ] {
            assert_eq!(repo(bad.clone()), None, "{bad}");
            let mut e = event(json!({"repository": bad, "issue": {"number": 1}}));
            assert_eq!(e.lane(), None);
            e.name = "issue_comment";
            assert_eq!(e.lane(), None);
        }
        let mut e = event(json!({"repository": {"full_name": "a/b", "name": "r",
            "owner": {"login": "o"}}, "issue": {"number": 4}}));
        assert_eq!(e.lane().as_deref(), Some("o/r#4"));
        e.name = "workflow_run";
        assert_eq!(e.lane(), None);
    }

    /// How the test reads a payload the slow way: which fields [`Payload`] reads.
    enum Read {
        Whole,
        Mark,
        Part(&'static [(&'static str, Read)]),
    }

    const LOGIN: Read = Read::Part(&[("login", Read::Whole)]);
    const READ: Read = Read::Part(&[
        ("action", Read::Whole),
        ("installation", Read::Part(&[("id", Read::Whole)])),
        ("label", Read::Part(&[("name", Read::Whole)])),
        (
            "sender",
            Read::Part(&[
                ("login", Read::Whole),
                ("id", Read::Whole),
                ("type", Read::Whole),
            ]),
        ),
        (
            "repository",
            Read::Part(&[
                ("name", Read::Whole),
                ("full_name", Read::Whole),
                ("default_branch", Read::Whole),
                ("owner", LOGIN),
            ]),
        ),
        (
            "issue",
            Read::Part(&[
                ("number", Read::Whole),
                ("state", Read::Whole),
                ("pull_request", Read::Mark),
            ]),
        ),
        ("pull_request", Read::Part(&[("number", Read::Whole)])),
        (
            "comment",
            Read::Part(&[
                ("id", Read::Whole),
                ("body", Read::Whole),
                ("path", Read::Whole),
                ("line", Read::Whole),
                ("original_line", Read::Whole),
                ("diff_hunk", Read::Whole),
                ("user", LOGIN),
            ]),
        ),
        (
            "workflow_run",
            Read::Part(&[
                ("id", Read::Whole),
                ("name", Read::Whole),
                ("conclusion", Read::Whole),
                ("head_branch", Read::Whole),
                ("head_sha", Read::Whole),
                ("head_repository", Read::Part(&[("full_name", Read::Whole)])),
                ("pull_requests", Read::Part(&[("number", Read::Whole)])),
            ]),
        ),
    ]);

    /// `v` pruned to `read` on `serde_json::Value`, with `null`s dropped as [`Payload`] drops
    /// them: what the typed reading must say.
    fn pruned(v: &Value, read: &Read) -> Option<Value> {
        match (read, v) {
            (Read::Mark, _) => Some(json!({})),
            (_, Value::Null) => None,
            (Read::Whole, v) => Some(v.clone()),
            (Read::Part(fields), Value::Object(map)) => Some(Value::Object(
                map.iter()
                    .filter_map(|(k, v)| {
                        let (_, read) = fields.iter().find(|(name, _)| name == k)?;
                        Some((k.clone(), pruned(v, read)?))
                    })
                    .collect(),
            )),
            (Read::Part(_), Value::Array(items)) => Some(Value::Array(
                items.iter().filter_map(|v| pruned(v, read)).collect(),
            )),
            (Read::Part(_), other) => Some(other.clone()),
        }
    }

    /// The typed reading against `serde_json` on thousands of mangled bodies: never a panic;
    /// whatever `serde_json` refuses as JSON is refused, and refused as not JSON only when
    /// `serde_json` refuses it too; what is accepted reads as the payload read whole into a
    /// `Value` and pruned to the fields read, and its stored form reads the same again.
    #[test]
    fn the_event_accepts_and_reads_as_serde_json_reads() {
        // Pretty-printed, with escapes (`\u` ones too), non-ASCII text, every kind of value.
        let base = r#"{
  "action": "labeled",
  "label": {"name": "agent", "color": "f\u00e9", "default": false},
  "issue": {"number": 4, "state": "open", "body": "a \"quoted\" \\ line\n\t\/",
            "labels": [{"name": "x"}, {"name": "y"}], "pull_request": {"url": "u"},
            "score": -1.25e-3, "closed_at": null, "big": 1E+40},
  "repository": {"name": "r", "full_name": "o/r", "owner": {"login": "o", "id": 1},
                 "topics": [], "default_branch": "main", "private": true},
  "sender": {"login": "o", "id": 7, "type": "User"},
  "workflow_run": {"pull_requests": [{"number": 9, "url": "u"}, {}], "id": 1},
  "comment": {"body": "/agent fix \u263a \ud83d\ude00", "line": 0, "user": {"login": "é"}},
  "install\u0061tion": {"id": 5, "node_id": "MDIz"}
}"#
        .as_bytes()
        .to_vec();
        let noise: &[u8] = b"{}[]:,\"\\ \n0123456789-+.eEtrufalsn\x01\x1f\xc3\xa9\xffu/";
        let mut rng = fastrand::Rng::with_seed(0x5eed);
        let (mut compared, mut refused, mut shape) = (0, 0, 0);
        for _ in 0..20_000 {
            let mut body = base.clone();
            for _ in 0..rng.usize(1..4) {
                if body.is_empty() {
                    break;
                }
                let at = rng.usize(..body.len());
                match rng.u8(..4) {
                    0 => body[at] = noise[rng.usize(..noise.len())],
                    1 => {
                        body.remove(at);
                    }
                    2 => body.insert(at, noise[rng.usize(..noise.len())]),
                    _ => body.truncate(at),
                }
            }
            let ours = Event::parse("issues", &body);
            let text = std::str::from_utf8(&body).ok();
            let json_ok =
                text.is_some_and(|t| serde_json::from_str::<serde::de::IgnoredAny>(t).is_ok());
            let whole = text.and_then(|t| serde_json::from_str::<Value>(t).ok());
            let shown = String::from_utf8_lossy(&body);
            match &ours {
                Err(e) if e.is_not_json() => {
                    assert!(whole.is_none(), "{shown}: {e}");
                    refused += 1;
                }
                Err(_) => shape += 1,
                Ok(event) => {
                    assert!(json_ok, "{shown}");
                    let stored = event.stored();
                    assert_eq!(&Event::parse("issues", &stored).unwrap(), event, "{shown}");
                    // (A body serde_json takes as a Value: not one with a lone surrogate.)
                    if let Some(whole) = &whole {
                        let typed = serde_json::to_value(&event.payload).unwrap();
                        assert_eq!(Some(typed), pruned(whole, &READ), "{shown}");
                        compared += 1;
                    }
                }
            }
            if !json_ok {
                assert!(ours.is_err(), "{shown}");
            }
        }
        // Every kind was seen, many times.
        assert!(
            compared > 500 && refused > 500 && shape > 100,
            "{compared} compared, {refused} refused as not JSON, {shape} of another shape"
        );
    }
}
