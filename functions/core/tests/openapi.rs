//! `openapi.yaml` stays true: its operations are exactly `http::ROUTES` (which the router is
//! held to in lambda_events.rs), its problem `code` examples are exactly the codes problem.rs
//! answers, its `default`s and bounds are the code's, a job's `config` is `RenderOptions`, only
//! `GET /v1/jobs` requires a key, and every `$ref` resolves. (`infra/client-check` then uses a
//! client generated from it against the dev server.)

use std::collections::{BTreeMap, BTreeSet};

use osurender_core::domain::failure::FailureCode;
use osurender_core::domain::render::RenderOptions;
use osurender_core::entry::http::ROUTES;
use osurender_core::support::problem::PROBLEMS;
use osurender_core::usecases::jobs;
use osurender_core::usecases::skins;
use osurender_core::usecases::skins::upload::MIN_ARCHIVE_BYTES;
use serde_json::{json, Value};

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

/// The codes the API answers with: the problem table's, so a new kind cannot be forgotten
/// here, nor in the document.
fn problem_codes() -> BTreeSet<String> {
    PROBLEMS.iter().map(|kind| kind.code.to_owned()).collect()
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
    assert_eq!(
        documented.len(),
        listed.len(),
        "a code listed twice: {listed:?}"
    );
    let codes = problem_codes();
    assert!(codes.len() > 10, "read the codes: {codes:?}");
    assert_eq!(documented, codes);
}

/// A failed job's codes: the `FailureCode` schema's examples (an open set, like `Problem.code`)
/// and docs/API.md's table are exactly the codes the service records, each with its
/// `retryable`.
#[test]
fn failure_codes_are_documented_with_whether_they_are_retryable() {
    let doc = document();
    let schema = &doc["components"]["schemas"]["FailureCode"];
    assert!(schema.get("enum").is_none(), "FailureCode is open: no enum");
    let documented: BTreeSet<&str> = schema["examples"]
        .as_array()
        .expect("FailureCode lists the codes in `examples`")
        .iter()
        .map(|code| code.as_str().unwrap())
        .collect();
    let recorded: BTreeSet<&str> = FailureCode::ALL.iter().map(|code| code.as_str()).collect();
    assert_eq!(documented, recorded);
    let reference = include_str!("../../../docs/API.md");
    let table = reference
        .split("#### Failure codes")
        .nth(1)
        .expect("docs/API.md has a failure code table");
    for code in FailureCode::ALL {
        let yes = |flag: bool| if flag { "yes" } else { "no" };
        let keeps_out = FailureCode::THE_REPLAYS.contains(&code);
        let row = format!(
            "| `{code}` | {} | {} |",
            yes(code.retryable()),
            yes(keeps_out)
        );
        assert!(table.contains(&row), "docs/API.md lacks the row {row}");
    }
    let description = schema["description"]
        .as_str()
        .expect("FailureCode has a description")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let retryable: Vec<FailureCode> = FailureCode::ALL
        .into_iter()
        .filter(|code| code.retryable())
        .collect();
    for claim in [
        format!("{} are retryable.", spelled(&retryable)),
        format!(
            "Only {}, the replay's own failures, keep the replay out",
            spelled(&FailureCode::THE_REPLAYS)
        ),
    ] {
        assert!(
            description.contains(&claim),
            "FailureCode's description lacks: {claim}"
        );
    }
}

