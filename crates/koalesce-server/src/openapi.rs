//! The OpenAPI document of the v1 API: the schemas are generated from the API's types in
//! `koalesce-api::dto` (utoipa), so they cannot drift from what the server sends and the client
//! reads; the paths (which route answers which type) are listed here, next to `api::router`.

use koalesce_api::dto::{ComponentDetail, ErrorBody, FileInfo, JobDetail, JobSummary, NewFile, SiteInfo, Submitted, Timeline, TokenInfo};
use serde_json::{json, Value};
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(title = "koalesce server", version = "1"),
    components(schemas(
        JobSummary,
        JobDetail,
        Timeline,
        ComponentDetail,
        SiteInfo,
        FileInfo,
        NewFile,
        Submitted,
        TokenInfo,
        ErrorBody
    ))
)]
struct Schemas;

pub fn document() -> Value {
    let generated = serde_json::to_value(Schemas::openapi()).unwrap_or_else(|e| unreachable!("an OpenAPI document serializes: {e}"));
    let mut doc = paths();
    doc["openapi"] = generated["openapi"].clone();
    doc["info"] = generated["info"].clone();
    doc["components"]["schemas"] = generated["components"]["schemas"].clone();
    doc
}

fn paths() -> Value {
    let err = json!({"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}});
    let job_id = json!({"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}});
    json!({
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {}
        },
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/jobs": {
                "post": {"summary": "Submit a job (TOML job description)",
                    "requestBody": {"required": true, "content": {"application/toml": {"schema": {"type": "string"}}}},
                    "responses": {"201": {"description": "committed", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Submitted"}}}},
                        "400": err, "401": err, "408": err, "413": err, "422": err}},
                "get": {"summary": "List jobs",
                    "parameters": [{"name": "state", "in": "query", "schema": {"type": "string"}}, {"name": "all", "in": "query", "schema": {"type": "boolean"}}],
                    "responses": {"200": {"description": "jobs", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/JobSummary"}}}}}, "401": err}}
            },
            "/api/v1/jobs/{id}": {"get": {"summary": "One job", "parameters": [job_id],
                "responses": {"200": {"description": "job", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobDetail"}}}}, "401": err, "404": err}}},
            "/api/v1/jobs/{id}/cancel": {"post": {"summary": "Cancel a job", "parameters": [job_id],
                "responses": {"200": {"description": "cancelled", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobSummary"}}}}, "401": err, "404": err, "409": err}}},
            "/api/v1/tokens": {"get": {"summary": "The caller's tokens (all=true: everyone's, admins only)",
                "parameters": [{"name": "all", "in": "query", "schema": {"type": "boolean"}}],
                "responses": {"200": {"description": "tokens", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/TokenInfo"}}}}}, "401": err, "403": err}}},
            "/api/v1/tokens/{id}": {"delete": {"summary": "Revoke a token at once (own; admins: any)",
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "revoked", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TokenInfo"}}}}, "401": err, "404": err}}},
            "/api/v1/sites": {"get": {"summary": "Sites", "responses": {"200": {"description": "sites", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/SiteInfo"}}}}}, "401": err}}},
            "/api/v1/files": {
                "get": {"summary": "Replica catalogue", "responses": {"200": {"description": "files", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/FileInfo"}}}}}, "401": err}},
                "post": {"summary": "Register a server-local file at a site",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NewFile"}}}},
                    "responses": {"201": {"description": "registered", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileInfo"}}}}, "400": err, "401": err, "409": err, "413": err, "422": err}}
            },
            "/api/v1/files/{name}": {"delete": {"summary": "Delete a file and its replicas",
                "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {"204": {"description": "deleted"}, "401": err, "404": err, "409": err}}},
            "/api/v1/openapi.json": {"get": {"summary": "This document", "security": [], "responses": {"200": {"description": "OpenAPI"}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "security": [], "responses": {"200": {"description": "text"}}}},
            "/healthz": {"get": {"summary": "Liveness", "security": [], "responses": {"200": {"description": "ok"}}}}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r.clone());
                }
                m.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_resolves_to_a_schema_generated_from_the_types() {
        let doc = document();
        let mut all = Vec::new();
        refs(&doc, &mut all);
        assert!(all.len() > 10, "{all:?}");
        for r in all {
            let name = r
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("odd reference {r}"));
            assert!(doc["components"]["schemas"][name].is_object(), "{r} does not resolve");
        }
        // Fields come from the Rust types (a field added there shows up here).
        let site = &doc["components"]["schemas"]["SiteInfo"]["properties"];
        assert!(site["kind"].is_object() && site["supports_reservations"].is_object(), "{site}");
        let detail = &doc["components"]["schemas"]["JobDetail"]["properties"];
        assert_eq!(detail["components"]["type"], "array", "{detail}");
    }
}
