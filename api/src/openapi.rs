//! The API's OpenAPI 3.1 document, generated from the routes themselves.
//!
//! Every route of the API is registered through `utoipa_axum::routes!`, which takes the route's
//! path and method from the handler's `#[utoipa::path]` attribute, so a route and its
//! description cannot drift apart: the path the router serves is the path the document names.
//! [`document`] assembles the same route sets that [`crate::router`] serves; the info, the
//! security schemes and the tags are added here. `GET /api/v1/openapi.json` serves it without
//! a token (it holds nothing secret), so that tools such as schemathesis can read it from any
//! node.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::RefOr;
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::header::Header;
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Ref, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The parts of the document that do not come from a route.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "tickd",
        description = "A replicated clock service, and a drop-in replacement for the \
            Ticktok.io 0.2 server. Every node serves the whole API: writes are forwarded to \
            the leader, reads are linearizable. Fields and behaviours marked \"Ticktok compat\" \
            are part of Ticktok's wire contract and match it exactly.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    modifiers(&SecuritySchemes),
    // Every operation needs the token unless it says otherwise (health, pop, this document).
    security(("bearer" = []), ("access_token" = []), ("authorization_token" = [])),
    tags(
        (name = "clocks", description = "Register, list, read and act on clocks"),
        (name = "queues", description = "The http channel: pop the ticks of a queue, or lease and ack them (at least once)"),
        (name = "cluster", description = "Membership and status of the cluster"),
        (name = "operations", description = "Backup, restore and metrics"),
        (name = "health", description = "For load balancers"),
        (name = "documentation", description = "This document"),
    ),
)]
pub struct ApiDoc;

/// The three ways to present the access token (SPEC §4).
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("`Authorization: Bearer <token>`"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "access_token",
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "access_token",
                "`?access_token=<token>` (Ticktok compat)",
            ))),
        );
        components.add_security_scheme(
            "authorization_token",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "Authorization",
                "`Authorization: token <token>` (Ticktok compat)",
            ))),
        );
    }
}

/// The whole document: the parts above and every route of [`crate::router`], each (but the
/// pop, the lease and the ack) with the 429 that [`crate::strangers`] may answer in front of
/// it.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut document = crate::all_routes().into_openapi();
    for (path, item) in document.paths.paths.iter_mut() {
        if crate::strangers::QUEUE_ROUTES.contains(&path.as_str()) {
            continue;
        }
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
        ];
        for operation in operations.into_iter().flatten() {
            document_stranger_refusal(&mut operation.responses.responses);
        }
    }
    document
}

/// Why [`crate::strangers`] answers 429: added to a route's own 429 when it has one.
const STRANGER_REFUSAL: &str = "Too many requests without a valid token came from this \
    address (health checks, wrong tokens, pops of unknown queues: \
    `unauthenticated_rate_per_second`, `unauthenticated_burst`); retry after `Retry-After` \
    seconds, or send the token";

fn document_stranger_refusal(responses: &mut std::collections::BTreeMap<String, RefOr<Response>>) {
    match responses.get_mut("429") {
        Some(RefOr::T(own)) => {
            own.description = format!("{}. Or: {STRANGER_REFUSAL}", own.description);
        }
        Some(RefOr::Ref(_)) => {}
        None => {
            let mut retry_after = Header::new(ObjectBuilder::new().schema_type(Type::Integer));
            retry_after.description = Some("Seconds until this address may try again".into());
            let refusal = ResponseBuilder::new()
                .description(STRANGER_REFUSAL)
                .header("Retry-After", retry_after)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("Error")))
                        .build(),
                )
                .build();
            responses.insert("429".to_owned(), RefOr::T(refusal));
        }
    }
}

/// The document as JSON, built once per process.
static DOCUMENT_JSON: LazyLock<String> = LazyLock::new(|| {
    document().to_json().unwrap_or_else(|error| {
        tracing::error!(%error, "the OpenAPI document could not be serialized");
        String::from("{}")
    })
});

