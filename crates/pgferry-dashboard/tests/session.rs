//! The dashboard's security over plain HTTP (no browser): cookie attributes, CSRF, sign-in
//! rules, session end on sign-out and on key revocation, CSP and the absence of inline code.

mod common;

use common::TestServer;
use pgferry_server::auth::admin;
use reqwest::header::{HeaderMap, CONTENT_TYPE, COOKIE, SET_COOKIE};
use serde_json::{json, Value};

struct Session {
    cookie: String,
    csrf: String,
}

async fn sign_in(s: &TestServer, key: &str, headers: &[(&str, &str)]) -> (u16, Value, HeaderMap) {
    let mut req = s
        .http
        .post(format!("{}/ui/api/session", s.base))
        .json(&json!({ "api_key": key }));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = req.send().await.unwrap();
    let (status, headers) = (res.status().as_u16(), res.headers().clone());
    (status, res.json().await.unwrap_or(Value::Null), headers)
}

async fn session(s: &TestServer, key: &str) -> Session {
    let (st, body, headers) = sign_in(s, key, &[]).await;
    assert_eq!(st, 200, "{body}");
    let set = headers[SET_COOKIE].to_str().unwrap();
    Session {
        cookie: set.split(';').next().unwrap().to_string(),
        csrf: body["csrf_token"].as_str().unwrap().to_string(),
    }
}

