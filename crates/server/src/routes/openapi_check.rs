//! The served `openapi.json` is written by hand (its descriptions, bounds and patterns say more
//! than a derive can), so this test derives every component's schema from the Rust type that
//! serde reads or writes (schemars, honouring the serde attributes) and compares the two field by
//! field: the same property names, the same required set, the same kind of value per property
//! (string, integer, number, boolean, an array or map of what, a reference to which component),
//! and for a string with a closed set of values (an enum, a tagged enum's tag) the same set.
//!
//! Required follows the direction a component travels: in a request body a field is required
//! when serde refuses a body without it; in a response, when serde always writes it; a component
//! that travels both ways is required only where both say so.

use std::collections::{BTreeMap, BTreeSet};

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::JsonSchema;
use serde_json::Value;
use ternflow_core::protocol as p;

use crate::routes::{dashboard, health, locks, quarantine};
use crate::series;

/// A component of openapi.json and the Rust type behind it.
struct Component {
    name: &'static str,
    /// The Rust type's schema, by contract.
    schema: fn(&mut SchemaGenerator) -> Value,
}

fn schema_of<T: JsonSchema>(g: &mut SchemaGenerator) -> Value {
    g.root_schema_for::<T>().to_value()
}

macro_rules! components {
    ($($name:literal => $ty:ty),* $(,)?) => {
        vec![$(Component { name: $name, schema: schema_of::<$ty> }),*]
    };
}

/// Every object component, with the type serde reads or writes for it. (Rust names that differ
/// from the document's are mapped in [`openapi_name`].)
fn components() -> Vec<Component> {
    components![
        "AckBatchItem" => p::AckItem,
        "AckBatchRequest" => p::AckBatchRequest,
        "AckBatchResponse" => p::AckBatchResponse,
        "AckRequest" => p::AckRequest,
        "AckResponse" => p::AckResponse,
        "Attempt" => p::Attempt,
        "CacheEntry" => p::CacheEntry,
        "CachePut" => p::CachePut,
        "ClaimRequest" => p::ClaimRequest,
        "ClaimResponse" => p::ClaimResponse,
        "ClaimedJob" => p::ClaimedJob,
        "Dashboard" => dashboard::Dashboard,
        "DashboardSample" => series::Sample,
        "DlqEntry" => p::DlqEntry,
        "DlqList" => p::DlqList,
        "EmbedRequest" => p::EmbedRequest,
        "EmbedResponse" => p::EmbedResponse,
        "EnqueueResponse" => p::EnqueueResponse,
        "ErrorBody" => p::ErrorBody,
        "FinishedEvent" => p::FinishedEvent,
        "HeartbeatBatchRequest" => p::HeartbeatBatchRequest,
        "HeartbeatBatchResponse" => p::HeartbeatBatchResponse,
        "HeartbeatRequest" => p::HeartbeatRequest,
        "HeartbeatResponse" => p::HeartbeatResponse,
        "InvalidateEvent" => p::InvalidateEvent,
        "JobError" => p::JobError,
        "JobResult" => p::JobResult,
        "JobSpec" => p::JobSpec,
        "JobStatus" => p::JobStatus,
        "JobTiming" => p::JobTiming,
        "JobsEvent" => p::JobsEvent,
        "Lease" => p::Lease,
        "LockGrant" => p::LockGrant,
        "LockList" => locks::LockList,
        "LockRequest" => p::LockRequest,
        "LockToken" => p::LockToken,
        "NackBatchRequest" => p::NackBatchRequest,
        "NackBatchResponse" => p::NackBatchResponse,
        "NackRequest" => p::NackRequest,
        "NackResponse" => p::NackResponse,
        "NewJob" => p::NewJob,
        "Provenance" => p::Provenance,
        "QuarantineList" => quarantine::QuarantineList,
        "QueueDepth" => p::QueueDepth,
        "Readiness" => health::Readiness,
        "ReleaseBatchRequest" => p::ReleaseBatchRequest,
        "ReleaseBatchResponse" => p::ReleaseBatchResponse,
        "ReleaseRequest" => p::ReleaseRequest,
        "ResetEvent" => p::ResetEvent,
        "Stats" => p::Stats,
        "StatusList" => p::StatusList,
        "StatusRequest" => p::StatusRequest,
        "StepTiming" => p::StepTiming,
        "TextInfo" => p::TextInfo,
        "WorkerMetricsPush" => p::WorkerMetrics,
        "WorkerMetrics" => p::WorkerMetrics,
    ]
}

