//! The OpenAPI document of the v1 API: the schemas are generated from the API's types in
//! `koalesce-api::dto` (utoipa), so they cannot drift from what the server sends and the client
//! reads; the paths (which route answers which type) are listed here, next to `api::router`.

use koalesce_api::dto::{
    ArrayTask, BagStatus, BrokerTimes, ComponentDetail, ErrorBody, FileInfo, JobDetail, JobSummary, NewFile, NewReservation,
    ReservationInfo, SiteInfo, Submitted, Timeline, TokenInfo,
};
use serde_json::{json, Value};
use utoipa::OpenApi;

use crate::peer::wire::{FederationStatus, GridJob, HandoffRequest, HandoffState, OfferAnswer, OfferRequest, PeerFile, PeerStatus};

#[derive(OpenApi)]
#[openapi(
    info(title = "koalesce server", version = "1"),
    components(schemas(
        JobSummary,
        JobDetail,
        ArrayTask,
        BagStatus,
        Timeline,
        ComponentDetail,
        SiteInfo,
        FileInfo,
        NewFile,
        Submitted,
        TokenInfo,
        ErrorBody,
        BrokerTimes,
        NewReservation,
        ReservationInfo,
        GridJob,
        FederationStatus,
        PeerStatus,
        OfferRequest,
        OfferAnswer,
        HandoffRequest,
        HandoffState,
        PeerFile
    ))
)]
struct Schemas;

pub fn document() -> Value {
    let generated = serde_json::to_value(Schemas::openapi()).unwrap_or_else(|e| unreachable!("an OpenAPI document serializes: {e}"));
    let mut doc = paths();
    doc["openapi"] = generated["openapi"].clone();
    doc["info"] = generated["info"].clone();
    doc["components"]["schemas"] = generated["components"]["schemas"].clone();
    if let (Some(all), Value::Object(fed)) = (doc["paths"].as_object_mut(), federation_paths()) {
        all.extend(fed);
    }
    doc
}

