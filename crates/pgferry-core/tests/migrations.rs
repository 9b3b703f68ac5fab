//! Migrations: applied once, re-run is a no-op, concurrent runs are safe, edits are caught.

use pgferry_core::migrate::{self, MigrateError, Migration, MigrationState};

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