/// Components that are not objects of fields, each with why it is only checked by hand and by
/// Schemathesis: `EnqueueRequest` (one job or `{"jobs": [...]}`, read by a hand-written
/// Deserialize), `ServerEvent` (SSE frames: `event:`, `data:` holding JSON, `id:`), `Vector` (a
/// base64 string with a pattern no derive writes).
const NOT_OBJECTS: [&str; 3] = ["EnqueueRequest", "ServerEvent", "Vector"];

/// The document's name for a Rust type's schema name.
fn openapi_name(rust: &str) -> &str {
    match rust {
        "AckItem" | "AckItemWire" => "AckBatchItem",
        "Sample" => "DashboardSample",
        other => other,
    }
}

type Defs = serde_json::Map<String, Value>;

/// One side of a comparison: a schema and the definitions its `$ref`s point into.
#[derive(Clone, Copy)]
struct Side<'a> {
    schema: &'a Value,
    defs: &'a Defs,
}

impl<'a> Side<'a> {
    fn at(self, schema: &'a Value) -> Self {
        Side { schema, ..self }
    }

    /// The referenced definition's name, if this is a reference (alone or as the one reference
    /// of an `allOf`/`anyOf`/`oneOf` whose other parts add constraints or `null`).
    fn ref_name(self) -> Option<&'a str> {
        if let Some(r) = self.schema.get("$ref").and_then(Value::as_str) {
            return r.rsplit('/').next();
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            if let Some(parts) = self.schema.get(key).and_then(Value::as_array) {
                let named: Vec<&str> = parts.iter().filter_map(|p| self.at(p).ref_name()).collect();
                // Other parts that only constrain (`allOf`), allow `null` (an Option) or say
                // "or anything else" (`not`) keep it a reference; parts with fields extend it.
                let mut rest = parts.iter().filter(|p| p.get("$ref").is_none());
                let plain = |p: &Value| {
                    is_null(p)
                        || p.get("not").is_some()
                        || key == "allOf" && p.get("properties").is_none()
                };
                if named.len() == 1 && rest.all(plain) {
                    return Some(named[0]);
                }
            }
        }
        None
    }

    /// What a reference points at (or the schema itself).
    fn resolved(self) -> Self {
        match self.ref_name().and_then(|n| self.defs.get(n)) {
            Some(d) => self.at(d),
            None => self.without_null(),
        }
    }

    /// `anyOf: [X, null]` (an Option) as X.
    fn without_null(self) -> Self {
        for key in ["anyOf", "oneOf"] {
            if let Some(parts) = self.schema.get(key).and_then(Value::as_array) {
                let kept: Vec<&Value> = parts.iter().filter(|p| !is_null(p)).collect();
                if kept.len() == 1 && kept.len() < parts.len() {
                    return self.at(kept[0]).without_null();
                }
            }
        }
        self
    }

    /// A coarse kind: `string`, `integer`, `number`, `boolean`, `array`, `map`, `object` (fields),
    /// `union` (variants that are not all strings), or `any`.
    fn kind(self) -> &'static str {
        let s = self.resolved();
        if is_string_enum(s.schema) {
            return "string";
        }
        if !s.fields().0.is_empty() {
            return "object";
        }
        let ty = match s.schema.get("type") {
            Some(Value::String(t)) => t.as_str(),
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .find(|t| *t != "null")
                .unwrap_or("null"),
            _ if ["oneOf", "anyOf"].iter().any(|k| s.schema.get(k).is_some()) => "union",
            _ => "any",
        };
        match ty {
            "string" => "string",
            "integer" => "integer",
            "number" => "number",
            "boolean" => "boolean",
            "array" => "array",
            "object"
                if s.schema
                    .get("additionalProperties")
                    .is_some_and(Value::is_object) =>
            {
                "map"
            }
            "object" => "object",
            _ => "any",
        }
    }

    /// Fields and the required set of an object, with tagged-enum variants (`oneOf`) merged: a
    /// field of any variant is a field, and required where every variant requires it.
    fn fields(self) -> (BTreeMap<String, Value>, BTreeSet<String>) {
        let s = self.resolved();
        let mut props = s.properties();
        let mut req = required(s.schema);
        for key in ["allOf", "oneOf", "anyOf"] {
            let Some(parts) = s.schema.get(key).and_then(Value::as_array) else {
                continue;
            };
            let mut common: Option<BTreeSet<String>> = None;
            for part in parts.iter().filter(|p| !is_null(p)) {
                let (p, r) = s.at(part).fields();
                for (name, schema) in p {
                    // A tag: each variant allows its own value; the field allows them all.
                    let both = props
                        .get(&name)
                        .and_then(string_values)
                        .zip(string_values(&schema));
                    match both {
                        Some((mut all, more)) if key != "allOf" => {
                            all.extend(more);
                            props.insert(name, serde_json::json!({"type": "string", "enum": all}));
                        }
                        _ => {
                            props.insert(name, schema);
                        }
                    }
                }
                if key == "allOf" {
                    req.extend(r);
                } else {
                    common = Some(match common {
                        None => r,
                        Some(c) => c.intersection(&r).cloned().collect(),
                    });
                }
            }
            req.extend(common.unwrap_or_default());
        }
        (props, req)
    }

    fn properties(self) -> BTreeMap<String, Value> {
        self.schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }
}

