//! `openapi.yaml` stays true: its operations are exactly `http::ROUTES` (which the router is
//! held to in lambda_events.rs), its problem `code` examples are exactly the codes problem.rs
//! answers, and every `$ref` resolves.

use std::collections::BTreeSet;

use osurender_core::http::ROUTES;
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
    let source = include_str!("../src/problem.rs");
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

/// `Problem.code` is an open string (a generated client must not break on a code added
/// later): the codes answered today are its `examples`, exactly, and it has no `enum`.
#[test]
fn problem_codes_are_the_schemas_examples() {
    let doc = document();
    let code = &doc["components"]["schemas"]["Problem"]["properties"]["code"];
    assert_eq!(code["type"], "string");
    assert!(code.get("enum").is_none(), "Problem.code is open: no enum");
    let listed: Vec<String> = code["examples"]
        .as_array()
        .expect("Problem.code lists the codes in `examples`")
        .iter()
        .map(|code| code.as_str().unwrap().to_owned())
        .collect();
    let documented: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(documented.len(), listed.len(), "a code listed twice: {listed:?}");
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
