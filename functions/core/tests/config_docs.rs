//! docs/API.md's configuration table against `Config`: every variable the configuration reads has a
//! row, and every default written there is the code's (setting a variable to its documented
//! default changes nothing).

use std::cell::RefCell;
use std::collections::BTreeSet;

use osurender_core::Config;

/// The table's rows: the variables of a row (a row may name several) and its default, when the
/// default column opens with a literal in backticks.
fn documented() -> Vec<(Vec<String>, Option<String>)> {
    let reference = include_str!("../../../docs/API.md");
    let table = reference
        .split("\n## Configuration\n")
        .nth(1)
        .expect("docs/API.md has a Configuration section");
    let table = &table[..table.find("\n## ").unwrap_or(table.len())];
    table
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.split(" | ").collect();
            let names = ticked(cells[0]);
            // A literal default opens its cell; one that names another variable is no literal.
            let default = cells
                .get(1)
                .filter(|cell| cell.starts_with('`'))
                .and_then(|cell| ticked(cell).into_iter().next())
                .filter(|value| !is_variable(value));
            (names, default)
        })
        .collect()
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
    let documented: BTreeSet<String> = documented().into_iter().flat_map(|row| row.0).collect();
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
    for (names, default) in documented() {
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
