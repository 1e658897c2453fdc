//! How single values are written in a file: durations (`"250ms"`), statuses
//! (`503`, `"5xx"`, `"500-504"`), methods (`"POST"`), header names, error kinds
//! and gRPC codes by name, and the backoff with its jitter.

use std::fmt;
use std::time::Duration;

use http::{HeaderName, Method};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::{format_duration, parse_duration};
use crate::policy::{Backoff, ErrorKind, Jitter};
use crate::retry::RetryPolicyBuilder;

/// The backoff: its bounds, its [`Jitter`] and its multiplier, the last two
/// defaulting to full jitter doubling. `jitter` is `"full"`, `"equal"`,
/// `"decorrelated"`, `"none"`, or `{ proportional = 0.2 }` for ±20 %.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BackoffSpec {
    base: Dur,
    max: Dur,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    jitter: Option<Jitter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    multiplier: Option<f64>,
}

impl BackoffSpec {
    /// Every setting of `backoff`.
    pub(crate) fn of(backoff: Backoff) -> Self {
        BackoffSpec {
            base: Dur(backoff.base()),
            max: Dur(backoff.max()),
            jitter: Some(backoff.jitter()),
            multiplier: Some(backoff.multiplier()),
        }
    }

    /// `b` with the settings given.
    pub(crate) fn apply(self, mut b: RetryPolicyBuilder) -> RetryPolicyBuilder {
        b = b.backoff(self.base.0, self.max.0);
        if let Some(jitter) = self.jitter {
            b = b.jitter(jitter);
        }
        if let Some(m) = self.multiplier {
            b = b.backoff_multiplier(m);
        }
        b
    }
}

/// [`Jitter`] by name, the proportional band as `{ proportional = x }`.
#[derive(Serialize, Deserialize)]
#[serde(remote = "Jitter", rename_all = "snake_case")]
enum JitterDef {
    Full,
    Equal,
    Decorrelated,
    None,
    Proportional(f64),
}

impl Serialize for Jitter {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        JitterDef::serialize(self, s)
    }
}

impl<'de> Deserialize<'de> for Jitter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        JitterDef::deserialize(d)
    }
}

/// A duration, written as [`format_duration`] writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dur(pub(crate) Duration);

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration with its unit, such as \"250ms\", \"1.5s\" or \"2m\"")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Dur, E> {
                parse_duration(text).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// Retryable statuses: numbers, classes (`"5xx"`) and ranges (`"500-504"`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Statuses(pub(crate) Vec<u16>);

impl Serialize for Statuses {
    /// Whole classes as `"5xx"`, runs as `"500-504"`, the rest as numbers.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut codes = self.0.clone();
        codes.sort_unstable();
        codes.dedup();
        let mut seq = s.serialize_seq(None)?;
        let mut i = 0;
        while i < codes.len() {
            let mut j = i;
            while j + 1 < codes.len() && codes[j + 1] == codes[j] + 1 {
                j += 1;
            }
            let (first, last) = (codes[i], codes[j]);
            if first % 100 == 0 && last == first + 99 {
                seq.serialize_element(&format!("{}xx", first / 100))?;
            } else if last > first + 1 {
                seq.serialize_element(&format!("{first}-{last}"))?;
            } else {
                for code in &codes[i..=j] {
                    seq.serialize_element(code)?;
                }
            }
            i = j + 1;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for Statuses {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let items = Vec::<StatusItem>::deserialize(d)?;
        Ok(Statuses(items.into_iter().flat_map(|i| i.0).collect()))
    }
}

/// One item of a status list.
struct StatusItem(Vec<u16>);

impl<'de> Deserialize<'de> for StatusItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = StatusItem;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a status (503), a class (\"5xx\") or a range (\"500-504\")")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<StatusItem, E> {
                status(n).map(|c| StatusItem(vec![c])).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<StatusItem, E> {
                let n = u64::try_from(n).map_err(|_| E::custom(RANGE))?;
                self.visit_u64(n)
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<StatusItem, E> {
                statuses(text).map(StatusItem).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

const RANGE: &str = "a status is 400 to 599";

fn status(n: u64) -> Result<u16, &'static str> {
    u16::try_from(n)
        .ok()
        .filter(|c| (400..=599).contains(c))
        .ok_or(RANGE)
}

/// The statuses `text` names: `"503"`, `"5xx"` or `"500-504"`.
fn statuses(text: &str) -> Result<Vec<u16>, &'static str> {
    const FORM: &str = "a status is written 503, \"5xx\" or \"500-504\"";
    let number = |t: &str| {
        (!t.is_empty() && t.len() <= 3 && t.bytes().all(|b| b.is_ascii_digit()))
            .then(|| t.parse::<u64>().ok())
            .flatten()
            .ok_or(FORM)
            .and_then(status)
    };
    let text = text.trim();
    if let Some(class) = text.strip_suffix("xx").or_else(|| text.strip_suffix("XX")) {
        let first = match class {
            "4" => 400,
            "5" => 500,
            _ => return Err(RANGE),
        };
        return Ok((first..first + 100).collect());
    }
    match text.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (number(a.trim())?, number(b.trim())?);
            if a > b {
                return Err("a status range goes from the smaller to the larger");
            }
            Ok((a..=b).collect())
        }
        None => Ok(vec![number(text)?]),
    }
}

/// An HTTP method by name (`"POST"`; an extension method as written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Meth(pub(crate) Method);

impl Serialize for Meth {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.as_str())
    }
}

