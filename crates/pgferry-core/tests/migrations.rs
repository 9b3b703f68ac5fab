//! Migrations: applied once, re-run is a no-op, concurrent runs are safe, edits are caught.

use pgferry_core::migrate::{self, Component, Function, MigrateError, Migration, MigrationState};

#[tokio::test]
async fn applies_once_and_rerun_is_noop() {
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    let first = migrate::up(&mut client).await.unwrap();
    assert_eq!(
        first,
        migrate::MIGRATIONS
            .iter()
            .map(|m| m.version)
            .collect::<Vec<_>>()
    );
    let second = migrate::up(&mut client).await.unwrap();
    assert!(second.is_empty(), "re-run applied {second:?}");
    let n: i64 = client
        .query_one("SELECT count(*) FROM pgferry.schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n as usize, migrate::MIGRATIONS.len());
    assert!(migrate::is_current(&client).await.unwrap());
}

#[tokio::test]
async fn concurrent_up_applies_each_migration_once() {
    let db = pgferry_testkit::test_db().await;
    let mut a = db.connect().await;
    let mut b = db.connect().await;
    let (ra, rb) = tokio::join!(migrate::up(&mut a), migrate::up(&mut b));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    // Exactly one of them applied everything; the other found nothing to do.
    assert!(
        (ra.len() == migrate::MIGRATIONS.len() && rb.is_empty())
            || (rb.len() == migrate::MIGRATIONS.len() && ra.is_empty()),
        "a applied {ra:?}, b applied {rb:?}"
    );
    let n: i64 = a
        .query_one("SELECT count(*) FROM pgferry.schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n as usize, migrate::MIGRATIONS.len());
}

#[tokio::test]
async fn modified_applied_migration_is_reported() {
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    let v1 = [Migration {
        version: 1,
        name: "0001_t.sql",
        sql: "CREATE TABLE t1 (a int)",
    }];
    migrate::up_with(&mut client, &v1).await.unwrap();
    let edited = [Migration {
        version: 1,
        name: "0001_t.sql",
        sql: "CREATE TABLE t1 (a bigint)",
    }];
    match migrate::up_with(&mut client, &edited).await {
        Err(MigrateError::Modified { version: 1, .. }) => {}
        other => panic!("expected Modified, got {other:?}"),
    }
    let status = migrate::status_with(&client, &edited).await.unwrap();
    assert_eq!(status[0].state, MigrationState::Modified);
    // A newer migration on top of the edited file is not applied either.
    let more = [
        edited[0],
        Migration {
            version: 2,
            name: "0002_t.sql",
            sql: "CREATE TABLE t2 (a int)",
        },
    ];
    assert!(migrate::up_with(&mut client, &more).await.is_err());
    let t2: bool = client
        .query_one("SELECT to_regclass('t2') IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!t2);
}

#[tokio::test]
async fn failed_migration_leaves_no_trace() {
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    let bad = [Migration {
        version: 1,
        name: "0001_bad.sql",
        sql: "CREATE TABLE ok1 (a int); SELECT 1/0;",
    }];
    assert!(matches!(
        migrate::up_with(&mut client, &bad).await,
        Err(MigrateError::Failed { version: 1, .. })
    ));
    let ok1: bool = client
        .query_one("SELECT to_regclass('ok1') IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!ok1, "a failed migration must roll back entirely");
    let status = migrate::status_with(&client, &bad).await.unwrap();
    assert_eq!(status[0].state, MigrationState::Pending);
}

#[tokio::test]
async fn a_changed_function_is_reapplied_alone() {
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    let v1 = [
        Function {
            name: "f_a",
            sql: "CREATE OR REPLACE FUNCTION public.f_a() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        },
        Function {
            name: "f_b",
            sql: "CREATE OR REPLACE FUNCTION public.f_b() RETURNS int LANGUAGE sql AS 'SELECT public.f_a() + 1'",
        },
    ];
    let component = |functions| Component {
        name: "test_fn",
        migrations: &[],
        functions,
    };
    let first = migrate::up_components(&mut client, &[component(&v1)])
        .await
        .unwrap();
    assert_eq!(first.functions, ["f_a", "f_b"]);
    let again = migrate::up_components(&mut client, &[component(&v1)])
        .await
        .unwrap();
    assert!(again.functions.is_empty(), "unchanged: {again:?}");

    // A new build changes f_a only: one file's diff, one function replaced.
    let v2 = [
        Function {
            name: "f_a",
            sql: "CREATE OR REPLACE FUNCTION public.f_a() RETURNS int LANGUAGE sql AS 'SELECT 41'",
        },
        v1[1],
    ];
    let status = migrate::status_of(&client, &[component(&v2)])
        .await
        .unwrap();
    assert_eq!(
        status.iter().map(|s| s.state.clone()).collect::<Vec<_>>(),
        [MigrationState::Modified, MigrationState::Applied]
    );
    let second = migrate::up_components(&mut client, &[component(&v2)])
        .await
        .unwrap();
    assert_eq!(second.functions, ["f_a"]);
    let b: i32 = client
        .query_one("SELECT public.f_b()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(b, 42);
    assert!(migrate::are_current(&client, &[component(&v2)])
        .await
        .unwrap());
}

#[tokio::test]
async fn a_failing_function_rolls_back_every_function_of_the_build() {
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    let bad = [
        Function {
            name: "f_ok",
            sql: "CREATE OR REPLACE FUNCTION public.f_ok() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        },
        Function {
            name: "f_bad",
            sql: "CREATE OR REPLACE FUNCTION public.f_bad() RETURNS int LANGUAGE sql AS 'SELECT nope'",
        },
    ];
    let c = Component {
        name: "test_fn",
        migrations: &[],
        functions: &bad,
    };
    match migrate::up_components(&mut client, &[c]).await {
        Err(MigrateError::Function { name: "f_bad", .. }) => {}
        other => panic!("expected Function error, got {other:?}"),
    }
    let ok: bool = client
        .query_one("SELECT to_regprocedure('public.f_ok()') IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!ok, "the build's functions apply together or not at all");
}

/// Every live function of the engine is defined exactly once in the tree, in its own file
/// under src/sql/functions/, and no versioned migration defines a function (ADR 0017).
#[test]
fn each_engine_function_is_defined_once_in_its_own_file() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut defined: Vec<(String, std::path::PathBuf)> = Vec::new();
    let re_start = "FUNCTION pgferry.";
    let mut stack = vec![root.join("migrations"), root.join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "sql") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines().filter(|l| !l.trim_start().starts_with("--")) {
                let upper = line.to_ascii_uppercase();
                if !(upper.starts_with("CREATE FUNCTION")
                    || upper.starts_with("CREATE OR REPLACE FUNCTION"))
                {
                    continue;
                }
                let at = line
                    .find(re_start)
                    .expect("engine functions live in schema pgferry");
                let name: String = line[at + re_start.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                defined.push((name, path.clone()));
            }
        }
    }
    for (name, path) in &defined {
        assert_eq!(
            path.parent().unwrap(),
            root.join("src/sql/functions"),
            "{name} is defined in {path:?}, outside src/sql/functions"
        );
        assert_eq!(
            path.file_stem().unwrap().to_str().unwrap(),
            name,
            "one function per file, named after it"
        );
        assert_eq!(
            defined.iter().filter(|(n, _)| n == name).count(),
            1,
            "{name} is defined more than once"
        );
    }
    let mut files: Vec<&str> = defined.iter().map(|(n, _)| n.as_str()).collect();
    let mut listed: Vec<&str> = migrate::FUNCTIONS.iter().map(|f| f.name).collect();
    files.sort_unstable();
    listed.sort_unstable();
    assert_eq!(
        files, listed,
        "every function file is applied, and only those"
    );
}