/// The federation's endpoints (issue 14, docs/federation.md): the grid queue for users, and
/// the peer-to-peer calls, which take only a peer's name (`X-Koalesce-Peer`) with the secret
/// the pair shares (bearer), never a user token.
fn federation_paths() -> Value {
    let err = json!({"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}});
    let schema = |name: &str| json!({"content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{name}")}}}});
    let ok = |what: &str, name: &str| {
        let mut v = schema(name);
        v["description"] = json!(what);
        v
    };
    let body = |name: &str| {
        let mut v = schema(name);
        v["required"] = json!(true);
        v
    };
    let path =
        |name: &str, about: &str| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}, "description": about});
    let handoff = path("h", "the handoff id, <origin>-<grid id>-<attempt>");
    let peer = json!([{"peer": []}]);
    let bytes = json!({"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}});
    let mut file = bytes.clone();
    file["description"] = json!("the file's content (206 from the asked Range: bytes=N-; X-Checksum-Sha256: its SHA-256)");
    json!({
        "/api/v1/grid/jobs": {
            "post": {"summary": "Submit a job (TOML) to the grid queue: run here or migrated to a peer (S-I/R-I/SY-I)",
                "requestBody": {"required": true, "content": {"application/toml": {"schema": {"type": "string"}}}},
                "responses": {"201": ok("in the durable grid queue", "Submitted"), "400": err, "401": err, "404": {"description": "the server has no [federation]"}, "422": err}},
            "get": {"summary": "The caller's grid jobs (admins: all): where each runs, its state there, why it moved, its outputs",
                "responses": {"200": {"description": "grid jobs", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/GridJob"}}}}}, "401": err}}
        },
        "/api/v1/grid/jobs/{id}": {"get": {"summary": "One grid job", "parameters": [path("id", "grid job id")],
            "responses": {"200": ok("grid job", "GridJob"), "401": err, "404": err}}},
        "/api/v1/grid/jobs/{id}/cancel": {"post": {"summary": "Cancel a grid job wherever it is: in the grid queue, here, or at the peer (journaled; sent until the peer answers)",
            "parameters": [path("id", "grid job id")],
            "responses": {"200": ok("cancelled", "GridJob"), "202": ok("the cancel is on its way to the peer", "GridJob"), "401": err, "404": err, "409": err}}},
        "/api/v1/grid/jobs/{id}/logs": {"get": {"summary": "A component's stdout or stderr of a grid job wherever it runs or ran (as /api/v1/jobs/{id}/logs)",
            "parameters": [path("id", "grid job id"),
                {"name": "component", "in": "query", "schema": {"type": "integer"}},
                {"name": "stream", "in": "query", "schema": {"type": "string", "enum": ["stdout", "stderr"]}},
                {"name": "offset", "in": "query", "schema": {"type": "integer"}},
                {"name": "tail", "in": "query", "schema": {"type": "integer"}}],
            "responses": {"200": {"description": "the bytes (X-Koalesce-Log-Size, X-Koalesce-Lines-Cut, X-Koalesce-Job-State)",
                "content": {"text/plain": {"schema": {"type": "string"}}}}, "400": err, "401": err, "404": err, "422": err}}},
        "/api/v1/federation": {"get": {"summary": "This server's federation: name, algorithm, peers (availability, measured bandwidth), job counts",
            "responses": {"200": ok("federation", "FederationStatus"), "401": err}}},
        "/api/v1/peer/offer": {"post": {"summary": "Peers: ATT and RU for a job's requirements (002 §III-A1)", "security": peer,
            "requestBody": body("OfferRequest"),
            "responses": {"200": ok("the offer (att_ms null: the job does not fit)", "OfferAnswer"), "400": err, "401": err, "422": err}}},
        "/api/v1/peer/volunteer": {"post": {"summary": "Peers: the caller's RU is below δ (002 §III-A2); a waiting job may be offered to it", "security": peer,
            "responses": {"202": {"description": "noted"}, "401": err}}},
        "/api/v1/peer/handoffs": {"post": {"summary": "Peers: phase one of a migration (stored as prepared, not run; 429 beyond max_handoffs_per_peer prepared)", "security": peer,
            "requestBody": body("HandoffRequest"),
            "responses": {"200": ok("the handoff here (aborted: a tombstone refused it)", "HandoffState"), "400": err, "401": err, "422": err, "429": err}}},
        "/api/v1/peer/handoffs/{h}": {"get": {"summary": "Peers: a handoff the caller made, with its job's state and outputs", "security": peer,
            "parameters": [handoff.clone()], "responses": {"200": ok("the handoff", "HandoffState"), "401": err, "404": err}}},
        "/api/v1/peer/handoffs/{h}/commit": {"post": {"summary": "Peers: phase two: fetch the inputs (answers prepared with inputs_here until they are here), then run the job once", "security": peer,
            "parameters": [handoff.clone()], "responses": {"200": ok("the handoff", "HandoffState"), "401": err, "404": err, "409": err}}},
        "/api/v1/peer/handoffs/{h}/abort": {"post": {"summary": "Peers: abort a handoff that is not committed (unknown: a tombstone; 429 beyond max_handoffs_per_peer tombstones)", "security": peer,
            "parameters": [handoff.clone()], "responses": {"200": ok("the handoff", "HandoffState"), "401": err, "422": err, "429": err}}},
        "/api/v1/peer/handoffs/{h}/done": {"post": {"summary": "Peers (at the receiver): the caller has what it needs of the ended job (its outputs are back); the inputs received for it that no other live handoff or job uses are removed here. Idempotent", "security": peer,
            "parameters": [handoff.clone()], "responses": {"200": ok("the handoff", "HandoffState"), "401": err, "404": err, "409": err}}},
        "/api/v1/peer/handoffs/{h}/outputs/{name}": {"get": {"summary": "Peers (at the receiver): an output of the job the caller handed over, once it succeeded", "security": peer,
            "parameters": [handoff.clone(), path("name", "the output's name here (<job id>/<file>)"), {"name": "Range", "in": "header", "schema": {"type": "string"}, "description": "bytes=N- to resume"}],
            "responses": {"200": file.clone(), "206": file.clone(), "401": err, "404": err, "416": err}}},
        "/api/v1/peer/handoffs/{h}/cancel": {"post": {"summary": "Peers (at the receiver): the origin's user cancelled the job: a prepared handoff is aborted (its received inputs go), a committed one's job cancelled", "security": peer,
            "parameters": [handoff.clone()], "responses": {"200": ok("the handoff", "HandoffState"), "401": err, "404": err}}},
        "/api/v1/peer/handoffs/{h}/logs/{name}": {"get": {"summary": "Peers (at the receiver): a log (c<N>/stdout, c<N>/stderr) of the job the caller handed over; with its SHA-256 once the job ended", "security": peer,
            "parameters": [handoff.clone(), path("name", "c<component>/stdout or c<component>/stderr"), {"name": "Range", "in": "header", "schema": {"type": "string"}, "description": "bytes=N- to resume"},
                {"name": "tail", "in": "query", "schema": {"type": "integer"}, "description": "only its last L lines (at most 16 MiB of them), with X-Koalesce-Log-Size and X-Koalesce-Lines-Cut"}],
            "responses": {"200": file.clone(), "206": file.clone(), "401": err, "404": err, "409": err, "416": err, "422": err}}},
        "/api/v1/peer/sent/{h}/inputs/{name}": {"get": {"summary": "Peers (at the origin): an input of the job this server handed to the caller", "security": peer,
            "parameters": [handoff, path("name", "the input's logical name at the origin"), {"name": "Range", "in": "header", "schema": {"type": "string"}, "description": "bytes=N- to resume"}],
            "responses": {"200": file.clone(), "206": file, "401": err, "404": err, "416": err}}},
        "/api/v1/peer/probe": {"get": {"summary": "Peers: N zero bytes, to measure the bandwidth from here to the caller", "security": peer,
            "parameters": [{"name": "bytes", "in": "query", "required": true, "schema": {"type": "integer", "maximum": crate::peer::config::MAX_PROBE_BYTES}}],
            "responses": {"200": bytes, "400": err, "401": err, "422": err}}}
    })
}

fn paths() -> Value {
    let err = json!({"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}});
    let job_id = json!({"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}});
    let q = |name: &str, ty: &str, about: &str| json!({"name": name, "in": "query", "schema": {"type": ty}, "description": about});
    let summary =
        json!({"description": "the job", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobSummary"}}}});
    json!({
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                "peer": {"type": "http", "scheme": "bearer", "description": "the secret a pair of peers shares, with the caller's name in X-Koalesce-Peer; valid on /api/v1/peer/* only"}},
            "schemas": {}
        },
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/jobs": {
                "post": {"summary": "Submit a job (TOML job description), held, with dependencies, as an array or as a bag of tasks",
                    "parameters": [
                        q("hold", "boolean", "submit held (placed after release)"),
                        q("dependency", "string", "Slurm syntax: afterok:12:13,afterany:9 (after, afterany, afterok, afternotok); an array's or bag's id: every task"),
                        q("array", "string", "one job per task: 1-100, 0-30:10, 1,3,5; %M at most M active"),
                        q("tasks", "integer", "a bag of N tasks (GridWay's array job), each placed on its own; its id is the bag's"),
                        q("min_tasks", "integer", "with tasks: the bag succeeds when at least this many tasks succeed (default: all)"),
                        q("param_start", "integer", "with tasks: KOALESCE_PARAM of task 0 (GridWay's ${PARAM}, gwsubmit -s)"),
                        q("param_increment", "integer", "with tasks: KOALESCE_PARAM's step per task (gwsubmit -i)")
                    ],
                    "requestBody": {"required": true, "content": {"application/toml": {"schema": {"type": "string"}}}},
                    "responses": {"201": {"description": "committed", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Submitted"}}}},
                        "400": err, "401": err, "408": err, "413": err, "422": err, "429": err}},
                "get": {"summary": "List jobs",
                    "parameters": [
                        q("state", "string", "state or comma-separated states"),
                        q("name", "string", "shell wildcard, case ignored"),
                        q("site", "string", "placed at this site"),
                        q("since", "integer", "submitted at or after (Unix ms)"),
                        q("user", "string", "admins: this user's jobs"),
                        q("all", "boolean", "admins: every user's jobs (403 for others)"),
                        q("limit", "integer", "at most this many (X-Koalesce-Next-After: the next page's after)"),
                        q("after", "integer", "ids above this one")
                    ],
                    "responses": {"200": {"description": "jobs", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/JobSummary"}}}}}, "401": err, "403": err, "422": err}}
            },
            "/api/v1/jobs/{id}": {"get": {"summary": "One job", "parameters": [job_id],
                "responses": {"200": {"description": "job", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobDetail"}}}}, "401": err, "404": err}}},
            "/api/v1/jobs/{id}/cancel": {"post": {"summary": "Cancel a job", "parameters": [job_id],
                "responses": {"200": {"description": "cancelled", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobSummary"}}}}, "401": err, "404": err, "409": err}}},
            "/api/v1/jobs/{id}/logs": {"get": {"summary": "A component's stdout or stderr from a byte offset, or its last lines",
                "parameters": [job_id, q("component", "integer", "component index (default 0)"), q("stream", "string", "stdout (default) or stderr"),
                    q("offset", "integer", "from this byte (X-Koalesce-Log-Size: the next offset)"), q("tail", "integer", "only the last lines (X-Koalesce-Lines-Cut: lines before them)")],
                "responses": {"200": {"description": "output", "content": {"text/plain": {"schema": {"type": "string"}}}}, "401": err, "404": err, "422": err}}},
            "/api/v1/jobs/{id}/hold": {"post": {"summary": "Hold a queued job", "parameters": [job_id],
                "responses": {"200": summary, "401": err, "404": err, "409": err}}},
            "/api/v1/jobs/{id}/release": {"post": {"summary": "Release a held job", "parameters": [job_id],
                "responses": {"200": summary, "401": err, "404": err, "409": err}}},
            "/api/v1/tokens": {"get": {"summary": "The caller's tokens (all=true: everyone's, admins only)",
                "parameters": [{"name": "all", "in": "query", "schema": {"type": "boolean"}}],
                "responses": {"200": {"description": "tokens", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/TokenInfo"}}}}}, "401": err, "403": err}}},
            "/api/v1/tokens/{id}": {"delete": {"summary": "Revoke a token at once (own; admins: any)",
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "revoked", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TokenInfo"}}}}, "401": err, "404": err}}},
            "/api/v1/sites": {"get": {"summary": "Sites", "parameters": [{"name": "blacklisted", "in": "query", "schema": {"type": "boolean"}}],
                "responses": {"200": {"description": "sites", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/SiteInfo"}}}}}, "401": err}}},
            "/api/v1/sites/{name}/readmit": {"post": {"summary": "Take a site off the blacklist (admins)",
                "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "re-admitted", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SiteInfo"}}}}, "401": err, "403": err, "404": err}}},
            "/api/v1/files": {
                "get": {"summary": "Replica catalogue", "responses": {"200": {"description": "files", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/FileInfo"}}}}}, "401": err}},
                "post": {"summary": "Register a file on the server's machine at a site (admins; users inside their [files] import_dirs)",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NewFile"}}}},
                    "responses": {"201": {"description": "registered", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileInfo"}}}}, "400": err, "401": err, "403": err, "409": err, "413": err, "422": err, "429": err}}
            },
            "/api/v1/files/{name}": {
                "put": {"summary": "Upload a file (the body is its content) to a site's storage",
                    "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}},
                        {"name": "site", "in": "query", "required": true, "schema": {"type": "string"}},
                        {"name": "sha256", "in": "query", "description": "refused unless the content has this SHA-256", "schema": {"type": "string"}}],
                    "requestBody": {"required": true, "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
                    "responses": {"201": {"description": "registered", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileInfo"}}}}, "400": err, "401": err, "403": err, "408": err, "409": err, "413": err, "422": err, "429": err}},
                "get": {"summary": "A file's content (X-Checksum-Sha256: its SHA-256)",
                "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "content", "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}, "401": err, "404": err, "503": err}},
                "delete": {"summary": "Delete a file and its replicas (its owner or an admin)",
                "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {"204": {"description": "deleted"}, "401": err, "403": err, "404": err, "409": err}}},
            "/api/v1/reservations": {
                "get": {"summary": "The caller's advance reservations (admins: everyone's), in id order, a page at a time (limit: 1000 unless given, at most 10000; after: the cursor; a cut page has X-Koalesce-Next-After and a Link rel=next)",
                    "parameters": [
                        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 10000}},
                        {"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 0}}],
                    "responses": {"200": {"description": "reservations", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/ReservationInfo"}}}}}, "401": err, "422": err}},
                "post": {"summary": "Ask for an advance reservation (001 §2.3): granted, rejected, or rejected with t_next_ms",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NewReservation"}}}},
                    "responses": {"201": {"description": "granted: {answer, reservation}"}, "401": err, "409": {"description": "rejected: {answer, error, t_next_ms?}"}, "413": err, "422": err}}
            },
            "/api/v1/reservations/{id}": {
                "get": {"summary": "One reservation", "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "reservation", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ReservationInfo"}}}}, "401": err, "404": err}},
                "put": {"summary": "Modify = release + create (001 §3.3.2)", "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NewReservation"}}}},
                    "responses": {"200": {"description": "granted: {answer, reservation}"}, "401": err, "404": err, "409": {"description": "rejected: {answer, error, t_next_ms?, kept}"}, "422": err}},
                "delete": {"summary": "Cancel: the processors are free at once", "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "cancelled", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ReservationInfo"}}}}, "401": err, "404": err}}
            },
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
        // sbatch --begin and --constraint: the begin time of jobs, the features of sites.
        let summary = &doc["components"]["schemas"]["JobSummary"]["properties"];
        assert!(detail["begin_ms"].is_object() && summary["begin_ms"].is_object(), "{summary}");
        assert!(site["features"].is_object(), "{site}");
        // The federation's endpoints, the peer ones under the peer scheme.
        for p in [
            "/api/v1/grid/jobs",
            "/api/v1/federation",
            "/api/v1/peer/offer",
            "/api/v1/peer/handoffs/{h}/commit",
            "/api/v1/peer/sent/{h}/inputs/{name}",
            "/api/v1/grid/jobs/{id}/cancel",
            "/api/v1/grid/jobs/{id}/logs",
            "/api/v1/peer/handoffs/{h}/cancel",
            "/api/v1/peer/handoffs/{h}/logs/{name}",
        ] {
            assert!(doc["paths"][p].is_object(), "{p} missing");
        }
        assert_eq!(doc["paths"]["/api/v1/peer/offer"]["post"]["security"][0]["peer"], json!([]));
        let grid = &doc["components"]["schemas"]["GridJob"]["properties"];
        assert!(grid["runs_at"].is_object() && grid["outputs"].is_object(), "{grid}");
    }
}
