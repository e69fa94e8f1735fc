//! A YAML document as a tree whose every node knows its line: the web config's errors point at
//! a line instead of quoting the file (which may be one the user could not read themselves).

use yaml_rust2::{
    parser::{Event, MarkedEventReceiver, Parser},
    scanner::{Marker, ScanError, TScalarStyle},
};

/// A node and the line (from 1) it starts on.
#[derive(Debug, PartialEq, Eq)]
pub struct Node {
    pub line: usize,
    pub value: Value,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Value {
    /// `plain`: written without quotes (so `~`, `null` and `true` mean what YAML says).
    Scalar {
        text: String,
        plain: bool,
    },
    Map(Vec<(Node, Node)>),
    Seq(Vec<Node>),
    /// `*anchor`: refused where a value is read (nothing here needs one).
    Alias,
}

impl Node {
    /// A missing value: empty, `~` or `null`.
    pub fn is_null(&self) -> bool {
        matches!(&self.value, Value::Scalar { text, plain: true }
            if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar { text, .. } if !self.is_null() => Some(text),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match &self.value {
            Value::Scalar { text, plain: true } => match text.as_str() {
                "true" | "True" | "TRUE" => Some(true),
                "false" | "False" | "FALSE" => Some(false),
                _ => None,
            },
            _ => None,
        }
    }
}

/// A container being filled.
enum Open {
    Map {
        line: usize,
        entries: Vec<(Node, Node)>,
        key: Option<Node>,
    },
    Seq {
        line: usize,
        items: Vec<Node>,
    },
}

#[derive(Default)]
struct Builder {
    open: Vec<Open>,
    root: Option<Node>,
}

impl Builder {
    fn finished(&mut self, node: Node) {
        match self.open.last_mut() {
            None => {
                self.root.get_or_insert(node);
            }
            Some(Open::Map { entries, key, .. }) => match key.take() {
                None => *key = Some(node),
                Some(k) => entries.push((k, node)),
            },
            Some(Open::Seq { items, .. }) => items.push(node),
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let line = mark.line();
        match ev {
            Event::Scalar(text, style, ..) => self.finished(Node {
                line,
                value: Value::Scalar {
                    text,
                    plain: style == TScalarStyle::Plain,
                },
            }),
            Event::Alias(_) => self.finished(Node {
                line,
                value: Value::Alias,
            }),
            Event::MappingStart(..) => self.open.push(Open::Map {
                line,
                entries: Vec::new(),
                key: None,
            }),
            Event::SequenceStart(..) => self.open.push(Open::Seq {
                line,
                items: Vec::new(),
            }),
            Event::MappingEnd | Event::SequenceEnd => {
                let node = match self.open.pop() {
                    Some(Open::Map { line, entries, .. }) => Node {
                        line,
                        value: Value::Map(entries),
                    },
                    Some(Open::Seq { line, items }) => Node {
                        line,
                        value: Value::Seq(items),
                    },
                    None => return,
                };
                self.finished(node);
            }
            _ => {}
        }
    }
}

/// The first document of `text`, None when it has none.
pub fn load(text: &str) -> Result<Option<Node>, ScanError> {
    let mut builder = Builder::default();
    Parser::new_from_str(text).load(&mut builder, false)?;
    Ok(builder.root)
}

/// Where a scan error is and what kind it is, without the text it stumbled on (one kind quotes
/// a character of the file).
pub fn describe(e: &ScanError) -> (usize, String) {
    let what = e.info().split(':').next().unwrap_or("").trim().to_owned();
    (e.marker().line(), what)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(line: usize, text: &str) -> Node {
        Node {
            line,
            value: Value::Scalar {
                text: text.into(),
                plain: true,
            },
        }
    }

    #[test]
    fn every_node_knows_its_line() {
        let root = load("# comment\na:\n  b: x\n  c: [1, 2]\nd: 'true'\ne:\n")
            .unwrap()
            .unwrap();
        let Value::Map(top) = &root.value else {
            panic!("{root:?}")
        };
        assert_eq!(top[0].0, scalar(2, "a"));
        let Value::Map(inner) = &top[0].1.value else {
            panic!()
        };
        assert_eq!(inner[0], (scalar(3, "b"), scalar(3, "x")));
        assert_eq!(inner[1].0.line, 4);
        assert!(matches!(&inner[1].1.value, Value::Seq(v) if v.len() == 2));
        assert_eq!(top[1].1.as_bool(), None, "quoted: a string");
        assert_eq!(top[1].1.as_str(), Some("true"));
        assert!(top[2].1.is_null());
        assert_eq!(top[2].0.line, 6);
        assert_eq!(load("").unwrap(), None);
        assert_eq!(
            load("only: first\n---\nsecond: x\n").unwrap().unwrap().line,
            1
        );
    }

    #[test]
    fn scan_errors_say_where_not_what() {
        let e = load("a: b\nc: `secret\n").unwrap_err();
        let (line, what) = describe(&e);
        assert_eq!(line, 2);
        assert!(!what.contains("secret") && !what.contains('`'), "{what}");
    }
}
