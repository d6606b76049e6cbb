//! The maps stay true: every Rust file that declares modules names each of them in its opening
//! `//!` documentation (as `name`, [`name`], `name/` or `name.rs`), so a crate's `# Layout` (or a
//! folder module's list) cannot silently fall behind the code. Runs natively over every crate of
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
