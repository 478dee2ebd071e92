//! V7 (skin names compared trimmed and ignoring case) over a registry that already holds names
//! differing only by case and surrounding spaces: it applies, loses no stored skin, renames
//! nothing, and the registry's new rules then hold for every spelling.

mod support;

use std::time::Duration;

use osurender_core::adapters::postgres::{parse_url, pool, skins::PgSkinRegistry, Tls};
use osurender_core::domain::render::SkinName;
use osurender_core::ports::skins::{NameClaim, NameState, SkinRegistry, CLAIM_STALE_AFTER};
use osurender_core::support::config::DbSslMode;
use osurender_testkit::fresh_database;
use support::shipped_migrations;

const V7: u32 = 7;

fn version(migration: &str) -> u32 {
    migration[1..].split_once("__").unwrap().0.parse().unwrap()
}

async fn apply(client: &tokio_postgres::Client, migration: &str) {
    let path = format!(
        "{}/../../migrations/{migration}.sql",
        env!("CARGO_MANIFEST_DIR")
    );
    let sql = std::fs::read_to_string(&path).unwrap();
    client
        .batch_execute(&sql)
        .await
        .unwrap_or_else(|e| panic!("{migration}: {e:?}"));
}

/// Stored names as they are, sorted.
async fn stored(client: &tokio_postgres::Client) -> Vec<String> {
    client
        .query(
            "SELECT name FROM skins WHERE stored_at IS NOT NULL ORDER BY name COLLATE \"C\"",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test]
async fn v7_keeps_legacy_names_that_fold_alike() {
    let database = fresh_database("migrate_v7_skin_names").await;
    let client = database.connect().await;
    let url = database.url();
    let migrations = shipped_migrations();
    assert!(
        migrations.iter().any(|m| version(m) == V7),
        "{migrations:?}"
    );
    for migration in migrations.iter().filter(|m| version(m) < V7) {
        apply(&client, migration).await;
    }

    // What the schema before V7 lets in: four spellings of one name stored (the oldest is not
    // the first in any order of the names), a dead and a live unconfirmed claim of it, a name
    // of spaces only, and names that fold alike only unconfirmed.
    client
        .batch_execute(
            "INSERT INTO skins (name, claim, claimed_at, stored_at) VALUES
                 ('name ',   gen_random_uuid(), now() - interval '3 days', now() - interval '3 days'),
                 (' name',   gen_random_uuid(), now() - interval '4 days', now() - interval '4 days'),
                 ('NAME',    gen_random_uuid(), now() - interval '2 days', now() - interval '2 days'),
                 ('Name',    gen_random_uuid(), now() - interval '1 day',  now() - interval '1 day'),
                 ('nAME',    gen_random_uuid(), now() - interval '1 hour', NULL),
                 ('naME',    gen_random_uuid(), now(),                     NULL),
                 ('   ',     gen_random_uuid(), now() - interval '1 day',  now() - interval '1 day'),
                 ('Other',   gen_random_uuid(), now() - interval '1 day',  now() - interval '1 day'),
                 ('Pending', gen_random_uuid(), now() - interval '2 hours', NULL),
                 ('PENDING', gen_random_uuid(), now() - interval '1 hour', NULL)",
        )
        .await
        .unwrap();
    let before = stored(&client).await;
    for migration in migrations.iter().filter(|m| version(m) >= V7) {
        apply(&client, migration).await;
    }

    assert_eq!(
        stored(&client).await,
        before,
        "no stored skin lost or renamed"
    );
    let holders: Vec<(String, String)> = client
        .query(
            "SELECT folded, name FROM skins WHERE NOT shadowed ORDER BY folded",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let holders: Vec<(&str, &str)> = holders
        .iter()
        .map(|(f, n)| (f.as_str(), n.as_str()))
        .collect();
    assert_eq!(
        holders,
        [
            ("", "   "),
            ("name", " name"),
            ("other", "Other"),
            ("pending", "Pending")
        ],
        "the first stored (else the first claimed) of each group holds its folded name"
    );
    let names: Vec<String> = client
        .query("SELECT name FROM skins ORDER BY name COLLATE \"C\"", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(
        !names.contains(&"nAME".to_owned()),
        "a dead claim that folds like another name is dropped"
    );
    assert!(
        names.contains(&"naME".to_owned()),
        "a live upload's claim is kept"
    );
    assert!(!names.contains(&"PENDING".to_owned()), "{names:?}");

    // The registry on the migrated data: every spelling of a stored name is taken, for good.
    let plain = Tls::new(DbSslMode::Disable, None).unwrap();
    let pg = pool(parse_url(&url).unwrap(), &plain, 2, Duration::from_secs(5)).unwrap();
    let registry = PgSkinRegistry::new(pg, CLAIM_STALE_AFTER);
    for spelling in ["name", " NAME ", "Name", "nAmE", "other", "OTHER  "] {
        let name = SkinName::parse(spelling).unwrap();
        assert_eq!(
            registry.state(&name).await.unwrap(),
            NameState::Stored,
            "{spelling}"
        );
        assert!(
            matches!(registry.claim(&name).await.unwrap(), NameClaim::Stored),
            "{spelling}"
        );
    }
    let pending = SkinName::parse("pending").unwrap();
    assert!(
        matches!(
            registry.claim(&pending).await.unwrap(),
            NameClaim::Claimed(_)
        ),
        "a dead claim is taken over"
    );
    let fresh = SkinName::parse("Fresh").unwrap();
    let NameClaim::Claimed(claim) = registry.claim(&fresh).await.unwrap() else {
        panic!("a new name is free");
    };
    let shout = SkinName::parse("FRESH").unwrap();
    assert!(matches!(
        registry.claim(&shout).await.unwrap(),
        NameClaim::Held
    ));
    registry.confirm(&claim, None).await.unwrap();
    assert!(matches!(
        registry.claim(&shout).await.unwrap(),
        NameClaim::Stored
    ));

    let listed = registry.list("", 100).await.unwrap();
    let mut expected = before.clone();
    expected.push("Fresh".into());
    expected.sort();
    assert_eq!(
        listed, expected,
        "every stored skin listed, under its exact name"
    );
    assert_eq!(registry.list("Name", 2).await.unwrap(), ["Other", "name "]);
}
