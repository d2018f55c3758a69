//! The OpenAPI 3 document of the v1 API (hand-written, mirrors docs/server-contract.md).

use serde_json::{json, Value};

pub fn document() -> Value {
    let err = json!({"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    let job_id = json!({"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}});
    json!({
        "openapi": "3.0.3",
        "info": {"title": "koalesce server", "version": "1"},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
                "JobSummary": {"type": "object", "properties": {
                    "id": {"type": "integer"}, "name": {"type": "string"}, "user": {"type": "string"},
                    "state": {"type": "string", "enum": ["queued","placed","claimed","running","succeeded","failed","cancelled"]},
                    "priority": {"type": "string", "enum": ["super-high","high","low","super-low"]},
                    "components": {"type": "integer"}, "size": {"type": "integer"},
                    "sites": {"type": "array", "items": {"type": "string"}},
                    "submitted_ms": {"type": "integer"}, "started_ms": {"type": "integer", "nullable": true},
                    "finished_ms": {"type": "integer", "nullable": true}, "exit_ok": {"type": "boolean", "nullable": true}}},
                "JobDetail": {"allOf": [{"$ref": "#/components/schemas/JobSummary"}, {"type": "object", "properties": {
                    "timeline": {"type": "object", "properties": {
                        "submitted": {"type": "integer"}, "placed": {"type": "integer", "nullable": true},
                        "claimed": {"type": "integer", "nullable": true}, "started": {"type": "integer", "nullable": true},
                        "finished": {"type": "integer", "nullable": true}, "ftt_ms": {"type": "integer"},
                        "pgt_ms": {"type": "integer", "nullable": true}, "pwt_ms": {"type": "integer", "nullable": true},
                        "twt_ms": {"type": "integer", "nullable": true}}},
                    "placement_tries": {"type": "integer"}, "claiming_tries": {"type": "integer"},
                    "failure": {"type": "string", "nullable": true},
                    "components": {"type": "array", "items": {"type": "object", "properties": {
                        "index": {"type": "integer"}, "processors": {"type": "integer"}, "site": {"type": "string", "nullable": true},
                        "state": {"type": "string"}, "exit_code": {"type": "integer", "nullable": true},
                        "stdout": {"type": "string", "nullable": true, "description": "path of the component's stdout file on the server"},
                        "stderr": {"type": "string", "nullable": true}}}},
                    "outputs": {"type": "array", "items": {"type": "string"}}}}]},
                "Site": {"type": "object", "properties": {
                    "name": {"type": "string"}, "processors": {"type": "integer"}, "idle": {"type": "integer"},
                    "used": {"type": "integer"}, "placed_unclaimed": {"type": "integer"},
                    "blacklisted": {"type": "boolean"}, "supports_reservations": {"type": "boolean"}}},
                "File": {"type": "object", "properties": {
                    "name": {"type": "string"}, "size_bytes": {"type": "integer"}, "sha256": {"type": "string"},
                    "replicas": {"type": "array", "items": {"type": "string"}}}},
                "Token": {"type": "object", "properties": {
                    "id": {"type": "string"}, "user": {"type": "string"}, "admin": {"type": "boolean"},
                    "created_ms": {"type": "integer"}, "expires_ms": {"type": "integer", "nullable": true}}},
                "NewFile": {"type": "object", "required": ["name","path","site"], "properties": {
                    "name": {"type": "string"}, "path": {"type": "string"}, "site": {"type": "string"}}}
            }
        },
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/jobs": {
                "post": {"summary": "Submit a job (TOML job description)",
                    "requestBody": {"required": true, "content": {"application/toml": {"schema": {"type": "string"}}}},
                    "responses": {"201": {"description": "committed", "content": {"application/json": {"schema": {"type": "object", "properties": {"id": {"type": "integer"}}}}}},
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
                "responses": {"200": {"description": "tokens", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Token"}}}}}, "401": err, "403": err}}},
            "/api/v1/tokens/{id}": {"delete": {"summary": "Revoke a token at once (own; admins: any)",
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "revoked", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Token"}}}}, "401": err, "404": err}}},
            "/api/v1/sites": {"get": {"summary": "Sites", "responses": {"200": {"description": "sites", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Site"}}}}}, "401": err}}},
            "/api/v1/files": {
                "get": {"summary": "Replica catalogue", "responses": {"200": {"description": "files", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/File"}}}}}, "401": err}},
                "post": {"summary": "Register a server-local file at a site",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NewFile"}}}},
                    "responses": {"201": {"description": "registered", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/File"}}}}, "400": err, "401": err, "409": err, "413": err, "422": err}}
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