/// `GET /api/v1/openapi.json`.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "documentation",
    summary = "This OpenAPI 3.1 document",
    security(()),
    responses((status = 200, description = "The document", content_type = "application/json",
        body = Object)),
)]
pub async fn document_json() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT_JSON.as_str(),
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::Value;
    use tickd_domain::Schedule;

    use super::*;

    fn document_json() -> Value {
        serde_json::to_value(document()).expect("the document serializes")
    }

    /// The operations the document describes, as `METHOD path`.
    fn operations(document: &Value) -> Vec<String> {
        let paths = document["paths"].as_object().expect("paths is an object");
        paths
            .iter()
            .flat_map(|(path, item)| {
                let methods = item.as_object().expect("a path item is an object");
                methods
                    .keys()
                    .filter(|key| ["get", "put", "post", "delete", "patch"].contains(&key.as_str()))
                    .map(move |method| format!("{} {path}", method.to_uppercase()))
            })
            .collect()
    }

    #[test]
    fn the_document_is_openapi_3_1_and_names_every_route() {
        let document = document_json();
        assert_eq!(document["openapi"], "3.1.0");
        let mut found = operations(&document);
        found.sort();
        let mut expected = vec![
            "GET /mgmt/health",
            "GET /metrics",
            "GET /api/v1/openapi.json",
            "GET /api/v1/queues/{queue_id}/pop",
            "POST /api/v1/queues/{queue_id}/lease",
            "POST /api/v1/queues/{queue_id}/ack",
            "GET /api/v1/clocks",
            "POST /api/v1/clocks",
            "GET /api/v1/clocks/{id}",
            "PUT /api/v1/clocks/{id}/{action}",
            "GET /api/v1/cluster",
            "GET /api/v1/events",
            "GET /api/v1/stats",
            "GET /api/v1/schedules/preview",
            "POST /api/v1/cluster/nodes",
            "DELETE /api/v1/cluster/nodes/{id}",
            "GET /api/v1/backup",
            "POST /api/v1/restore",
        ];
        expected.sort();
        assert_eq!(found, expected);
    }

    #[test]
    fn every_error_is_documented_in_the_error_shape_and_token_routes_say_403() {
        let document = document_json();
        let mut open = Vec::new();
        for (path, item) in document["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("path item") {
                let name = format!("{method} {path}");
                let responses = operation["responses"].as_object().expect("responses");
                assert!(
                    responses.keys().any(|status| status.starts_with('2')),
                    "{name} documents no success"
                );
                for (status, response) in responses {
                    if status.starts_with('2') || path == "/mgmt/health" {
                        continue;
                    }
                    let schema = &response["content"]["application/json"]["schema"]["$ref"];
                    assert_eq!(
                        schema, "#/components/schemas/Error",
                        "{name} answers {status} without the error shape"
                    );
                }
                // An operation's own `security` overrides the document's; `[{}]` means none.
                let needs_token = match operation.get("security") {
                    Some(own) => own.as_array().is_some_and(|alternatives| {
                        alternatives.iter().all(|alternative| {
                            alternative
                                .as_object()
                                .is_some_and(|schemes| !schemes.is_empty())
                        })
                    }),
                    None => document.get("security").is_some(),
                };
                assert_eq!(
                    needs_token,
                    responses.contains_key("403"),
                    "{name}: a route documents 403 exactly when it needs the token"
                );
                if !needs_token {
                    open.push(name);
                }
            }
        }
        open.sort();
        assert_eq!(
            open,
            [
                "get /api/v1/openapi.json",
                "get /api/v1/queues/{queue_id}/pop",
                "get /mgmt/health",
                "post /api/v1/queues/{queue_id}/ack",
                "post /api/v1/queues/{queue_id}/lease",
            ]
        );
    }

    #[test]
    fn compat_fields_are_marked_as_such() {
        let document = document_json();
        let schemas = &document["components"]["schemas"];
        for (schema, field) in [
            ("Clock", "links"),
            ("Clock", "status"),
            ("Channel", "uri"),
            ("Channel", "queue"),
            ("TickMessage", "schedule"),
        ] {
            let text = schemas[schema]["properties"][field].to_string();
            assert!(text.contains("Ticktok compat"), "{schema}.{field}: {text}");
        }
    }

    #[test]
    fn the_name_is_bounded_as_the_registry_bounds_it() {
        let document = document_json();
        let name = &document["components"]["schemas"]["Registration"]["properties"]["name"];
        assert_eq!(name["minLength"], 1);
        // JSON Schema counts characters; every name of at most 200 bytes has at most 200.
        assert_eq!(name["maxLength"], tickd_domain::MAX_NAME_BYTES);
    }

    #[test]
    fn the_schedule_pattern_accepts_exactly_what_the_parser_accepts() {
        let document = document_json();
        let schedule = &document["components"]["schemas"]["Registration"]["properties"]["schedule"];
        assert_eq!(schedule["maxLength"], tickd_domain::MAX_LITERAL_BYTES);
        let pattern = schedule["pattern"]
            .as_str()
            .expect("the schedule has a pattern");
        let pattern = regex::Regex::new(pattern).expect("the pattern compiles");
        let schema_accepts =
            |case: &str| pattern.is_match(case) && case.len() <= tickd_domain::MAX_LITERAL_BYTES;
        let mut cases: Vec<String> = [
            "@never",
            "every.1.second",
            "every.5.seconds",
            "every.05.seconds",
            "every.0.seconds",
            "every.31622400.seconds",
            "every.31622401.seconds",
            "every.527040.minutes",
            "every.527041.minutes",
            "every.8784.hours",
            "every.8785.hours",
            "every.366.days",
            "every.367.days",
            "every.1.weeks",
            " every.1.days",
            "every.1.days\n",
            "every.+1.days",
            "every..days",
            "@NEVER",
            "every.0000000000000000000000000000000000000001.days",
        ]
        .iter()
        .map(|case| case.to_string())
        .collect();
        for unit in ["second", "minute", "hour", "day"] {
            for count in (0..40_000_000u64)
                .step_by(9_973)
                .chain([366, 8784, 527_040])
            {
                cases.push(format!("every.{count}.{unit}s"));
                cases.push(format!("every.00{count}.{unit}"));
            }
        }
        for case in &cases {
            assert_eq!(
                schema_accepts(case),
                Schedule::parse(case).is_ok(),
                "{case:?}"
            );
        }
    }

    /// A route registered with axum's own methods would be served without being described:
    /// every route goes through `routes!`, which takes its path from the description.
    #[test]
    fn no_route_bypasses_its_description() {
        let bypasses: Vec<String> = ["route", "route_service", "nest", "nest_service"]
            .iter()
            .map(|method| format!(".{method}("))
            .collect();
        let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = Vec::new();
        let mut files = 0;
        let mut pending = vec![sources];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).expect("the source folder is readable") {
                let path = entry.expect("a directory entry").path();
                if path.is_dir() {
                    pending.push(path);
                    continue;
                }
                files += 1;
                let text = std::fs::read_to_string(&path).expect("a source file is readable");
                for (number, line) in text.lines().enumerate() {
                    if bypasses.iter().any(|bypass| line.contains(bypass.as_str())) {
                        found.push(format!(
                            "{}:{}: {}",
                            path.display(),
                            number + 1,
                            line.trim()
                        ));
                    }
                }
            }
        }
        assert!(files > 10, "the scan found only {files} files");
        assert!(
            found.is_empty(),
            "routes without a description:\n{}",
            found.join("\n")
        );
    }
}
