//! The fields of an event's payload that the agent reads, and [`project`]: a payload cut down
//! to them.
//!
//! A GitHub delivery is mostly what no decision uses: a `repository` object of ~100 URLs and
//! counters, users with a dozen URLs each, the issue's body (the trigger asks the forge for the
//! conversation instead). The webhook bot stores each job's payload durably before it answers,
//! so it stores [`project`]'s cut: what [`super::evaluate`], the receiver's routing and the
//! App's installation lookup read, and nothing else — an 11.8 KB `issues.labeled` example
//! becomes ~0.4 KB. [`READ`] must name every field those read; the trigger tests evaluate every
//! payload they use both whole and cut and require the same outcome.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A field [`project`] keeps: its name and, when only part of its object is read, the fields
/// kept inside it (empty: the whole value).
#[derive(Debug)]
pub struct Field {
    /// The key.
    pub name: &'static str,
    /// The fields read inside it; empty when the whole value is kept.
    pub inner: &'static [Field],
}

const fn whole(name: &'static str) -> Field {
    Field { name, inner: &[] }
}

const fn part(name: &'static str, inner: &'static [Field]) -> Field {
    Field { name, inner }
}

const USER: &[Field] = &[whole("login"), whole("id"), whole("type")];

/// Every field of an event's payload the agent reads. An array is cut element by element.
pub const READ: &[Field] = &[
    whole("action"),
    part("installation", &[whole("id")]),
    part("label", &[whole("name")]),
    part("sender", USER),
    part(
        "repository",
        &[
            whole("name"),
            whole("full_name"),
            whole("default_branch"),
            part("owner", &[whole("login")]),
        ],
    ),
    // `pull_request` inside an issue only says the issue is a pull request: kept whole (a few
    // URLs), so its presence reads the same.
    part(
        "issue",
        &[whole("number"), whole("state"), whole("pull_request")],
    ),
    part("pull_request", &[whole("number")]),
    part(
        "comment",
        &[
            whole("id"),
            whole("body"),
            whole("path"),
            whole("line"),
            whole("original_line"),
            whole("diff_hunk"),
            part("user", &[whole("login")]),
        ],
    ),
    part(
        "workflow_run",
        &[
            whole("id"),
            whole("name"),
            whole("conclusion"),
            whole("head_branch"),
            whole("head_sha"),
            part("head_repository", &[whole("full_name")]),
            part("pull_requests", &[whole("number")]),
        ],
    ),
];

/// `payload` (JSON) cut down to the fields in [`READ`], in one pass that builds nothing of
/// the rest (still checked to be JSON). Where a field holds something other than an object,
/// it is kept as it is (an array is cut element by element), so a payload of the wrong shape
/// reads the same cut as whole. A key given twice keeps its last value, as
/// `serde_json::from_slice` does.
pub fn project(payload: &[u8]) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(payload);
    let value = Keep(READ).deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// Keep the fields `.0` of the value deserialized next (all of it when `.0` is empty).
#[derive(Clone, Copy)]
struct Keep(&'static [Field]);

impl<'de> DeserializeSeed<'de> for Keep {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Value, D::Error> {
        if self.0.is_empty() {
            serde::Deserialize::deserialize(de)
        } else {
            de.deserialize_any(self)
        }
    }
}

/// A key of an object being cut: the index of its field in the list, `None` for one not kept.
struct Key(&'static [Field]);

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Option<usize>, D::Error> {
        de.deserialize_str(self)
    }
}

impl Visitor<'_> for Key {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|f| f.name == key))
    }
}

impl<'de> Visitor<'de> for Keep {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut kept = Map::new();
        while let Some(found) = map.next_key_seed(Key(self.0))? {
            match found {
                Some(i) => {
                    let field = &self.0[i];
                    let value = map.next_value_seed(Keep(field.inner))?;
                    kept.insert(field.name.to_string(), value);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(kept))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cut(v: &Value) -> Value {
        project(&serde_json::to_vec(v).unwrap()).unwrap()
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
            "workflow_run": {"pull_requests": [{"number": 9, "url": "u"}, 5], "id": 1},
            "organization": {"login": "o"},
            "installation": {"id": 5, "node_id": "MDIz"},
        });
        assert_eq!(
            cut(&full),
            json!({
                "action": "labeled",
                "label": {"name": "agent"},
                "issue": {"number": 4, "state": "open", "pull_request": {"url": "u"}},
                "repository": {"name": "r", "full_name": "o/r", "owner": {"login": "o"},
                               "default_branch": "main"},
                "sender": {"login": "o", "id": 7, "type": "User"},
                "workflow_run": {"pull_requests": [{"number": 9}, 5], "id": 1},
                "installation": {"id": 5},
            })
        );
    }

    #[test]
    fn values_of_another_shape_are_kept_as_they_are() {
        let odd = json!({"repository": 42, "issue": [{"number": 1, "x": 2}], "sender": null,
                         "label": "agent", "comment": {"body": {"nested": [1, 2.5, true]}}});
        assert_eq!(
            cut(&odd),
            json!({"repository": 42, "issue": [{"number": 1}], "sender": null,
                   "label": "agent", "comment": {"body": {"nested": [1, 2.5, true]}}})
        );
        assert_eq!(
            cut(&json!([1, {"action": "x", "y": 1}])),
            json!([1, {"action": "x"}])
        );
        assert_eq!(cut(&json!("text")), json!("text"));
    }

    #[test]
    fn escaped_keys_and_repeated_keys_read_as_serde_json_reads_them() {
        let body =
            br#"{"act\u0069on": "a", "action": "b", "sender": {"login": "x", "login": "y"}}"#;
        assert_eq!(
            project(body).unwrap(),
            json!({"action": "b", "sender": {"login": "y"}})
        );
    }

    #[test]
    fn bodies_that_are_not_json_are_refused() {
        for bad in [
            &b"{not json"[..],
            b"",
            b"{\"a\": 1} trailing",
            b"{\"a\": [1,}",
        ] {
            assert!(project(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        // Skipped values are checked too.
        assert!(project(br#"{"organization": {"login": tru}}"#).is_err());
    }
}