/// `a`, `b` and `c`.
fn spelled(codes: &[FailureCode]) -> String {
    let ticked: Vec<String> = codes.iter().map(|code| format!("`{code}`")).collect();
    match ticked.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Every answer the service gives carries `X-Request-Id` (entry/http.rs): each documented
/// response says so, and a problem may name it (`request_id`).
#[test]
fn every_response_documents_the_request_id() {
    let doc = document();
    let resolve = |response: &Value| -> Value {
        match response["$ref"].as_str() {
            Some(target) => doc
                .pointer(target.strip_prefix('#').unwrap())
                .unwrap_or_else(|| panic!("{target}"))
                .clone(),
            None => response.clone(),
        }
    };
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            if !METHODS.contains(&method.as_str()) {
                continue;
            }
            for (status, response) in operation["responses"].as_object().unwrap() {
                let header = &resolve(response)["headers"]["X-Request-Id"];
                assert_eq!(
                    header["$ref"], "#/components/headers/X-Request-Id",
                    "{method} {path} {status}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 50, "only {checked} responses");
    let request_id = &doc["components"]["schemas"]["Problem"]["properties"]["request_id"];
    assert_eq!(request_id["type"], "string");
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

/// Every `default` in the document, by its JSON pointer.
fn defaults(value: &Value, at: &str, found: &mut BTreeMap<String, Value>) {
    let escape = |key: &str| key.replace('~', "~0").replace('/', "~1");
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let here = format!("{at}/{}", escape(key));
                if key == "default" {
                    found.insert(here.clone(), inner.clone());
                }
                defaults(inner, &here, found);
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                defaults(inner, &format!("{at}/{i}"), found);
            }
        }
        _ => {}
    }
}

const RENDER_FORM: &str =
    "/paths/~1v1~1render/post/requestBody/content/multipart~1form-data/schema/properties";
const JOBS_LIMIT: &str = "/paths/~1v1~1jobs/get/parameters/0";
const SKINS_LIMIT: &str = "/paths/~1v1~1skins/get/parameters/0";

/// A generated client sends the spec's defaults as if the user had chosen them: each must be
/// what the server does without the field. Every `default` in the document is listed here,
/// so a new one cannot go unchecked.
#[test]
fn defaults_are_the_codes() {
    let doc = document();
    let mut documented = BTreeMap::new();
    defaults(&doc, "", &mut documented);

    // Every option under our name but `resolution`, which the server decides (a generated
    // client would send it and a 720p key would be refused); no legacy name has a default (a
    // client would send both names).
    let options = serde_json::to_value(RenderOptions::default()).unwrap();
    let mut expected: BTreeMap<String, Value> = RenderOptions::SPECS
        .iter()
        .filter(|spec| spec.name != "resolution")
        .map(|spec| {
            (
                format!("{RENDER_FORM}/{}/default", spec.name),
                options[spec.name].clone(),
            )
        })
        .collect();
    expected.insert(
        format!("{JOBS_LIMIT}/schema/default"),
        json!(jobs::DEFAULT_PAGE),
    );
    expected.insert(
        format!("{SKINS_LIMIT}/schema/default"),
        json!(skins::MAX_PAGE),
    );
    let differ: Vec<String> = documented
        .keys()
        .chain(expected.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|at| documented.get(*at) != expected.get(*at))
        .map(|at| {
            let show = |v: Option<&Value>| v.map_or("none".to_owned(), Value::to_string);
            format!(
                "{at}: the spec says {}, the code {}",
                show(documented.get(at)),
                show(expected.get(at))
            )
        })
        .collect();
    assert!(differ.is_empty(), "defaults differ:\n{}", differ.join("\n"));

    let at = |pointer: &str| doc.pointer(pointer).cloned().unwrap_or(Value::Null);
    assert_eq!(at(&format!("{JOBS_LIMIT}/name")), "limit");
    assert_eq!(
        at(&format!("{JOBS_LIMIT}/schema/maximum")),
        json!(jobs::MAX_PAGE)
    );
    assert_eq!(at(&format!("{SKINS_LIMIT}/name")), "limit");
    assert_eq!(
        at(&format!("{SKINS_LIMIT}/schema/maximum")),
        json!(skins::MAX_PAGE)
    );
    let size = "/paths/~1v1~1skins~1upload/post/requestBody/content/application~1json/schema/properties/size";
    assert_eq!(at(&format!("{size}/minimum")), json!(MIN_ARCHIVE_BYTES));
}

/// The form lists every option under our name, o!rdr's name in its description, and each
/// legacy name as deprecated; a field the form takes that is not an option is one of ours.
#[test]
fn the_form_lists_every_option() {
    let doc = document();
    let form = doc
        .pointer(RENDER_FORM)
        .and_then(Value::as_object)
        .expect("the render form's properties");
    for spec in RenderOptions::SPECS {
        let property = &form[spec.name];
        let description = property["description"].as_str().unwrap_or_default();
        assert!(
            spec.name == spec.ordr_name || description.contains(&format!("`{}`", spec.ordr_name)),
            "{}: its description names o!rdr's `{}`",
            spec.name,
            spec.ordr_name
        );
    }
    for (old, _) in osurender_core::domain::render::LEGACY_NAMES {
        assert_eq!(form[old]["deprecated"], true, "{old}");
    }
    let ours = [
        "replay",
        "replay_url",
        "callback_url",
        "sandbox_outcome",
        "client_reference",
    ];
    for name in form.keys() {
        assert!(
            RenderOptions::names_option(name) || ours.contains(&name.as_str()),
            "the form's `{name}` is no option and none of ours"
        );
    }
}

/// Each documented resolution is accepted (`2160p` as `4k`), and a job's `config` shows one of
/// `RenderOptions`' own spellings.
#[test]
fn resolutions_are_the_codes() {
    let doc = document();
    let strings = |pointer: &str| -> BTreeSet<String> {
        doc.pointer(pointer)
            .and_then(Value::as_array)
            .unwrap_or_else(|| panic!("{pointer} is a list"))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    let accepted = strings(&format!("{RENDER_FORM}/resolution/enum"));
    let stored = strings("/components/schemas/RenderOptions/properties/resolution/enum");
    let mut shown = BTreeSet::new();
    for resolution in &accepted {
        let options = RenderOptions::from_fields([("resolution", resolution.as_str())])
            .unwrap_or_else(|e| panic!("{resolution}: {e:?}"));
        let config = serde_json::to_value(options).unwrap();
        shown.insert(config["resolution"].as_str().unwrap().to_owned());
    }
    assert_eq!(shown, stored);
    assert!(accepted.contains("2160p") && !stored.contains("2160p"));
    assert!(RenderOptions::from_fields([("resolution", "8k")]).is_err());
}

/// `Job.config` is what the jobs table stores: `RenderOptions`, every field required.
#[test]
fn a_jobs_config_is_render_options() {
    let doc = document();
    assert_eq!(
        doc["components"]["schemas"]["Job"]["properties"]["config"]["$ref"],
        "#/components/schemas/RenderOptions"
    );
    let schema = &doc["components"]["schemas"]["RenderOptions"];
    let options = serde_json::to_value(RenderOptions::default()).unwrap();
    let fields: BTreeSet<&String> = options.as_object().unwrap().keys().collect();
    let properties: BTreeSet<&String> = schema["properties"].as_object().unwrap().keys().collect();
    let required: BTreeSet<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(properties, fields);
    assert_eq!(required, fields.iter().map(|f| f.as_str()).collect());
}

/// Only `GET /v1/jobs` refuses an anonymous caller (`api_key_required`); the webhook and
/// `/health` read no key; every other route takes one optionally, which the document's default
/// says (a route-level `[{}, {bearerAuth: []}]` reads as required to openapi-python-client).
#[test]
fn only_the_job_listing_requires_a_key() {
    let doc = document();
    assert_eq!(doc["security"], json!([{}, {"bearerAuth": []}]));
    for (method, path) in ROUTES {
        let operation = &doc["paths"][path][method.to_lowercase()];
        let security = operation.get("security");
        match (*method, *path) {
            ("GET", "/v1/jobs") => assert_eq!(security, Some(&json!([{"bearerAuth": []}]))),
            ("POST", "/v1/jobs/{id}/webhook") | ("GET", "/health") => {
                assert_eq!(security, Some(&json!([])), "{method} {path}")
            }
            _ => assert_eq!(security, None, "{method} {path}: the default applies"),
        }
    }
}

/// `sandbox_outcome`'s enum is what a sandbox key can rehearse: each value parses, and every
/// failure code a worker reports is one of them.
#[test]
fn sandbox_outcomes_are_the_codes() {
    use osurender_core::domain::sandbox::Rehearsal;
    let doc = document();
    let values: BTreeSet<String> = doc
        .pointer(&format!("{RENDER_FORM}/sandbox_outcome/enum"))
        .and_then(Value::as_array)
        .expect("sandbox_outcome's enum")
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    for value in &values {
        assert!(value.parse::<Rehearsal>().is_ok(), "{value}");
    }
    for code in FailureCode::ALL.iter().filter(|c| c.reported_by_workers()) {
        assert!(values.contains(code.as_str()), "{code}");
    }
    for refusal in ["queue_full", "render_jobs_paused", "rate_limited"] {
        assert!(values.contains(refusal), "{refusal}");
    }
}

/// A generated client names an enum's members from their values; a value that does not start
/// with a letter (`720p`) would be `VALUE_0`: such an enum carries `x-enum-varnames`, one per
/// value.
#[test]
fn enum_values_have_readable_names() {
    fn walk(node: &Value, at: &str, unnamed: &mut Vec<String>) {
        match node {
            Value::Object(map) => {
                if let Some(values) = map.get("enum").and_then(Value::as_array) {
                    let needs = values.iter().any(|v| {
                        v.as_str()
                            .is_some_and(|s| !s.starts_with(|c: char| c.is_ascii_alphabetic()))
                    });
                    let names = map.get("x-enum-varnames").and_then(Value::as_array);
                    if needs && names.is_none_or(|names| names.len() != values.len()) {
                        unnamed.push(at.to_owned());
                    }
                }
                for (key, child) in map {
                    walk(child, &format!("{at}/{key}"), unnamed);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(child, &format!("{at}/{i}"), unnamed);
                }
            }
            _ => {}
        }
    }
    let mut unnamed = Vec::new();
    walk(&document(), "", &mut unnamed);
    assert!(
        unnamed.is_empty(),
        "enums without readable names: {unnamed:?}"
    );
}