fn is_null(s: &Value) -> bool {
    s.get("type").and_then(Value::as_str) == Some("null")
        || s.get("enum")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().all(Value::is_null))
        || s.get("const").is_some_and(Value::is_null)
        || s.as_object()
            .is_some_and(|m| m.keys().all(|k| k == "nullable"))
}

/// The closed set of strings a schema allows (`enum`, `const`, or a `oneOf` / `anyOf` of
/// those; `null` left out), if it is one.
fn string_values(s: &Value) -> Option<BTreeSet<String>> {
    let of = |v: &Value| -> Option<BTreeSet<String>> {
        if let Some(c) = v.get("const").and_then(Value::as_str) {
            return Some(BTreeSet::from([c.to_owned()]));
        }
        v.get("enum")?
            .as_array()?
            .iter()
            .filter(|x| !x.is_null())
            .map(|x| x.as_str().map(str::to_owned))
            .collect()
    };
    if let Some(set) = of(s) {
        return Some(set);
    }
    let parts = s.get("oneOf").or_else(|| s.get("anyOf"))?.as_array()?;
    let mut all = BTreeSet::new();
    for p in parts.iter().filter(|p| !is_null(p)) {
        all.extend(of(p)?);
    }
    Some(all)
}

fn is_string_enum(s: &Value) -> bool {
    let strings = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
    s.get("enum").is_some_and(strings)
        || s.get("oneOf")
            .and_then(Value::as_array)
            .is_some_and(|parts| {
                parts.iter().all(|p| {
                    p.get("const").is_some_and(Value::is_string)
                        || p.get("enum").is_some_and(strings)
                })
            })
}

fn required(s: &Value) -> BTreeSet<String> {
    s.get("required")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Which way a component travels.
#[derive(Clone, Copy)]
enum Direction {
    Request,
    Response,
    Both,
}

/// The Rust type's schema as serde reads it and as serde writes it.
#[derive(Clone, Copy)]
struct Rust<'a> {
    de: Side<'a>,
    ser: Side<'a>,
}

impl<'a> Rust<'a> {
    fn field(
        self,
        name: &str,
        de: &'a BTreeMap<String, Value>,
        ser: &'a BTreeMap<String, Value>,
    ) -> Self {
        Rust {
            de: self.de.at(&de[name]),
            ser: self.ser.at(ser.get(name).unwrap_or(&de[name])),
        }
    }

