//! [`JsonText`]: a JSON value read from Postgres and kept as its text.
//!
//! What a job shows (`get_job`, a listing page) is read from `jsonb` columns and mostly only
//! written out again, as JSON over HTTP or as a string over gRPC. Decoding each job's args
//! and meta into a `serde_json::Value` tree (a map node and a string per key and value) and
//! serializing the tree again was the largest share of a listing's time in the server
//! process (issue 22's profile: 7% of the process in `bench http-jobs`). Postgres has
//! already validated and normalised the value; it is kept as compact text instead, written
//! out verbatim, and parsed only by a caller that looks inside ([`JsonText::to_value`]).

use std::error::Error as StdError;
use std::fmt;

use postgres_types::{FromSql, Type};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// A JSON value as text: compact (`{"a":1}`), keys in the order Postgres keeps them
/// (jsonb: shorter keys first), numbers as Postgres wrote them.
#[derive(Clone)]
pub struct JsonText(Box<RawValue>);

impl JsonText {
    /// The value's text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The value parsed, for a caller that looks inside.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.0.get()).expect("JsonText holds valid JSON")
    }

    /// The text of `v`.
    pub fn from_value(v: &Value) -> JsonText {
        let raw = serde_json::value::to_raw_value(v).expect("a Value always serializes");
        JsonText(raw)
    }

    /// Text from Postgres's output form: validated, and made compact.
    fn parse(text: &str) -> Result<JsonText, serde_json::Error> {
        RawValue::from_string(compact(text)).map(JsonText)
    }
}

/// `text` without the whitespace Postgres's jsonb output puts after `:` and `,` (or any
/// other whitespace outside strings); strings are copied as they are. Byte by byte: the
/// bytes it looks at are ASCII, which never occur inside a multi-byte UTF-8 sequence.
fn compact(text: &str) -> String {
    let mut out = Vec::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for &b in text.as_bytes() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
        } else if b.is_ascii_whitespace() {
            continue;
        }
        out.push(b);
    }
    // Only ASCII bytes outside strings were left out: still UTF-8.
    String::from_utf8(out).expect("whole UTF-8 sequences kept")
}

impl fmt::Display for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// Equal when the same JSON value (not the same text): `{"a":1,"b":2}` equals `json!({"b":
/// 2, "a": 1})`.
impl PartialEq<Value> for JsonText {
    fn eq(&self, other: &Value) -> bool {
        self.to_value() == *other
    }
}

impl<'a> FromSql<'a> for JsonText {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn StdError + Sync + Send>> {
        // jsonb's binary form is a version byte (1) and the text; json's is the text.
        let text = if *ty == Type::JSONB {
            match raw.split_first() {
                Some((1, rest)) => rest,
                _ => return Err("unsupported jsonb encoding version".into()),
            }
        } else {
            raw
        };
        Ok(JsonText::parse(std::str::from_utf8(text)?)?)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSONB || *ty == Type::JSON
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{compact, JsonText};

    #[test]
    fn postgres_output_is_made_compact_and_strings_are_kept() {
        assert_eq!(
            compact(r#"{"a": 1, "s": "x, y: \"z\" \\", "l": [1, 2, {"b": null}]}"#),
            r#"{"a":1,"s":"x, y: \"z\" \\","l":[1,2,{"b":null}]}"#
        );
        let t = JsonText::parse(r#"{"b": [1, 2.50], "a": "é \n"}"#).unwrap();
        assert_eq!(t.as_str(), r#"{"b":[1,2.50],"a":"é \n"}"#);
        assert_eq!(t.to_value(), json!({"a": "é \n", "b": [1, 2.5]}));
        #[derive(serde::Serialize)]
        struct Shown<'a> {
            args: &'a JsonText,
        }
        assert_eq!(
            serde_json::to_string(&Shown { args: &t }).unwrap(),
            r#"{"args":{"b":[1,2.50],"a":"é \n"}}"#
        );
        assert!(JsonText::parse("{\"a\": ").is_err());
    }
}
