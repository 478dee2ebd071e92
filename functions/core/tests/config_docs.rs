//! docs/API.md's configuration table against `Config`: every variable the configuration reads has a
//! row, under the subheading of the group that reads it, and every default written there is the
//! code's (setting a variable to its documented default changes nothing).

use std::cell::RefCell;
use std::collections::BTreeSet;

use osurender_core::Config;

/// One row of the table.
struct Row {
    /// The variables it names (a row may name several).
    names: Vec<String>,
    /// Its default, when the default column opens with a literal in backticks.
    default: Option<String>,
    /// The `### ` subheading it is under.
    group: String,
}

/// The table's rows.
fn documented() -> Vec<Row> {
    let reference = include_str!("../../../docs/API.md");
    let table = reference
        .split("\n## Configuration\n")
        .nth(1)
        .expect("docs/API.md has a Configuration section");
    let table = &table[..table.find("\n## ").unwrap_or(table.len())];
    let mut group = String::new();
    let mut rows = Vec::new();
    for line in table.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            group = heading.trim().to_owned();
        }
        if !line.starts_with("| `") {
            continue;
        }
        let cells: Vec<&str> = line.split(" | ").collect();
        // A literal default opens its cell; one that names another variable is no literal.
        let default = cells
            .get(1)
            .filter(|cell| cell.starts_with('`'))
            .and_then(|cell| ticked(cell).into_iter().next())
            .filter(|value| !is_variable(value));
        rows.push(Row {
            names: ticked(cells[0]),
            default,
            group: group.clone(),
        });
    }
    rows
}

fn is_variable(text: &str) -> bool {
    text.contains('_') && text.chars().all(|c| c.is_ascii_uppercase() || c == '_')
}

/// The texts between backticks.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

fn config(lookup: impl Fn(&str) -> Option<String>) -> String {
    format!(
        "{:?}",
        Config::from_lookup(lookup).expect("the configuration loads")
    )
}

#[test]
fn every_variable_the_configuration_reads_is_documented() {
    let read = RefCell::new(BTreeSet::new());
    config(|name| {
        read.borrow_mut().insert(name.to_owned());
        None
    });
    let read = read.into_inner();
    let documented: BTreeSet<String> = documented().into_iter().flat_map(|row| row.names).collect();
    let missing: Vec<&String> = read.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "read by Config, not in docs/API.md's table: {missing:?}"
    );
    assert!(read.len() > 40, "the lookup saw {} variables", read.len());
}

#[test]
fn every_documented_default_is_the_codes() {
    let defaults = config(|_| None);
    let mut checked = 0;
    for Row { names, default, .. } in documented() {
        let Some(default) = default else { continue };
        for name in names {
            let set = config(|asked| (asked == name).then(|| default.clone()));
            assert_eq!(
                set, defaults,
                "docs/API.md: `{name}` defaults to `{default}`; the code's differs"
            );
            checked += 1;
        }
    }
    assert!(checked > 30, "only {checked} defaults checked");
}

#[test]
fn every_variable_is_documented_under_the_group_that_reads_it() {
    let rows = documented();
    let mut misplaced = Vec::new();
    for (group, names) in Config::variables_by_group() {
        for name in names {
            let row = rows.iter().find(|row| row.names.contains(&name));
            if let Some(row) = row.filter(|row| row.group != group) {
                misplaced.push(format!(
                    "{name}: under `### {}`, read by `{group}`",
                    row.group
                ));
            }
        }
    }
    assert!(misplaced.is_empty(), "docs/API.md: {misplaced:#?}");
}
