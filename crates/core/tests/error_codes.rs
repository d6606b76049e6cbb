//! The npm package's `TernflowErrorCode` (www/common.d.ts) is exactly [`ErrorCode`] plus
//! `http_<status>`, and every code the package's JavaScript writes is one of them: the union a
//! TypeScript user switches on cannot miss a code the server or the worker sends.

use std::collections::BTreeSet;
use std::path::Path;

use ternflow_core::ErrorCode;

fn www() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../www")
}

/// The string members of `export type TernflowErrorCode = … ;`.
fn union_members(dts: &str) -> BTreeSet<String> {
    let start = dts
        .find("export type TernflowErrorCode =")
        .expect("TernflowErrorCode in common.d.ts");
    let mut out = BTreeSet::new();
    for line in dts[start..].lines().skip(1) {
        let line = line.trim();
        if let Some(code) = line.strip_prefix("| \"") {
            out.insert(code.trim_end_matches(';').trim_end_matches('"').to_owned());
        }
        if line.starts_with('|') && line.ends_with(';') {
            break; // the union's last member
        }
    }
    out
}

/// `"x"` after `TernflowError(` or `code: ` in JavaScript source.
fn js_codes(js: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for marker in ["TernflowError(\"", "code: \"", "{ code: \""] {
        for (i, _) in js.match_indices(marker) {
            let rest = &js[i + marker.len()..];
            let code: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if rest[code.len()..].starts_with('"') && !code.is_empty() {
                out.insert(code);
            }
        }
    }
    out
}

#[test]
fn the_typescript_union_is_the_closed_set() {
    let dts = std::fs::read_to_string(www().join("common.d.ts")).unwrap();
    assert!(
        dts.contains("| `http_${number}`"),
        "http_<status> is in the union"
    );
    let union = union_members(&dts);
    let all: BTreeSet<String> = ErrorCode::ALL
        .iter()
        .map(|c| c.as_str().to_owned())
        .collect();
    let missing: Vec<_> = all.difference(&union).collect();
    let extra: Vec<_> = union.difference(&all).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "TernflowErrorCode lacks {missing:?} and has {extra:?} that ErrorCode does not"
    );
}

#[test]
fn the_packages_javascript_writes_only_known_codes() {
    let mut seen = BTreeSet::new();
    for dir in [www(), www().join("edge")] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "js" || e == "mjs") {
                seen.extend(js_codes(&std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    assert!(seen.len() >= 8, "found only {seen:?}");
    let unknown: Vec<_> = seen
        .iter()
        .filter(|c| ErrorCode::parse(c).is_none())
        .collect();
    assert!(unknown.is_empty(), "codes not in ErrorCode: {unknown:?}");
}

#[test]
fn the_parsers_see_what_they_should() {
    let dts = "export type TernflowErrorCode =\n  | `http_${number}`\n  /** doc; more */\n  | \"a_b\"\n  | \"c\";\nexport type X =\n  | \"d\";\n";
    assert_eq!(
        union_members(dts),
        ["a_b", "c"].map(String::from).into_iter().collect()
    );
    let js = r#"throw new TernflowError("x_y", "m"); return { code: "z", url }; f({ code: `http_${s}` });"#;
    assert_eq!(
        js_codes(js),
        ["x_y", "z"].map(String::from).into_iter().collect()
    );
}
