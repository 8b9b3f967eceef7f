//! Where each key and value of a TOML text sits (byte spans by dotted path), so that errors found
//! after deserialising can still name a line, and serde errors can name the key they are about.

use std::fmt;
use std::ops::Range;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// The span of one key and its value (each when the parser knows it), and its children.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpanNode {
    pub key_span: Option<Range<usize>>,
    pub value_span: Option<Range<usize>>,
    pub children: Vec<(String, SpanNode)>,
}

/// The spans of a whole document, or `None` when the text is not valid TOML.
pub(crate) fn span_tree(text: &str) -> Option<SpanNode> {
    let mut root: SpanNode = toml::from_str(text).ok()?;
    root.value_span = Some(0..text.len());
    Some(root)
}

impl SpanNode {
    /// The node at a dotted path.
    pub(crate) fn find(&self, path: &str) -> Option<&SpanNode> {
        path.split('.').try_fold(self, |node, part| {
            node.children
                .iter()
                .find(|(k, _)| k == part)
                .map(|(_, n)| n)
        })
    }

    /// The dotted path of the deepest key whose key span or value span equals `span`.
    pub(crate) fn path_of_span(&self, span: &Range<usize>) -> Option<String> {
        for (name, child) in &self.children {
            if let Some(sub) = child.path_of_span(span) {
                return Some(format!("{name}.{sub}"));
            }
            if child.key_span.as_ref() == Some(span) || child.value_span.as_ref() == Some(span) {
                return Some(name.clone());
            }
        }
        None
    }
}

// The toml crate hands out spans through serde_spanned's struct protocol (a struct with these
// names, read as a map of start, end, value). `toml::Spanned` cannot be used directly: keys and
// tables without a span (implicit tables such as `class` in `[class.cross-dc]`) arrive as plain
// strings and maps, which it rejects; the visitors below accept both forms.
const SPANNED_NAME: &str = "$__serde_spanned_private_Spanned";
const SPANNED_START: &str = "$__serde_spanned_private_start";
const SPANNED_END: &str = "$__serde_spanned_private_end";
const SPANNED_VALUE: &str = "$__serde_spanned_private_value";
const SPANNED_FIELDS: &[&str] = &[SPANNED_START, SPANNED_END, SPANNED_VALUE];

/// A key as it appears in a table, with its span when the parser knows it.
struct KeyName {
    name: String,
    span: Option<Range<usize>>,
}

impl<'de> Deserialize<'de> for KeyName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_struct(SPANNED_NAME, SPANNED_FIELDS, KeyNameVisitor)
    }
}

struct KeyNameVisitor;

impl<'de> Visitor<'de> for KeyNameVisitor {
    type Value = KeyName;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a TOML key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyName, E> {
        Ok(KeyName {
            name: v.to_string(),
            span: None,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyName, A::Error> {
        let (mut start, mut end, mut name) = (None, None, None);
        while let Some(field) = map.next_key::<String>()? {
            match field.as_str() {
                SPANNED_START => start = Some(map.next_value::<usize>()?),
                SPANNED_END => end = Some(map.next_value::<usize>()?),
                _ => name = Some(map.next_value::<String>()?),
            }
        }
        let name = name.ok_or_else(|| de::Error::missing_field("key"))?;
        Ok(KeyName {
            name,
            span: start.zip(end).map(|(s, e)| s..e),
        })
    }
}

impl<'de> Deserialize<'de> for SpanNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_struct(SPANNED_NAME, SPANNED_FIELDS, NodeVisitor)
    }
}

/// The value inside the spanned protocol: asking for spans again here would recurse forever.
struct Unspanned(SpanNode);

impl<'de> Deserialize<'de> for Unspanned {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor).map(Unspanned)
    }
}

/// Builds a node from either the spanned protocol (start, end, value) or a plain value.
struct NodeVisitor;

fn leaf<E>() -> Result<SpanNode, E> {
    Ok(SpanNode::default())
}

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = SpanNode;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any TOML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<SpanNode, E> {
        leaf()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<SpanNode, E> {
        leaf()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<SpanNode, E> {
        leaf()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<SpanNode, E> {
        leaf()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<SpanNode, E> {
        leaf()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SpanNode, A::Error> {
        let mut node = SpanNode::default();
        while let Some(child) = seq.next_element::<SpanNode>()? {
            node.children.push((node.children.len().to_string(), child));
        }
        Ok(node)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SpanNode, A::Error> {
        let mut node = SpanNode::default();
        let (mut start, mut end) = (None, None);
        while let Some(key) = map.next_key::<KeyName>()? {
            match key.name.as_str() {
                SPANNED_START => start = Some(map.next_value::<usize>()?),
                SPANNED_END => end = Some(map.next_value::<usize>()?),
                SPANNED_VALUE => node.children = map.next_value::<Unspanned>()?.0.children,
                _ => {
                    let mut child: SpanNode = map.next_value()?;
                    child.key_span = key.span;
                    node.children.push((key.name, child));
                }
            }
        }
        node.value_span = start.zip(end).map(|(s, e)| s..e);
        Ok(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str =
        "[engine]\npolicy = \"dqplb\"\n\n[class.cross-dc]\nqps = 300\nlist = [1, 2]\n";

    #[test]
    fn finds_value_spans_by_path() {
        let tree = span_tree(TEXT).expect("valid toml");
        let qps = tree.find("class.cross-dc.qps").expect("qps present");
        assert_eq!(qps.value_span.clone().map(|s| &TEXT[s]), Some("300"));
        assert_eq!(qps.key_span.clone().map(|s| &TEXT[s]), Some("qps"));
        let policy = tree.find("engine.policy").expect("policy present");
        assert_eq!(
            policy.value_span.clone().map(|s| &TEXT[s]),
            Some("\"dqplb\"")
        );
        assert!(tree.find("engine.nothing").is_none());
    }

    #[test]
    fn maps_spans_back_to_paths() {
        let tree = span_tree(TEXT).expect("valid toml");
        let start = TEXT.find("300").unwrap_or(0);
        assert_eq!(
            tree.path_of_span(&(start..start + 3)).as_deref(),
            Some("class.cross-dc.qps")
        );
        let key = TEXT.find("policy").unwrap_or(0);
        assert_eq!(
            tree.path_of_span(&(key..key + 6)).as_deref(),
            Some("engine.policy")
        );
    }

    #[test]
    fn invalid_toml_has_no_tree() {
        assert!(span_tree("[engine\n").is_none());
    }
}