    fn at(self, de: &'a Value, ser: &'a Value) -> Self {
        Rust {
            de: self.de.at(de),
            ser: self.ser.at(ser),
        }
    }
}

/// Compares one value's schema; objects field by field, arrays and maps by their items, a
/// reference to another component by name only (that component is compared on its own).
fn compare(path: &str, rust: Rust, doc: Side, dir: Direction, out: &mut Vec<String>) {
    let (rk, dk) = (rust.de.kind(), doc.kind());
    if let (Some(r), Some(d)) = (rust.de.ref_name(), doc.ref_name()) {
        if rk == "object" && dk == "object" {
            if openapi_name(r) != d {
                out.push(format!("{path}: serde has {r}, the document {d}"));
            }
            return;
        }
    }
    if rk != dk {
        out.push(format!("{path}: serde says {rk}, the document {dk}"));
        return;
    }
    match rk {
        "object" => compare_fields(path, rust, doc, dir, out),
        "array" => {
            let item = |s: Side<'_>| {
                s.resolved()
                    .schema
                    .get("items")
                    .cloned()
                    .unwrap_or(Value::Null)
            };
            let (ri_de, ri_ser, di) = (item(rust.de), item(rust.ser), item(doc));
            compare(
                &format!("{path}[]"),
                rust.at(&ri_de, &ri_ser),
                doc.at(&di),
                dir,
                out,
            );
        }
        "map" => {
            let value = |s: Side<'_>| s.resolved().schema["additionalProperties"].clone();
            let (rv_de, rv_ser, dv) = (value(rust.de), value(rust.ser), value(doc));
            compare(
                &format!("{path}{{}}"),
                rust.at(&rv_de, &rv_ser),
                doc.at(&dv),
                dir,
                out,
            );
        }
        // A closed set of values (an enum, a tag) must be the same set on both sides.
        "string" => {
            let values = |s: Side<'_>| string_values(s.resolved().schema);
            if let (Some(r), Some(d)) = (values(rust.de), values(doc)) {
                if r != d {
                    out.push(format!("{path}: serde allows {r:?}, the document {d:?}"));
                }
            }
        }
        _ => {}
    }
}

fn compare_fields(path: &str, rust: Rust, doc: Side, dir: Direction, out: &mut Vec<String>) {
    let ((de_props, de_req), (ser_props, ser_req)) = (rust.de.fields(), rust.ser.fields());
    let (doc_props, doc_req) = doc.fields();
    let names = |m: &BTreeMap<String, Value>| m.keys().cloned().collect::<BTreeSet<_>>();
    for missing in names(&de_props).difference(&names(&doc_props)) {
        out.push(format!(
            "{path}.{missing}: serde has it, the document does not"
        ));
    }
    for extra in names(&doc_props).difference(&names(&de_props)) {
        out.push(format!(
            "{path}.{extra}: documented, serde has no such field"
        ));
    }
    for (field, doc_field) in &doc_props {
        if de_props.contains_key(field) {
            let here = format!("{path}.{field}");
            compare(
                &here,
                rust.field(field, &de_props, &ser_props),
                doc.at(doc_field),
                dir,
                out,
            );
        }
    }
    let want: BTreeSet<String> = match dir {
        Direction::Request => de_req,
        Direction::Response => ser_req,
        Direction::Both => de_req.intersection(&ser_req).cloned().collect(),
    };
    if want != doc_req {
        let how = match dir {
            Direction::Request => "request",
            Direction::Response => "response",
            Direction::Both => "request and response",
        };
        out.push(format!(
            "{path}: required {want:?} by serde ({how}), {doc_req:?} in the document"
        ));
    }
}

