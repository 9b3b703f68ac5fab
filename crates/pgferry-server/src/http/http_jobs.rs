//! HTTP jobs at creation: a job on a queue named `http` is run by the server's HTTP worker
//! (pgferry-http-jobs), so its args must be an HTTP request whose destination the SSRF
//! guard accepts (address hosts here; names again when resolved before each attempt).

use serde_json::Value;

use super::error::{ApiError, ApiResult};

/// The queue name whose jobs are HTTP jobs.
pub const QUEUE: &str = "http";

/// 400 naming `args` or `args.<field>` unless `args` is a valid, allowed HTTP request.
pub fn check(allow: &pgferry_http_jobs::Allow, args: &Value) -> ApiResult<()> {
    let req: pgferry_http_jobs::HttpRequest = serde_json::from_value(args.clone())
        .map_err(|e| ApiError::bad_request("args", format!("not an HTTP job: {e}")))?;
    req.validate(allow)
        .map_err(|e| ApiError::bad_request(format!("args.{}", e.field), e.reason))
}
