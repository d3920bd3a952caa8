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
use serde_json::value::RawValue;

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

/// `payload` (JSON) cut down to the fields in [`READ`], as compact JSON, in one pass that
/// builds nothing of the rest (still checked to be JSON): a field kept whole is copied as the
/// text it was sent as. Where a field holds something other than an object, it is kept as it
/// is (an array is cut element by element), so a payload of the wrong shape reads the same cut
/// as whole. A key given twice keeps its last value, as `serde_json::from_slice` does.
pub fn project(payload: &[u8]) -> serde_json::Result<Vec<u8>> {
    let mut de = serde_json::Deserializer::from_slice(payload);
    let mut out = Vec::with_capacity(512);
    Keep {
        fields: READ,
        out: &mut out,
        comma: false,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(out)
}

/// Write the cut of the value deserialized next to `out` — all of it when `fields` is empty —
/// after a comma when `comma` (an array's next element).
struct Keep<'a> {
    fields: &'static [Field],
    out: &'a mut Vec<u8>,
    comma: bool,
}

impl<'de> DeserializeSeed<'de> for Keep<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        if self.comma {
            self.out.push(b',');
        }
        if self.fields.is_empty() {
            let raw: &RawValue = serde::Deserialize::deserialize(de)?;
            self.out.extend_from_slice(raw.get().as_bytes());
            Ok(())
        } else {
            de.deserialize_any(self)
        }
    }
}

/// A key of an object being cut: the index of its field in the list, `None` for one not kept.
/// Read as bytes (escapes decoded, UTF-8 not checked: the key is only compared with the
/// fields' ASCII names, and the values skipped are not checked either).
struct Key(&'static [Field]);

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Option<usize>, D::Error> {
        de.deserialize_bytes(self)
    }
}

impl Visitor<'_> for Key {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_bytes<E: serde::de::Error>(self, key: &[u8]) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|f| f.name.as_bytes() == key))
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Option<usize>, E> {
        self.visit_bytes(key.as_bytes())
    }
}

/// A kept field's value: its text as sent, or its own cut.
enum Slot<'de> {
    Sent(&'de str),
    Cut(Vec<u8>),
}

impl Keep<'_> {
    fn scalar<T: serde::Serialize + ?Sized, E: serde::de::Error>(self, v: &T) -> Result<(), E> {
        serde_json::to_writer(&mut *self.out, v).map_err(E::custom)
    }
}

impl<'de> Visitor<'de> for Keep<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut slots: Vec<Option<Slot<'de>>> = Vec::new();
        slots.resize_with(self.fields.len(), || None);
        while let Some(found) = map.next_key_seed(Key(self.fields))? {
            let Some(i) = found else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            let field = &self.fields[i];
            slots[i] = Some(if field.inner.is_empty() {
                let raw: &'de RawValue = map.next_value()?;
                Slot::Sent(raw.get())
            } else {
                let mut cut = Vec::new();
                map.next_value_seed(Keep {
                    fields: field.inner,
                    out: &mut cut,
                    comma: false,
                })?;
                Slot::Cut(cut)
            });
        }
        self.out.push(b'{');
        let mut first = true;
        for (field, slot) in self.fields.iter().zip(slots) {
            let Some(slot) = slot else { continue };
            if !first {
                self.out.push(b',');
            }
            first = false;
            // Field names are plain ASCII: nothing to escape.
            self.out.push(b'"');
            self.out.extend_from_slice(field.name.as_bytes());
            self.out.extend_from_slice(b"\":");
            match slot {
                Slot::Sent(text) => self.out.extend_from_slice(text.as_bytes()),
                Slot::Cut(cut) => self.out.extend_from_slice(&cut),
            }
        }
        self.out.push(b'}');
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.out.push(b'[');
        let mut comma = false;
        while let Some(()) = seq.next_element_seed(Keep {
            fields: self.fields,
            out: &mut *self.out,
            comma,
        })? {
            comma = true;
        }
        self.out.push(b']');
        Ok(())
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        self.scalar(&v)
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        self.scalar(&v)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        self.scalar(&v)
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        self.scalar(&v)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.scalar(v)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn cut(v: &Value) -> Value {
        read(&project(&serde_json::to_vec(v).unwrap()).unwrap())
    }

    fn read(cut: &[u8]) -> Value {
        serde_json::from_slice(cut).unwrap()
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
            read(&project(body).unwrap()),
            json!({"action": "b", "sender": {"login": "y"}})
        );
    }

    #[test]
    fn fields_kept_whole_are_the_text_as_sent() {
        let body = r#"{
  "comment": {
    "body": "say \"hi\"\n\u00e9 é",
    "id": 1.5e3, "user": { "login" : "a" }
  },
  "action": null
}"#;
        let cut = project(body.as_bytes()).unwrap();
        assert_eq!(
            String::from_utf8(cut.clone()).unwrap(),
            r#"{"action":null,"comment":{"id":1.5e3,"body":"say \"hi\"\n\u00e9 é","user":{"login":"a"}}}"#
        );
        assert_eq!(read(&cut)["comment"]["body"], json!("say \"hi\"\né é"));
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
