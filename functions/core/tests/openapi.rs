//! `openapi.yaml` stays true: its operations are exactly `http::ROUTES` (which the router is
//! held to in lambda_events.rs), its problem `code` enum is exactly the codes problem.rs
//! answers, and every `$ref` resolves.

use std::collections::BTreeSet;

use osurender_core::entry::http::ROUTES;
use serde_json::Value;

const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn document() -> Value {
    serde_norway::from_str(include_str!("../../../openapi.yaml")).expect("openapi.yaml parses")
}

#[test]
fn operations_are_the_routes() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|key| METHODS.contains(&key.as_str()))
                .map(move |method| (method.to_uppercase(), path.clone()))
        })
        .collect();
    let served: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(method, path)| (method.to_string(), path.to_string()))
        .collect();
    assert_eq!(documented, served);
}

/// The codes `Rejection::code` answers, read from its source: a new variant cannot be
/// forgotten here, nor in the document.
fn problem_codes() -> BTreeSet<String> {
    let source = include_str!("../src/support/problem.rs");
    let start = source
        .find("pub fn code(&self)")
        .expect("problem.rs has Rejection::code");
    let body = &source[start..];
    let body = &body[..body.find("\n    }\n").expect("the end of code()")];
    body.split("=> \"")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].to_owned())
        .collect()
}

#[test]
fn problem_codes_are_the_schemas_enum() {
    let doc = document();
    let documented: BTreeSet<String> = doc["components"]["schemas"]["Problem"]["properties"]
        ["code"]["enum"]
        .as_array()
        .expect("Problem.code has an enum")
        .iter()
        .map(|code| code.as_str().unwrap().to_owned())
        .collect();
    let codes = problem_codes();
    assert!(codes.len() > 10, "read the codes: {codes:?}");
    assert_eq!(documented, codes);
}

#[test]
fn every_reference_resolves() {
    fn refs(value: &Value, found: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(target)) = map.get("$ref") {
                    found.push(target.clone());
                }
                map.values().for_each(|v| refs(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, found)),
            _ => {}
        }
    }
    let doc = document();
    let mut found = Vec::new();
    refs(&doc, &mut found);
    assert!(!found.is_empty());
    for target in found {
        let pointer = target
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("{target} is not local"));
        assert!(doc.pointer(pointer).is_some(), "{target} does not resolve");
    }
}
