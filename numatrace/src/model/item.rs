//! A fact that a kernel or machine may lack: its value, or why it is absent. Regression reports
//! must tell "this kernel has no such setting" apart from a value, never print a default.

use serde::{Deserialize, Serialize};

/// JSON: the value itself, or `{"absent": "why"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Item<T> {
    Absent { absent: String },
    Present(T),
}

impl<T> Item<T> {
    pub fn absent(why: impl Into<String>) -> Self {
        Self::Absent { absent: why.into() }
    }

    pub fn value(&self) -> Option<&T> {
        match self {
            Self::Present(v) => Some(v),
            Self::Absent { .. } => None,
        }
    }

    pub fn value_mut(&mut self) -> Option<&mut T> {
        match self {
            Self::Present(v) => Some(v),
            Self::Absent { .. } => None,
        }
    }

    /// The reason it is absent (`None`: present).
    pub fn why_absent(&self) -> Option<&str> {
        match self {
            Self::Present(_) => None,
            Self::Absent { absent } => Some(absent),
        }
    }
}

impl<T> From<Result<T, String>> for Item<T> {
    fn from(r: Result<T, String>) -> Self {
        match r {
            Ok(v) => Self::Present(v),
            Err(why) => Self::absent(why),
        }
    }
}

impl<T: Default> Default for Item<T> {
    /// What a capture from a numatrace that did not read it says.
    fn default() -> Self {
        Self::absent("not recorded by the numatrace that wrote this capture")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn json_is_the_value_or_the_reason() {
        let v: Item<BTreeMap<String, u64>> = Item::Present(BTreeMap::from([("a".into(), 1)]));
        assert_eq!(serde_json::to_string(&v).unwrap(), r#"{"a":1}"#);
        let a: Item<u64> = Item::absent("no such file");
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            r#"{"absent":"no such file"}"#
        );
        assert_eq!(
            serde_json::from_str::<Item<u64>>("7").unwrap(),
            Item::Present(7)
        );
        assert_eq!(
            serde_json::from_str::<Item<u64>>(r#"{"absent":"x"}"#)
                .unwrap()
                .why_absent(),
            Some("x")
        );
        assert!(serde_json::from_str::<Item<u64>>(r#""7""#).is_err());
    }
}
