//! A YAML file as a tree of nodes, read field by field with the path of each, so
//! every error names where it is and never repeats what the file says there.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::config::ConfigError;

/// The deepest nesting read (an `HTTPRoute` nests about ten levels).
const MAX_DEPTH: usize = 64;

/// One YAML node, as the parser typed it.
#[derive(Debug)]
pub(super) enum Node {
    Null,
    Bool,
    Int(i128),
    Float,
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl Node {
    /// What the node is, for an error that must not show its value.
    fn kind(&self) -> &'static str {
        match self {
            Node::Null => "null",
            Node::Bool => "a boolean",
            Node::Int(_) => "an integer",
            Node::Float => "a decimal number",
            Node::Str(_) => "a string",
            Node::Seq(_) => "a list",
            Node::Map(_) => "a mapping",
        }
    }

    /// The string this node is.
    pub(super) fn str(&self, path: &str) -> Result<&str, ConfigError> {
        match self {
            Node::Str(s) => Ok(s),
            other => Err(other.wrong(path, "a string")),
        }
    }

    /// The integer this node is.
    pub(super) fn int(&self, path: &str) -> Result<i128, ConfigError> {
        match self {
            Node::Int(n) => Ok(*n),
            other => Err(other.wrong(path, "an integer")),
        }
    }

    /// The items of this list; null (an empty field) is an empty list.
    pub(super) fn seq(&self, path: &str) -> Result<&[Node], ConfigError> {
        match self {
            Node::Seq(items) => Ok(items),
            Node::Null => Ok(&[]),
            other => Err(other.wrong(path, "a list")),
        }
    }

    /// Whether the node holds nothing (null, an empty list or mapping).
    pub(super) fn is_empty(&self) -> bool {
        match self {
            Node::Null => true,
            Node::Seq(items) => items.is_empty(),
            Node::Map(entries) => entries.is_empty(),
            _ => false,
        }
    }

    fn wrong(&self, path: &str, expected: &str) -> ConfigError {
        ConfigError::new(path, format!("expected {expected}, found {}", self.kind()))
    }
}

/// The fields of one mapping, taken one by one: whatever is left when
/// [`done`](Fields::done) is called is an unknown field.
pub(super) struct Fields<'a> {
    path: String,
    entries: &'a [(String, Node)],
    taken: Vec<bool>,
}

impl<'a> Fields<'a> {
    /// The mapping `node` at `path`; null (an empty field) is an empty mapping.
    pub(super) fn of(node: &'a Node, path: &str) -> Result<Self, ConfigError> {
        let entries = match node {
            Node::Map(entries) => entries.as_slice(),
            Node::Null => &[],
            other => return Err(other.wrong(path, "a mapping")),
        };
        Ok(Fields {
            path: path.to_owned(),
            entries,
            taken: vec![false; entries.len()],
        })
    }

    /// The field `key` and its path, if the mapping has it (null counts as absent).
    pub(super) fn take(&mut self, key: &str) -> Option<(&'a Node, String)> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        self.taken[i] = true;
        let node = &self.entries[i].1;
        (!matches!(node, Node::Null)).then(|| (node, self.child(key)))
    }

    /// Where the mapping is.
    pub(super) fn path(&self) -> &str {
        &self.path
    }

