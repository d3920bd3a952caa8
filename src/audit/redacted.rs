//! Text that has been through a [`Redactor`]: the only kind of text the run's outputs take.
//!
//! A [`Redacted`] can be made only by a redactor ([`Redactor::clean`],
//! [`Redactor::clean_json`]), so a sink that takes one — the run record and conversation
//! files, the report, progress events, the PR body and comments — cannot be handed raw text
//! by mistake: a new output has to ask a redactor for its text, or it does not compile.

use std::fmt;

use serde::Serialize;

use super::redact::Redactor;

/// Text with every secret the redactor knows, and every well-known token shape, masked.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Redacted(String);

impl Redacted {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The text, owned.
    pub fn into_string(self) -> String {
        self.0
    }

    /// Whether there is no text.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Append more redacted text (a line, a separator that holds no secret by construction).
    pub fn push(&mut self, more: &Redacted) {
        self.0.push_str(&more.0);
    }

    /// Append a fixed piece of text: a `'static` string is part of the program, never a
    /// secret from the environment.
    pub fn push_static(&mut self, text: &'static str) {
        self.0.push_str(text);
    }
}

/// Text written into the program (`"queued"`, a heading) holds no secret from the environment:
/// a `'static` string converts as it is. Text made at run time has to go through a redactor.
impl From<&'static str> for Redacted {
    fn from(text: &'static str) -> Self {
        Redacted(text.to_string())
    }
}

impl fmt::Display for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<str> for Redacted {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Serialize for Redacted {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl Redactor {
    /// `text` with every secret masked, typed so that sinks can insist on it.
    pub fn clean(&self, text: &str) -> Redacted {
        Redacted(self.redact(text))
    }

    /// A value serialized as JSON with every string in it (keys included) masked. Strings are
    /// masked one by one before the document is encoded, so the result is always valid JSON —
    /// masking the encoded text could let a pattern (an unterminated PEM block) run across
    /// the document's own quotes and braces.
    pub fn clean_json<T: Serialize>(
        &self,
        value: &T,
        pretty: bool,
    ) -> serde_json::Result<Redacted> {
        let value = self.clean_value(serde_json::to_value(value)?);
        let text = if pretty {
            serde_json::to_string_pretty(&value)?
        } else {
            serde_json::to_string(&value)?
        };
        Ok(Redacted(text))
    }

    /// `value` with every string in it (keys included) masked.
    pub fn clean_value(&self, value: serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match value {
            Value::String(s) => Value::String(self.redact(&s)),
            Value::Array(items) => {
                Value::Array(items.into_iter().map(|v| self.clean_value(v)).collect())
            }
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| (self.redact(&k), self.clean_value(v)))
                    .collect(),
            ),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "ghs_CanaryCanaryCanaryCanaryCanary0123";

    #[test]
    fn clean_masks_and_json_stays_valid() {
        let r = Redactor::new([CANARY]).unwrap();
        assert_eq!(r.clean(&format!("token {CANARY}")).as_str(), "token ***");
        // A PEM header with no end would mask to the end of an encoded document; masked
        // string by string, the document stays JSON.
        let v = serde_json::json!({
            "summary": format!("done {CANARY}"),
            "plan": [{"title": "-----BEGIN RSA PRIVATE KEY-----\nabc"}],
            CANARY: 1,
        });
        let out = r.clean_json(&v, true).unwrap();
        let back: serde_json::Value = serde_json::from_str(out.as_str()).unwrap();
        assert!(!out.as_str().contains(CANARY), "{out}");
        assert_eq!(back["summary"], "done ***");
        assert_eq!(back["***"], 1);
        assert!(!out.as_str().contains("abc"), "{out}");
    }
}