impl<'de> Deserialize<'de> for Meth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        // Standard methods in any case; an extension method as written.
        let upper = text.to_ascii_uppercase();
        let standard = crate::policy::STANDARD_METHODS
            .iter()
            .find(|m| m.as_str() == upper);
        match standard {
            Some(m) => Ok(Meth(m.clone())),
            None => Method::from_bytes(text.as_bytes())
                .map(Meth)
                .map_err(|_| de::Error::custom("not an HTTP method")),
        }
    }
}

/// A header name (lower case).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header(pub(crate) HeaderName);

impl Serialize for Header {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.as_str())
    }
}

impl<'de> Deserialize<'de> for Header {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        HeaderName::from_bytes(text.as_bytes())
            .map(Header)
            .map_err(|_| de::Error::custom("not a header name"))
    }
}

/// [`ErrorKind`] by its [name](ErrorKind::as_str).
impl Serialize for ErrorKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// [`ErrorKind`] by name, as [`FromStr`](std::str::FromStr) reads it.
impl<'de> Deserialize<'de> for ErrorKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(de::Error::custom)
    }
}

/// A gRPC code by its name (`"UNAVAILABLE"`).
#[cfg(feature = "grpc")]
impl Serialize for crate::grpc::Code {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A gRPC code by name (without regard to case) or number.
#[cfg(feature = "grpc")]
impl<'de> Deserialize<'de> for crate::grpc::Code {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = crate::grpc::Code;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a gRPC status code, by name (\"UNAVAILABLE\") or number")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
                self.visit_str(&n.to_string())
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                text.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(all(test, feature = "json"))]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_numbers_classes_and_ranges_and_write_them_back_short() {
        let read: Statuses = serde_json::from_str(r#"[429, "5xx", "408-409"]"#).unwrap();
        assert_eq!(read.0.len(), 1 + 100 + 2);
        assert_eq!(
            serde_json::to_string(&read).unwrap(),
            r#"[408,409,429,"5xx"]"#
        );
        let few = Statuses(vec![502, 503, 504, 429, 408]);
        assert_eq!(
            serde_json::to_string(&few).unwrap(),
            r#"[408,429,"502-504"]"#
        );
        for bad in [
            r#"[600]"#,
            r#"["3xx"]"#,
            r#"["504-500"]"#,
            r#"["5x"]"#,
            r#"[-1]"#,
            r#"["abc"]"#,
        ] {
            assert!(serde_json::from_str::<Statuses>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn methods_headers_kinds_and_durations_by_name() {
        let m: Meth = serde_json::from_str(r#""post""#).unwrap();
        assert_eq!(m.0, Method::POST);
        let m: Meth = serde_json::from_str(r#""PURGE""#).unwrap();
        assert_eq!(m.0.as_str(), "PURGE");
        assert!(serde_json::from_str::<Meth>(r#""GE T""#).is_err());
        let h: Header = serde_json::from_str(r#""Idempotency-Key""#).unwrap();
        assert_eq!(h.0.as_str(), "idempotency-key");
        let k: ErrorKind = serde_json::from_str(r#""REFUSED_STREAM""#).unwrap();
        assert_eq!(k, ErrorKind::RefusedStream);
        assert_eq!(serde_json::to_string(&k).unwrap(), r#""refused_stream""#);
        let d: Dur = serde_json::from_str(r#""1.5s""#).unwrap();
        assert_eq!(d.0, Duration::from_millis(1500));
        assert!(serde_json::from_str::<Dur>("5").is_err());
    }
}