/// The components reachable from request bodies and from responses (through `$ref`s).
fn directions(doc: &Value) -> (BTreeSet<String>, BTreeSet<String>) {
    fn refs(v: &Value, out: &mut BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                    if let Some(name) = r.strip_prefix("#/components/schemas/") {
                        out.insert(name.to_owned());
                    }
                }
                m.values().for_each(|v| refs(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let schemas = &doc["components"]["schemas"];
    let close = |mut set: BTreeSet<String>| loop {
        let mut next = set.clone();
        for name in &set {
            refs(&schemas[name], &mut next);
        }
        if next.len() == set.len() {
            return set;
        }
        set = next;
    };
    let (mut requests, mut responses) = (BTreeSet::new(), BTreeSet::new());
    for item in doc["paths"].as_object().unwrap().values() {
        for op in item.as_object().unwrap().values() {
            refs(&op["requestBody"], &mut requests);
            refs(&op["responses"], &mut responses);
        }
    }
    (close(requests), close(responses))
}

/// Every difference between the document and the derived schemas, as lines.
fn differences() -> Vec<String> {
    let doc: Value = serde_json::from_str(super::OPENAPI).unwrap();
    let documented = doc["components"]["schemas"].as_object().unwrap();
    let (requests, responses) = directions(&doc);
    let mut de = SchemaSettings::openapi3()
        .for_deserialize()
        .into_generator();
    let mut ser = SchemaSettings::openapi3().for_serialize().into_generator();
    let mut out = Vec::new();
    let listed: BTreeSet<&str> = components().iter().map(|c| c.name).collect();
    for name in documented.keys() {
        if !listed.contains(name.as_str()) && !NOT_OBJECTS.contains(&name.as_str()) {
            out.push(format!(
                "{name}: documented, but no Rust type is checked against it"
            ));
        }
    }
    for c in components() {
        let Some(doc_schema) = documented.get(c.name) else {
            out.push(format!("{}: not in openapi.json", c.name));
            continue;
        };
        let (d, s) = ((c.schema)(&mut de), (c.schema)(&mut ser));
        let defs_of = |v: &Value| {
            v["components"]["schemas"]
                .as_object()
                .cloned()
                .unwrap_or_default()
        };
        let (dd, sd) = (defs_of(&d), defs_of(&s));
        let rust = Rust {
            de: Side {
                schema: &d,
                defs: &dd,
            },
            ser: Side {
                schema: &s,
                defs: &sd,
            },
        };
        let dir = match (requests.contains(c.name), responses.contains(c.name)) {
            (true, false) => Direction::Request,
            (true, true) => Direction::Both,
            (false, _) => Direction::Response,
        };
        let doc_side = Side {
            schema: doc_schema,
            defs: documented,
        };
        compare_fields(c.name, rust, doc_side, dir, &mut out);
    }
    out
}

#[test]
fn openapi_components_match_the_serde_types() {
    let diffs = differences();
    assert!(
        diffs.is_empty(),
        "openapi.json vs serde:\n{}",
        diffs.join("\n")
    );
}

/// The check sees a tag value serde writes that the document does not list (how the nack's
/// `done` outcome would have gone undocumented), on a schema derived the way the real ones are.
#[test]
fn a_missing_enum_value_is_a_difference() {
    let mut de = SchemaSettings::openapi3()
        .for_deserialize()
        .into_generator();
    let mut ser = SchemaSettings::openapi3().for_serialize().into_generator();
    let (d, s) = (
        de.root_schema_for::<p::NackResponse>().to_value(),
        ser.root_schema_for::<p::NackResponse>().to_value(),
    );
    let no_defs = Defs::new();
    let rust = Rust {
        de: Side {
            schema: &d,
            defs: &no_defs,
        },
        ser: Side {
            schema: &s,
            defs: &no_defs,
        },
    };
    let doc = |values: &[&str]| {
        serde_json::json!({"type": "object", "required": ["outcome"], "properties": {
            "outcome": {"type": "string", "enum": values},
            "available_at": {"type": "integer"}}})
    };
    let check = |doc: &Value| {
        let mut out = Vec::new();
        let side = Side {
            schema: doc,
            defs: &no_defs,
        };
        compare_fields("NackResponse", rust, side, Direction::Response, &mut out);
        out
    };
    assert_eq!(
        check(&doc(&["retry", "dead", "done"])),
        Vec::<String>::new()
    );
    let diffs = check(&doc(&["retry", "dead"]));
    assert_eq!(diffs.len(), 1, "{diffs:?}");
    assert!(diffs[0].contains("NackResponse.outcome"), "{diffs:?}");
}
