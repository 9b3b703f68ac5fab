//! The dashboard's files, compiled into the binary (no Node.js, CDN or disk at run time).
//! Hand-written HTML, CSS and JavaScript modules: there is no build step.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// (path under /ui/assets/, content type, bytes)
const FILES: &[(&str, &str, &str)] = &[
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("../assets/app.css"),
    ),
    ("js/app.js", JS, include_str!("../assets/js/app.js")),
    ("js/api.js", JS, include_str!("../assets/js/api.js")),
    ("js/dom.js", JS, include_str!("../assets/js/dom.js")),
    ("js/nav.js", JS, include_str!("../assets/js/nav.js")),
    ("js/live.js", JS, include_str!("../assets/js/live.js")),
    ("js/chart.js", JS, include_str!("../assets/js/chart.js")),
    ("js/bulk.js", JS, include_str!("../assets/js/bulk.js")),
    ("js/forms.js", JS, include_str!("../assets/js/forms.js")),
    (
        "js/timeline.js",
        JS,
        include_str!("../assets/js/timeline.js"),
    ),
    (
        "js/pages/overview.js",
        JS,
        include_str!("../assets/js/pages/overview.js"),
    ),
    (
        "js/pages/queues.js",
        JS,
        include_str!("../assets/js/pages/queues.js"),
    ),
    (
        "js/pages/jobs.js",
        JS,
        include_str!("../assets/js/pages/jobs.js"),
    ),
    (
        "js/pages/job.js",
        JS,
        include_str!("../assets/js/pages/job.js"),
    ),
    (
        "js/pages/dead.js",
        JS,
        include_str!("../assets/js/pages/dead.js"),
    ),
    (
        "js/pages/enqueue.js",
        JS,
        include_str!("../assets/js/pages/enqueue.js"),
    ),
    (
        "js/pages/webhooks.js",
        JS,
        include_str!("../assets/js/pages/webhooks.js"),
    ),
    (
        "js/pages/monitors.js",
        JS,
        include_str!("../assets/js/pages/monitors.js"),
    ),
    (
        "js/pages/keys.js",
        JS,
        include_str!("../assets/js/pages/keys.js"),
    ),
    (
        "js/pages/ash.js",
        JS,
        include_str!("../assets/js/pages/ash.js"),
    ),
    (
        "js/pages/http.js",
        JS,
        include_str!("../assets/js/pages/http.js"),
    ),
    (
        "js/pages/schedules.js",
        JS,
        include_str!("../assets/js/pages/schedules.js"),
    ),
    (
        "js/pages/workflows.js",
        JS,
        include_str!("../assets/js/pages/workflows.js"),
    ),
    (
        "js/pages/workflow.js",
        JS,
        include_str!("../assets/js/pages/workflow.js"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("../assets/favicon.svg"),
    ),
];

const JS: &str = "text/javascript; charset=utf-8";

const INDEX: &str = include_str!("../assets/index.html");

pub async fn index() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INDEX,
    )
        .into_response()
}

pub async fn asset(Path(path): Path<String>) -> Response {
    match FILES.iter().find(|(p, _, _)| *p == path) {
        Some((_, ctype, body)) => {
            let mut res = (*body).into_response();
            let h = res.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
            // Revalidated each load: assets change with the binary and are small.
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            res
        }
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_module_imported_is_served() {
        // A page module that is not in FILES would 404 in the browser: check imports.
        let names: Vec<&str> = super::FILES.iter().map(|f| f.0).collect();
        for (path, _, body) in super::FILES.iter().filter(|f| f.0.ends_with(".js")) {
            for line in body.lines().filter(|l| l.starts_with("import ")) {
                let Some(spec) = line.split(['"', '\'']).nth(1) else {
                    continue;
                };
                let base = path.rsplit_once('/').map_or("", |(d, _)| d);
                let mut parts: Vec<&str> = base.split('/').filter(|p| !p.is_empty()).collect();
                for seg in spec.split('/') {
                    match seg {
                        "." => {}
                        ".." => {
                            parts.pop();
                        }
                        s => parts.push(s),
                    }
                }
                let full = parts.join("/");
                assert!(
                    names.contains(&full.as_str()),
                    "{path} imports {spec} ({full})"
                );
            }
        }
    }
}
