//! The maps stay true: every Rust file that declares modules names each of them in its opening
//! `//!` documentation (as `name`, [`name`], `name/` or `name.rs`), so a crate's `# Layout` (or a
//! folder module's list) cannot silently fall behind the code; the README's layout names every
//! top-level folder; docs/server.md's code layout names every file of the server crate; every
//! `docs/NAME.md, "Section"` reference in the repository names a heading that exists, and every
//! relative link (and its `#anchor`) in the markdown resolves. Runs natively over every crate of
//! the workspace (`cargo test --workspace`).
#![cfg(not(target_arch = "wasm32"))]

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The modules a file declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`), not inline ones.
fn declared_modules(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line
                .strip_prefix("pub(crate) ")
                .or_else(|| line.strip_prefix("pub(super) "))
                .or_else(|| line.strip_prefix("pub "))
                .unwrap_or(line);
            let name = rest.strip_prefix("mod ")?.strip_suffix(';')?;
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
                .then(|| name.to_owned())
        })
        .collect()
}

/// The file's opening `//!` block.
fn module_doc(text: &str) -> String {
    text.lines()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn names(doc: &str, module: &str) -> bool {
    [
        format!("`{module}`"),
        format!("[`{module}`]"),
        format!("`{module}/"),
        format!("`{module}::"),
        format!("{module}.rs"),
        format!("`{module}` "),
    ]
    .iter()
    .any(|form| doc.contains(form.as_str()))
}

#[test]
fn every_module_is_named_in_its_parents_documentation() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 100, "found only {} files", files.len());
    let mut checked = 0;
    let mut unnamed = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let modules = declared_modules(&text);
        if modules.is_empty() {
            continue;
        }
        checked += 1;
        let doc = module_doc(&text);
        for m in modules {
            if !names(&doc, &m) {
                unnamed.push(format!(
                    "{}: `{m}`",
                    file.strip_prefix(root).unwrap().display()
                ));
            }
        }
    }
    assert!(checked >= 10, "only {checked} files declare modules");
    assert!(
        unnamed.is_empty(),
        "modules missing from their parent's //! documentation (its # Layout or list):\n{}",
        unnamed.join("\n")
    );
}

#[test]
fn the_check_finds_an_unnamed_module() {
    let text = "//! # Layout\n//! - [`a`]: one.\n//! - `b/`: two.\n\nmod a;\npub mod b;\npub(crate) mod c;\n";
    let doc = module_doc(text);
    let missing: Vec<String> = declared_modules(text)
        .into_iter()
        .filter(|m| !names(&doc, m))
        .collect();
    assert_eq!(missing, ["c"]);
}

/// Whether `.gitignore` (top-level patterns: `/name/`, `name/`, `/prefix-*/`) ignores folder `name`.
fn ignored(gitignore: &str, name: &str) -> bool {
    gitignore.lines().any(|p| {
        let p = p.trim().trim_start_matches('/').trim_end_matches('/');
        match p.strip_suffix('*') {
            Some(prefix) => !prefix.is_empty() && name.starts_with(prefix),
            None => p == name,
        }
    })
}

#[test]
fn the_readme_layout_lists_every_top_level_folder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let layout = &readme[readme
        .find("\n## Layout")
        .expect("a ## Layout section in README.md")..];
    let layout = &layout[..layout[1..].find("\n## ").map_or(layout.len(), |i| i + 1)];
    let gitignore = std::fs::read_to_string(root.join(".gitignore")).unwrap();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !entry.path().is_dir() || name == ".git" || ignored(&gitignore, &name) {
            continue;
        }
        if !layout.contains(&format!("`{name}/`")) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "top-level folders missing from README.md's Layout table: {missing:?}"
    );
    assert!(ignored("/target/\n/pkg-*/\nnode_modules/\n", "pkg-test"));
    assert!(!ignored("/target/\n/pkg-*/\n", "src"));
}

/// The `docs/NAME.md, "Section"` references in `text` (also without the comma): the file and the
/// quoted section, line breaks and the comment markers that continue it on the next line folded
/// into one space.
fn section_references(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("docs/") {
        let rest = &text[at + 5..];
        let name_len = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
            .unwrap_or(rest.len());
        let Some(after) = rest[name_len..].strip_prefix(".md") else {
            continue;
        };
        let after = after.strip_prefix(',').unwrap_or(after);
        let Some(quoted) = after.strip_prefix(" \"") else {
            continue;
        };
        let Some(end) = quoted.find('"').filter(|&e| e < 200) else {
            continue;
        };
        let section = quoted[..end]
            .lines()
            .map(|l| {
                l.trim()
                    .trim_start_matches(['/', '!', '#', '-', '*'])
                    .trim()
            })
            .collect::<Vec<_>>()
            .join(" ");
        out.push((format!("{}.md", &rest[..name_len]), section));
    }
    out
}

/// Whether a heading of the markdown `doc` starts with `section`.
fn has_section(doc: &str, section: &str) -> bool {
    doc.lines()
        .filter(|l| l.starts_with('#'))
        .any(|l| l.trim_start_matches('#').trim().starts_with(section))
}

/// Folders that hold what is built, fetched or kept out of git.
const NOT_SOURCES: [&str; 6] = [
    "target",
    "node_modules",
    "work",
    "wheels",
    "old",
    "__pycache__",
];

/// Text files of the repository that may point into `docs/`, skipping what is built or fetched.
fn referring_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let skip = name.starts_with('.')
                || name.starts_with("pkg")
                || NOT_SOURCES.contains(&name.as_str());
            if !skip {
                referring_files(&path, out);
            }
        } else if ["rs", "md", "mjs", "js", "ts", "sh", "py", "sql", "toml"]
            .iter()
            .any(|e| name.ends_with(&format!(".{e}")))
        {
            out.push(path);
        }
    }
}

