//! Claims of the docs that name what the code does, checked against the code: a number or a
//! list written in a doc changes with the code or this test fails.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::time::Duration;

use osurender_core::domain::sandbox::shown_between;
use osurender_core::domain::JobStatus;
use osurender_core::entry::http::ROUTES;

const QUICKSTART: &str = include_str!("../../../docs/QUICKSTART.md");

/// The section of a markdown text under the heading `title`, up to the next heading of its level.
fn section<'a>(text: &'a str, title: &str) -> &'a str {
    let level = title.split(' ').next().unwrap_or_default();
    let start = text
        .find(&format!("\n{title}\n"))
        .unwrap_or_else(|| panic!("no section {title}"));
    let body = &text[start + title.len() + 2..];
    let end = body.find(&format!("\n{level} ")).unwrap_or(body.len());
    &body[..end]
}

/// `0–2 s` as (0 s, until 2 s), `from 9 s` as (9 s, no end).
fn age_range(cell: &str) -> (Duration, Option<Duration>) {
    let secs = |text: &str| Duration::from_secs(text.trim().parse().expect("whole seconds"));
    let cell = cell.trim().strip_suffix(" s").expect("an age in seconds");
    match cell.strip_prefix("from ") {
        Some(from) => (secs(from), None),
        None => {
            let (from, until) = cell.split_once('–').expect("an age range");
            (secs(from), Some(secs(until)))
        }
    }
}

/// QUICKSTART's sandbox script is the one jobs play, and the listing's filter matches a sandbox
/// job's final status only from the age the table gives it.
#[test]
fn quickstarts_sandbox_table_is_the_script() {
    let sandbox = section(QUICKSTART, "## 2. The sandbox");
    let mut rows = 0;
    for line in sandbox.lines().filter(|line| line.ends_with(" |")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Ok(status) = cells[2].trim_matches('`').parse::<JobStatus>() else {
            continue;
        };
        assert_eq!(Some(age_range(cells[1])), shown_between(status), "{status}");
        rows += 1;
    }
    assert_eq!(rows, 4, "the table's rows");
    let (completed_from, _) = shown_between(JobStatus::Completed).expect("shown");
    let claim = format!(
        "`status=completed` (or `failed`) only from {} s",
        completed_from.as_secs()
    );
    assert!(
        QUICKSTART.replace('\n', " ").contains(&claim),
        "QUICKSTART lacks: {claim}"
    );
}

/// DESIGN.md §7's layer table names every module of every layer's folder.
#[test]
fn designs_layer_table_names_every_module() {
    let design = include_str!("../../../docs/DESIGN.md");
    let layout = section(design, "## 7. Layout");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut layers = 0;
    for row in layout.lines().filter(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let folder = cells[0].trim_start_matches("| ").trim_matches('`');
        let named: BTreeSet<&str> = cells[1]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|name| {
                name.trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .unwrap_or(name)
            })
            .collect();
        let mut modules = BTreeSet::new();
        for entry in fs::read_dir(source.join(folder)).expect("a layer's folder") {
            let path = entry.expect("an entry").path();
            let stem = path
                .file_stem()
                .and_then(|stem| stem.to_str())
                .unwrap_or("");
            if stem != "mod" && (path.is_dir() || path.extension().is_some_and(|ext| ext == "rs")) {
                modules.insert(stem.to_owned());
            }
        }
        let missing: Vec<&String> = modules
            .iter()
            .filter(|module| !named.contains(module.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "DESIGN.md §7, `{folder}`: no {missing:?}"
        );
        layers += 1;
    }
    assert_eq!(layers, 7, "the table's layers");
}

/// Every route the service answers is in each endpoint table: README's, docs/API.md's and
/// DESIGN.md §1's.
#[test]
fn every_route_is_in_every_endpoint_table() {
    let tables = [
        (
            "README.md",
            section(include_str!("../../../README.md"), "## Endpoints"),
        ),
        (
            "docs/API.md",
            section(include_str!("../../../docs/API.md"), "## Endpoints"),
        ),
        (
            "docs/DESIGN.md",
            section(include_str!("../../../docs/DESIGN.md"), "## 1. Endpoints"),
        ),
    ];
    for (method, path) in ROUTES {
        for (document, table) in tables {
            assert!(
                table.contains(&format!("`{method} {path}`")),
                "{document}'s endpoint table lacks {method} {path}"
            );
        }
    }
}

/// README's option table has one row per option, in order: our name, o!rdr's, what it takes
/// and its default, as the code has them.
#[test]
fn readmes_option_table_is_the_code() {
    use osurender_core::domain::render::{OptionKind, RenderOptions};
    let readme = section(include_str!("../../../README.md"), "## Render options");
    let rows: Vec<Vec<&str>> = readme
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| line.split('|').map(str::trim).collect())
        .collect();
    assert_eq!(rows.len(), RenderOptions::SPECS.len(), "one row per option");
    for (row, spec) in rows.iter().zip(RenderOptions::SPECS) {
        assert_eq!(row[1], format!("`{}`", spec.name));
        assert_eq!(row[2], format!("`{}`", spec.ordr_name), "{}", spec.name);
        let (takes, default) = match spec.kind {
            OptionKind::Bool(default) => ("boolean".to_owned(), format!("`{default}`")),
            OptionKind::Percent(default) => ("0–100".to_owned(), format!("`{default}`")),
            OptionKind::CursorSize(default) => ("0.5–2".to_owned(), format!("`{default:?}`")),
            OptionKind::Skin | OptionKind::Resolution => continue,
        };
        assert_eq!(
            (row[3], row[4]),
            (takes.as_str(), default.as_str()),
            "{}",
            spec.name
        );
    }
}
