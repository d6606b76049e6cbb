//! The page's `config` (`WorkerConfig` in www/index.d.ts) is exactly what the worker takes: the
//! keys of core's [`Config`] (camelCase, as serde writes them) plus the browser adapter's own
//! (`ADAPTER_KEYS` in src/settings.rs); `BackoffConfig` is the keys of `lockWait` / `retry`.
//! A key documented but not taken would be refused at run time as `bad_config`; one taken but
//! not documented is a setting TypeScript users cannot see.

use std::collections::BTreeSet;
use std::path::Path;

use ternflow_core::Config;

fn repo(path: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(path),
    )
    .unwrap()
}

/// The member names of `export interface NAME { … }` (`name?:` or `name:` lines, 2-space indent).
fn interface_keys(dts: &str, name: &str) -> BTreeSet<String> {
    let start = dts
        .find(&format!("export interface {name} {{"))
        .unwrap_or_else(|| panic!("interface {name}"));
    let body = &dts[start..start + dts[start..].find("\n}").unwrap()];
    body.lines()
        .skip(1)
        .filter(|l| {
            l.starts_with("  ") && !l.starts_with("   ") && !l.trim_start().starts_with('/')
        })
        .filter_map(|l| l.trim().split(['?', ':']).next())
        .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric()))
        .map(str::to_owned)
        .collect()
}

/// The strings of `const ADAPTER_KEYS: [&str; N] = [ … ];` in src/settings.rs.
fn adapter_keys(rs: &str) -> BTreeSet<String> {
    let start = rs
        .find("const ADAPTER_KEYS")
        .expect("ADAPTER_KEYS in src/settings.rs");
    let body = &rs[start..start + rs[start..].find("];").unwrap()];
    let body = &body[body.find("= [").unwrap()..];
    body.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

fn object_keys(v: &serde_json::Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn the_typescript_config_is_the_workers_config() {
    let dts = repo("www/index.d.ts");
    let config = serde_json::to_value(Config::default()).unwrap();
    let mut taken = object_keys(&config);
    let adapter = adapter_keys(&repo("src/settings.rs"));
    assert!(adapter.len() >= 4, "{adapter:?}");
    taken.extend(adapter);
    let documented = interface_keys(&dts, "WorkerConfig");
    assert_eq!(
        documented, taken,
        "WorkerConfig in www/index.d.ts vs the keys the worker takes"
    );
    for nested in ["lockWait", "retry"] {
        assert_eq!(
            interface_keys(&dts, "BackoffConfig"),
            object_keys(&config[nested]),
            "BackoffConfig vs Config.{nested}"
        );
    }
}

#[test]
fn the_parsers_read_what_they_should() {
    let dts = "export interface X {\n  /** doc: with a colon */\n  a?: number;\n  bC: string;\n  /**\n   * more\n   */\n  d?: {\n    e: 1;\n  };\n}\n";
    assert_eq!(
        interface_keys(dts, "X"),
        ["a", "bC", "d"].map(String::from).into_iter().collect()
    );
    let rs = "const ADAPTER_KEYS: [&str; 2] = [\n    \"x\",\n    \"yZ\",\n];";
    assert_eq!(
        adapter_keys(rs),
        ["x", "yZ"].map(String::from).into_iter().collect()
    );
}
