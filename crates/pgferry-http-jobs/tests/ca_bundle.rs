//! The CA bundle of `pgferry serve --http-jobs-ca-bundle`: its certificates become the
//! executor's extra roots (an HTTPS target with a self-signed certificate on loopback is
//! reached through it), and a missing, empty or damaged file is an error naming the file.

mod common;

use common::tls_target;
use pgferry_http_jobs::ca_bundle::{self, CaBundleError};
use pgferry_http_jobs::ssrf::Range;
use pgferry_http_jobs::{Allow, Attempt, Executor, ExecutorConfig, HttpRequest};

fn get(url: String) -> HttpRequest {
    serde_json::from_value(serde_json::json!({ "url": url })).unwrap()
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[tokio::test]
async fn a_bundle_makes_a_self_signed_https_target_trusted() {
    let (port, pem) = tls_target().await;
    let dir = std::env::temp_dir().join(format!("pgferry-ca-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Another CA first, comments between blocks: as bundles are written.
    let other = rcgen::generate_simple_self_signed(vec!["other.test".to_string()]).unwrap();
    let bundle = format!("# other\n{}\n# ours\n{pem}", other.cert.pem());
    let path = write(&dir, "bundle.pem", &bundle);
    let roots = ca_bundle::load(&path).unwrap();
    assert_eq!(roots.len(), 2);
    let url = format!("https://localhost:{port}/hook");
    let trusting = Executor::new(ExecutorConfig {
        allow: Allow::of(&[Range::Loopback]),
        root_certs_pem: roots,
        ..Default::default()
    })
    .unwrap();
    match trusting.run(&get(url.clone())).await {
        Attempt::Succeeded(r) => assert_eq!((r.status, r.body.as_str()), (200, "tls-ok")),
        other => panic!("{other:?}"),
    }
    // A bundle with only the other CA does not make it trusted.
    let only_other = write(&dir, "other.pem", &other.cert.pem());
    let untrusting = Executor::new(ExecutorConfig {
        allow: Allow::of(&[Range::Loopback]),
        root_certs_pem: ca_bundle::load(&only_other).unwrap(),
        ..Default::default()
    })
    .unwrap();
    match untrusting.run(&get(url)).await {
        Attempt::Failed { error, .. } => {
            assert!(error.to_lowercase().contains("certificate"), "{error}")
        }
        other => panic!("{other:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_empty_or_damaged_bundle_is_an_error_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("pgferry-ca-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("nope.pem");
    let e = ca_bundle::load(&missing).unwrap_err();
    assert!(matches!(e, CaBundleError::Read { .. }), "{e}");
    assert!(e.to_string().contains("nope.pem"), "{e}");

    let empty = write(&dir, "empty.pem", "just text\n");
    let e = ca_bundle::load(&empty).unwrap_err();
    assert!(matches!(e, CaBundleError::Empty { .. }), "{e}");
    assert!(e.to_string().contains("empty.pem"), "{e}");

    let good = rcgen::generate_simple_self_signed(vec!["a.test".to_string()]).unwrap();
    let damaged = format!(
        "{}-----BEGIN CERTIFICATE-----\nTm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
        good.cert.pem()
    );
    let damaged = write(&dir, "damaged.pem", &damaged);
    match ca_bundle::load(&damaged).unwrap_err() {
        CaBundleError::Invalid { index, path, .. } => {
            assert_eq!(index, 2);
            assert!(path.ends_with("damaged.pem"));
        }
        e => panic!("{e}"),
    }
    let unterminated = write(&dir, "cut.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n");
    assert!(matches!(
        ca_bundle::load(&unterminated).unwrap_err(),
        CaBundleError::Invalid { index: 1, .. }
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}