    /// The path of the field `key`.
    pub(super) fn child(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// Marks every field not taken yet as taken (a part read no further).
    pub(super) fn rest_ignored(mut self) {
        self.taken.fill(true);
    }

    /// Refuses the first field that was not taken.
    pub(super) fn done(self) -> Result<(), ConfigError> {
        match self.taken.iter().position(|taken| !taken) {
            None => Ok(()),
            Some(i) => Err(ConfigError::new(
                join(&self.path, &self.entries[i].0),
                "unknown field",
            )),
        }
    }
}

/// `parent.key`, or `key` at the root.
pub(super) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

/// Every document of `text` (empty ones skipped).
pub(super) fn documents(text: &str) -> Result<Vec<Node>, ConfigError> {
    crate::config::load::refuse_large(text)?;
    let options = serde_saphyr::Options {
        // Bounds of its own for what a 1 MiB file can ask: a deep nesting, many
        // nodes, an alias bomb.
        budget: Some(serde_saphyr::Budget {
            max_depth: MAX_DEPTH,
            max_documents: 256,
            max_nodes: 200_000,
            ..serde_saphyr::Budget::default()
        }),
        alias_limits: serde_saphyr::options::AliasLimits {
            max_total_replayed_events: 100_000,
            ..serde_saphyr::options::AliasLimits::default()
        },
        strict_booleans: true,
        with_snippet: false,
        crop_radius: 0,
        ..serde_saphyr::Options::default()
    };
    serde_saphyr::from_multiple_with_options(text, options).map_err(|e| yaml_error(&e))
}

/// A parser error as one line, with its place but nothing of the text.
fn yaml_error(e: &serde_saphyr::Error) -> ConfigError {
    let what = match e {
        serde_saphyr::Error::Budget { .. } => {
            "the YAML is nested too deeply or has too many nodes, aliases or documents"
        }
        serde_saphyr::Error::Message { msg, .. } if msg.starts_with(KEY_NOT_STRING) => {
            KEY_NOT_STRING
        }
        _ => "not valid YAML",
    };
    match e.location() {
        Some(at) if at.line() > 0 => ConfigError::new(
            "",
            format!("{what} (line {}, column {})", at.line(), at.column()),
        ),
        _ => ConfigError::new("", what),
    }
}

const KEY_NOT_STRING: &str = "a mapping key is not a string";

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML node")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Bool)
    }

    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Int(v.into()))
    }

    fn visit_i128<E>(self, v: i128) -> Result<Node, E> {
        Ok(Node::Int(v))
    }

    fn visit_u128<E>(self, v: u128) -> Result<Node, E> {
        // Beyond i128 is beyond every range checked here.
        Ok(Node::Int(i128::try_from(v).unwrap_or(i128::MAX)))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Float)
    }

    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Node, E> {
        Err(E::custom("binary data is not read"))
    }

    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some((key, value)) = map.next_entry::<Node, Node>()? {
            let Node::Str(key) = key else {
                return Err(de::Error::custom(KEY_NOT_STRING));
            };
            entries.push((key, value));
        }
        Ok(Node::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_place_not_the_text() {
        let err = documents("a: [1, 2\nb: secret-value").unwrap_err();
        assert!(err.message().starts_with("not valid YAML"), "{err}");
        assert!(!err.to_string().contains("secret"), "{err}");
        let err = documents(&"[".repeat(100)).unwrap_err();
        assert!(!err.to_string().contains('\n'), "{err}");
        let err = documents("? [1]\n: x").unwrap_err();
        assert!(err.message().starts_with(KEY_NOT_STRING), "{err}");
        // Nine levels of nine aliases: 387 million nodes if expanded.
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let p = format!("*a{}", i - 1);
            bomb += &format!("a{i}: &a{i} [{}]\n", vec![p; 9].join(", "));
        }
        let err = documents(&bomb).unwrap_err();
        assert!(!err.to_string().contains('\n'), "{err}");
        let huge = " ".repeat(crate::config::MAX_FILE + 1);
        let err = documents(&huge).unwrap_err();
        assert!(err.message().starts_with("the file is over"), "{err}");
    }

    #[test]
    fn fields_left_unread_are_unknown() {
        let docs = documents("a: 1\nb: x\nc: null").unwrap();
        let mut fields = Fields::of(&docs[0], "spec").unwrap();
        let (a, path) = fields.take("a").unwrap();
        assert_eq!((a.int(&path).unwrap(), path.as_str()), (1, "spec.a"));
        assert!(fields.take("c").is_none());
        assert_eq!(
            fields.done().unwrap_err().to_string(),
            "spec.b: unknown field"
        );
        let wrong = docs[0].str("x").unwrap_err();
        assert_eq!(wrong.to_string(), "x: expected a string, found a mapping");
    }
}
