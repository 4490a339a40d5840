//! The manual's links: every relative link in the README, ARCHITECTURE.md and docs/ names a
//! file that exists and, with a `#fragment`, a heading of that file (as GitHub spells heading
//! anchors), so that moving a page or renaming a section cannot leave a reader at a dead end.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repository")
        .to_path_buf()
}

/// The Markdown files the links are checked in.
fn pages() -> Vec<PathBuf> {
    let root = repository();
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let docs = std::fs::read_dir(root.join("docs")).expect("docs/ is readable");
    let mut manual: Vec<PathBuf> = docs
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "md"))
        .collect();
    manual.sort();
    pages.extend(manual);
    pages
}

/// The lines of `text` outside fenced code blocks.
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

/// The targets of the inline links (`[text](target)`) of `text`, outside code blocks and
/// code spans.
fn links(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(text) {
        // Every other piece between backticks is code.
        let outside_code: String = line.split('`').step_by(2).collect();
        let mut rest = outside_code.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    targets
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped but `-` and `_`,
/// spaces turned into `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of the headings of `text`.
fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .into_iter()
        .filter_map(|line| {
            let title = line.trim_start_matches('#');
            (title.len() < line.len() && title.starts_with(' ')).then(|| anchor(title))
        })
        .collect()
}

#[test]
fn every_relative_link_of_the_manual_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a page is readable");
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = match target.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (target.as_str(), None),
            };
            let resolved = if file.is_empty() {
                page.clone()
            } else {
                page.parent().expect("a page's folder").join(file)
            };
            checked += 1;
            if !resolved.exists() {
                broken.push(format!("{}: {target} (no such file)", page.display()));
                continue;
            }
            if let Some(fragment) = fragment {
                let heading_text = std::fs::read_to_string(&resolved).unwrap_or_default();
                if !anchors(&heading_text).contains(fragment) {
                    broken.push(format!("{}: {target} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links read: the reading is broken"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_front_page_stays_a_front_page() {
    let readme = std::fs::read_to_string(repository().join("README.md")).expect("the README");
    let lines = readme.lines().count();
    assert!(
        lines < 200,
        "the README has {lines} lines: the manual's pages (docs/) are where details go"
    );
}

#[test]
fn anchors_are_spelled_as_github_spells_them() {
    assert_eq!(anchor(" Every `[[node]]` key"), "every-node-key");
    assert_eq!(
        anchor(" At least once over HTTP: lease and ack"),
        "at-least-once-over-http-lease-and-ack"
    );
    assert_eq!(
        links("see [a](b.md#c) and [d](https://e) `[f](g)`"),
        ["b.md#c", "https://e"]
    );
}