#[test]
fn every_reference_to_a_docs_section_names_one_that_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    referring_files(root, &mut files);
    let mut found = 0;
    let mut broken = Vec::new();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for (doc, section) in section_references(&text) {
            found += 1;
            let target = std::fs::read_to_string(root.join("docs").join(&doc)).unwrap_or_default();
            if !has_section(&target, &section) {
                broken.push(format!(
                    "{}: docs/{doc}, \"{section}\"",
                    file.strip_prefix(root).unwrap().display()
                ));
            }
        }
    }
    assert!(found >= 10, "found only {found} references");
    assert!(
        broken.is_empty(),
        "references to sections docs/ does not have (renamed or moved?):\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_check_finds_a_broken_section_reference() {
    let text =
        "// see docs/worker.md, \"Acks that\n// wait\" and docs/server.md \"Gone\", docs/x.md.";
    let refs = section_references(text);
    assert_eq!(
        refs,
        [
            ("worker.md".to_owned(), "Acks that wait".to_owned()),
            ("server.md".to_owned(), "Gone".to_owned()),
        ]
    );
    let doc = "# Worker\n\n## Acks that wait for the next engine message\ntext\n";
    assert!(has_section(doc, &refs[0].1));
    assert!(!has_section(doc, &refs[1].1));
}

/// GitHub's anchor for a markdown heading: lower case, punctuation dropped, spaces to hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The relative link targets of markdown `text` (`](path)`, `](path#anchor)`, `](#anchor)`).
fn relative_links(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            let link = &rest[..rest.find(')')?];
            let external = link.contains("://") || link.starts_with("mailto:");
            (!external && !link.is_empty() && !link.contains(char::is_whitespace)).then_some(link)
        })
        .collect()
}

#[test]
fn every_relative_link_in_the_markdown_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    referring_files(root, &mut files);
    let mut found = 0;
    let mut broken = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "md"))
    {
        let text = std::fs::read_to_string(file).unwrap();
        for link in relative_links(&text) {
            found += 1;
            let (path, fragment) = link.split_once('#').unwrap_or((link, ""));
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            let ok = target.exists()
                && (fragment.is_empty()
                    || std::fs::read_to_string(&target).is_ok_and(|doc| {
                        doc.lines()
                            .filter(|l| l.starts_with('#'))
                            .any(|l| anchor(l.trim_start_matches('#')) == fragment)
                    }));
            if !ok {
                broken.push(format!(
                    "{}: ({link})",
                    file.strip_prefix(root).unwrap().display()
                ));
            }
        }
    }
    assert!(found >= 30, "found only {found} links");
    assert!(
        broken.is_empty(),
        "links to files or headings that do not exist:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_link_check_reads_links_and_anchors_as_github_does() {
    let text = "See [a](docs/x.md#the-store-redis), [b](https://e.org/x) and [c](#top).";
    assert_eq!(relative_links(text), ["docs/x.md#the-store-redis", "#top"]);
    assert_eq!(anchor(" The store: `Redis`"), "the-store-redis");
    assert_eq!(
        anchor("What the test command runs"),
        "what-the-test-command-runs"
    );
}

/// Whether the markdown table `section` names `rel` (a path under the mapped folder): as
/// `` `rel` ``, or in a row that names its folder (`` `a/b/` ``) beside its file name or a
/// pattern of its extension (`` `*.lua` ``).
fn maps_file(section: &str, rel: &str) -> bool {
    if section.contains(&format!("`{rel}`")) {
        return true;
    }
    let Some((folder, name)) = rel.rsplit_once('/') else {
        return false;
    };
    let ext = name.rsplit_once('.').map_or("", |(_, e)| e);
    section.lines().any(|row| {
        row.contains(&format!("`{folder}/"))
            && (row.contains(&format!("`{name}`"))
                || row.contains(&format!("`*.{ext}`"))
                || row.contains(&format!("`{folder}/*.{ext}`")))
    })
}

#[test]
fn the_server_code_map_names_every_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/server.md")).unwrap();
    let start = doc
        .find("\n## Code layout (`crates/server/src`)")
        .expect("docs/server.md has its code layout");
    let section = &doc[start..];
    let section = &section[..section[1..].find("\n## ").map_or(section.len(), |i| i + 1)];
    let src = root.join("crates/server/src");
    let mut files = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path
                .extension()
                .is_some_and(|e| e == "rs" || e == "lua" || e == "sql")
            {
                files.push(path.strip_prefix(&src).unwrap().display().to_string());
            }
        }
    }
    assert!(files.len() > 60, "found only {} files", files.len());
    let mut unmapped: Vec<&String> = files.iter().filter(|f| !maps_file(section, f)).collect();
    unmapped.sort();
    assert!(
        unmapped.is_empty(),
        "files of crates/server/src missing from docs/server.md's code layout: {unmapped:?}"
    );
}

#[test]
fn the_map_check_reads_folder_rows() {
    let table = "| `lib.rs` | x |\n| `store/redis/` | `mod.rs`, `conn.rs`, one per script (`*.lua`) |\n| `routes/*.rs` | y |";
    assert!(maps_file(table, "lib.rs"));
    assert!(maps_file(table, "store/redis/conn.rs"));
    assert!(maps_file(table, "store/redis/claim.lua"));
    assert!(maps_file(table, "routes/jobs.rs"));
    assert!(!maps_file(table, "store/redis/queue.rs"));
    assert!(!maps_file(table, "serve.rs"));
}
