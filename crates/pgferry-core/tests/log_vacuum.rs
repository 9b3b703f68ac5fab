//! Log partitions are never vacuumed for their inserts (ADR 0011, migrations/0001_baseline.sql): every partition of
//! the five log tables, attached or detached (ADR 0009), and its TOAST table carry
//! `autovacuum_vacuum_insert_threshold = -1`; nothing else of autovacuum is changed.

mod common;

#[tokio::test]
async fn log_partitions_skip_insert_vacuums_only() {
    let s = common::setup().await;
    let admin = s.db.connect().await;
    let rows = admin
        .query(
            "SELECT t.relname, coalesce(t.reloptions, '{}'), coalesce(x.reloptions, '{}')
               FROM pg_class t
               JOIN pg_namespace n ON n.oid = t.relnamespace
               LEFT JOIN pg_class x ON x.oid = t.reltoastrelid
              WHERE n.nspname = 'pgferry'
                AND t.relname ~ '^(ready|receipts|completions|results|ticks)_[0-9]{2}$'
                AND t.relkind = 'r'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 80, "16 segments x 5 log tables");
    let off = "autovacuum_vacuum_insert_threshold=-1".to_string();
    for r in &rows {
        let (name, own, toast): (String, Vec<String>, Vec<String>) = (r.get(0), r.get(1), r.get(2));
        assert!(own.contains(&off), "{name}: {own:?}");
        assert!(toast.contains(&off), "{name} (TOAST): {toast:?}");
        // Autovacuum as such (analyze, dead-tuple and anti-wraparound vacuums) stays on.
        assert!(
            !own.iter()
                .chain(&toast)
                .any(|o| o.starts_with("autovacuum_enabled")),
            "{name}: {own:?} {toast:?}"
        );
    }
    // Some of them are detached right now (free segments), and still carry it.
    let attached: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
              WHERE p.relname = 'ready' AND p.relnamespace = 'pgferry'::regnamespace",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(attached < 16, "{attached} ready partitions attached");
}