async fn call(
    s: &TestServer,
    sess: &Session,
    method: &str,
    path: &str,
    csrf: Option<&str>,
    extra: &[(&str, &str)],
) -> (u16, Value) {
    let mut req = s
        .http
        .request(method.parse().unwrap(), format!("{}{path}", s.base))
        .header(COOKIE, &sess.cookie);
    if method != "GET" {
        req = req.header(CONTENT_TYPE, "application/json").body("{}");
    }
    if let Some(t) = csrf {
        req = req.header("x-csrf-token", t);
    }
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let res = req.send().await.unwrap();
    let st = res.status().as_u16();
    (st, res.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn session_cookie_is_httponly_strict_and_secure_off_loopback() {
    let s = TestServer::start().await;
    let key = s.key("acme", &["admin"]).await;
    let (st, body, h) = sign_in(&s, &key, &[]).await;
    assert_eq!(st, 200, "{body}");
    let c = h[SET_COOKIE].to_str().unwrap();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(c.contains(attr), "{c}");
    }
    // Loopback over plain HTTP (pgferry dev): a Secure cookie would be dropped.
    assert!(!c.contains("Secure"), "{c}");
    assert_eq!(body["secure_cookie"], json!(false));
    assert_eq!(body["identity"]["tenant"], json!("acme"));
    assert!(
        !body.to_string().contains(key.split('_').nth(2).unwrap()),
        "secret echoed"
    );
    // Behind a TLS proxy: Secure.
    let (_, _, h) = sign_in(&s, &key, &[("x-forwarded-proto", "https")]).await;
    assert!(h[SET_COOKIE].to_str().unwrap().contains("; Secure"));
}

#[tokio::test]
async fn every_action_needs_the_sessions_csrf_token_and_the_same_origin() {
    let s = TestServer::start().await;
    let key = s.key("acme", &["admin"]).await;
    let sess = session(&s, &key).await;
    let path = "/ui/api/v1/queues/emails";
    let bad = [
        (None, vec![]),
        (Some("0".repeat(64)), vec![]),
        (
            Some(sess.csrf.clone()),
            vec![("origin", "http://evil.example")],
        ),
        (
            Some(sess.csrf.clone()),
            vec![("sec-fetch-site", "cross-site")],
        ),
    ];
    for (token, extra) in bad {
        let (st, body) = call(&s, &sess, "PATCH", path, token.as_deref(), &extra).await;
        assert_eq!(
            (st, body["error"]["field"].as_str()),
            (403, Some("x-csrf-token")),
            "{token:?} {extra:?}: {body}"
        );
    }
    // Nothing was created by the refused requests.
    let (st, _) = call(&s, &sess, "GET", path, None, &[]).await;
    assert_eq!(st, 404);
    let (st, body) = call(&s, &sess, "PATCH", path, Some(&sess.csrf), &[]).await;
    assert_eq!(st, 200, "{body}");
    // Another session's token is not this session's.
    let other = session(&s, &key).await;
    let (st, _) = call(
        &s,
        &sess,
        "POST",
        "/ui/api/v1/queues/emails/pause",
        Some(&other.csrf),
        &[],
    )
    .await;
    assert_eq!(st, 403);
}

#[tokio::test]
async fn sign_in_is_json_only_and_needs_a_valid_key_with_read() {
    let s = TestServer::start().await;
    let key = s.key("acme", &["admin"]).await;
    // A cross-site HTML form can only send form encoding: refused.
    let res = s
        .http
        .post(format!("{}/ui/api/session", s.base))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("api_key={key}"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 403);
    let (st, _, h) = sign_in(&s, &key, &[("origin", "http://evil.example")]).await;
    assert_eq!(st, 403);
    assert!(h.get(SET_COOKIE).is_none());
    let (st, body, _) = sign_in(&s, "pgf_000000000000_00", &[]).await;
    assert_eq!(
        (st, body["error"]["field"].as_str()),
        (401, Some("api_key")),
        "{body}"
    );
    let consumer = s.key("acme", &["consume"]).await;
    let (st, body, _) = sign_in(&s, &consumer, &[]).await;
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    let (st, body, _) = sign_in(&s, "", &[]).await;
    assert_eq!(
        (st, body["error"]["field"].as_str()),
        (400, Some("api_key")),
        "{body}"
    );
}

#[tokio::test]
async fn sign_out_and_revocation_end_the_session() {
    let s = TestServer::start().await;
    let key = s.key("acme", &["admin"]).await;
    let sess = session(&s, &key).await;
    assert_eq!(
        call(&s, &sess, "GET", "/ui/api/session", None, &[]).await.0,
        200
    );
    assert_eq!(
        call(
            &s,
            &sess,
            "DELETE",
            "/ui/api/session",
            Some(&sess.csrf),
            &[]
        )
        .await
        .0,
        204
    );
    assert_eq!(
        call(&s, &sess, "GET", "/ui/api/session", None, &[]).await.0,
        401
    );
    assert_eq!(
        call(&s, &sess, "GET", "/ui/api/v1/queues", None, &[])
            .await
            .0,
        401
    );

    let sess = session(&s, &key).await;
    let mut c = s.db.connect().await;
    admin::revoke_key(&mut c, &key).await.unwrap();
    s.state.auth.clear_cache();
    let (st, body) = call(&s, &sess, "GET", "/ui/api/v1/queues", None, &[]).await;
    assert_eq!(st, 401, "{body}");
    assert_eq!(
        call(&s, &sess, "GET", "/ui/api/session", None, &[]).await.0,
        401
    );
}

#[tokio::test]
async fn pages_carry_a_strict_csp_and_no_inline_code() {
    let s = TestServer::start().await;
    let res = s.http.get(format!("{}/", s.base)).send().await.unwrap();
    // reqwest follows the redirect from / to /ui.
    assert_eq!(res.url().path(), "/ui");
    let csp = res.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    let html = res.text().await.unwrap();
    // Every <script> has a src; no inline handlers or style attributes (the CSP would
    // block them anyway: this keeps the page from depending on them).
    for tag in html.split("<script").skip(1) {
        assert!(
            tag.split('>').next().unwrap().contains("src="),
            "inline script: {tag}"
        );
    }
    assert!(
        !html.contains(" style=") && !html.contains(" onclick="),
        "inline code"
    );
    let res = s
        .http
        .get(format!("{}/ui/assets/js/app.js", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert!(res.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));
    assert_eq!(res.headers()["x-content-type-options"], "nosniff");
    let res = s
        .http
        .get(format!("{}/ui/assets/nope.js", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 404);
    let res = s
        .http
        .get(format!("{}/ui/api/v1/queues", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 401, "no session, no data");
}

/// Reads the event stream until an event named `name` arrives (10 s at most); its data.
async fn next_event(res: &mut reqwest::Response, buf: &mut String, name: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let event = block.lines().find_map(|l| l.strip_prefix("event: "));
            let data = block.lines().find_map(|l| l.strip_prefix("data: "));
            if event == Some(name) {
                return serde_json::from_str(data.unwrap_or("null")).unwrap();
            }
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let chunk = tokio::time::timeout(left, res.chunk())
            .await
            .unwrap_or_else(|_| panic!("no {name:?} event; buffered: {buf:?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("stream ended before {name:?}"));
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test]
async fn the_live_stream_follows_the_tenants_queues_and_ends_with_the_key() {
    let s = TestServer::start().await;
    let key = s.key("acme", &["admin"]).await;
    let other = s.key("globex", &["admin"]).await;
    s.enqueue(&other, "payroll", "pay", json!({})).await;
    let sess = session(&s, &key).await;
    let mut res = s
        .http
        .get(format!("{}/ui/api/events", s.base))
        .header(COOKIE, &sess.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert!(res.headers()[CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut buf = String::new();
    let first = next_event(&mut res, &mut buf, "queues").await;
    assert_eq!(
        first["queues"],
        json!([]),
        "another tenant's queue leaked: {first}"
    );
    s.enqueue(&key, "emails", "welcome", json!({})).await;
    let mut seen = Value::Null;
    for _ in 0..20 {
        seen = next_event(&mut res, &mut buf, "queues").await;
        if seen["queues"][0]["counts"]["enqueued"] == json!(1) {
            break;
        }
    }
    assert_eq!(seen["queues"][0]["name"], json!("emails"), "{seen}");
    assert_eq!(seen["queues"][0]["counts"]["enqueued"], json!(1), "{seen}");
    assert_eq!(seen["queues"].as_array().unwrap().len(), 1, "{seen}");
    let mut c = s.db.connect().await;
    admin::revoke_key(&mut c, &key).await.unwrap();
    s.state.auth.clear_cache();
    next_event(&mut res, &mut buf, "signed-out").await;
}
