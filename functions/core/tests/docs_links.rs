//! The docs' relative links: every markdown link in README.md and docs/*.md to a file of the
//! repository names one that exists, and one with a `#fragment` into a markdown file names a
//! heading of it (GitHub's anchors), so moving a file or renaming a section breaks this test
//! rather than a reader's click.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every markdown file of docs/.
fn documents() -> Vec<PathBuf> {
    let root = repository();
    let mut documents = vec![root.join("README.md")];
    for entry in fs::read_dir(root.join("docs")).expect("docs/ is readable") {
        let path = entry.expect("a docs/ entry").path();
        if path.extension().is_some_and(|ext| ext == "md") {
            documents.push(path);
        }
    }
    documents.sort();
    documents
}

/// The lines outside fenced code blocks (a `# comment` in a shell block is no heading, a
/// `](` in code no link).
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// GitHub's anchor of a heading: lowercased, only letters, digits, `_`, `-` and spaces kept,
/// spaces as `-`; a repeated one gets `-1`, `-2`, … .
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for line in prose(text) {
        let Some(title) = line
            .strip_prefix('#')
            .map(|rest| rest.trim_start_matches('#'))
            .filter(|rest| rest.starts_with(' '))
        else {
            continue;
        };
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_insert(0);
        anchors.insert(match *count {
            0 => slug,
            n => format!("{slug}-{n}"),
        });
        *count += 1;
    }
    anchors
}

/// The targets of the line's inline links `[text](target)`, inline code left out.
fn links(line: &str) -> Vec<String> {
    let outside_code: String = line.split('`').step_by(2).collect();
    let mut targets = Vec::new();
    let mut rest = outside_code.as_str();
    while let Some(start) = rest.find("](") {
        rest = &rest[start + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        targets.push(rest[..end].to_owned());
        rest = &rest[end..];
    }
    targets
}

#[test]
fn every_relative_link_of_the_docs_names_a_file_and_a_heading_that_exist() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for document in documents() {
        let text = fs::read_to_string(&document).expect("a readable document");
        let folder = document.parent().expect("a document is in a folder");
        for line in prose(&text) {
            for target in links(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, fragment) = match target.split_once('#') {
                    Some((path, fragment)) => (path, Some(fragment)),
                    None => (target.as_str(), None),
                };
                let linked = if path.is_empty() {
                    document.clone()
                } else {
                    folder.join(path)
                };
                checked += 1;
                let name = document.strip_prefix(repository()).unwrap_or(&document);
                if !linked.exists() {
                    broken.push(format!("{}: {target}: no such file", name.display()));
                    continue;
                }
                let Some(fragment) = fragment.filter(|_| path.is_empty() || path.ends_with(".md"))
                else {
                    continue;
                };
                let linked_text = fs::read_to_string(&linked).expect("a readable document");
                if !anchors(&linked_text).contains(fragment) {
                    broken.push(format!("{}: {target}: no such heading", name.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 50, "only {checked} links checked");
}

#[test]
fn anchors_are_githubs() {
    let text = "# Top\n## `GET /v1/jobs/{id}`\n```sh\n# not a heading\n```\n## 10. Fair service (as built)\n## Top\n";
    let expected: BTreeSet<String> = ["top", "get-v1jobsid", "10-fair-service-as-built", "top-1"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(anchors(text), expected);
}
