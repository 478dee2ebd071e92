//! The API-key store's guarantees (`KeyStore`).

use crate::domain::entitlement::{DeniedOptions, Entitlements};
use crate::domain::key::{ApiKey, KeyId, KeyKind, KeyLimits, KeyName, LimitsChange, SigningSecret};
use crate::domain::Resolution;
use crate::ports::keys::{KeyStore, LimitsUpdate, NewKey, Revocation};

fn new_key(kind: KeyKind) -> NewKey {
    let key = ApiKey::generate(kind).expect("randomness");
    NewKey {
        id: KeyId::new(),
        name: KeyName::parse(&format!("contract-{}", uuid::Uuid::new_v4())).expect("a name"),
        hash: key.hash(),
        kind,
        limits: KeyLimits::default(),
        signing_secret: SigningSecret::generate().expect("randomness"),
    }
}

pub async fn suite(store: &dyn KeyStore) {
    let found_by_hash = async |hash| {
        let found = store.find_by_hash(hash).await.expect("answered");
        found.expect("a stored key, revoked or not, is found by its hash")
    };
    let first = new_key(KeyKind::Live);
    let created = store.create(&first).await.expect("stored");
    let found = found_by_hash(&first.hash).await;
    assert_eq!(
        (found.summary.id, &found.summary.name, found.summary.kind),
        (first.id, &first.name, first.kind),
        "found as stored"
    );
    assert_eq!(found.summary.limits, first.limits, "its limits as stored");
    assert_eq!(
        found.summary.created_at, created,
        "its creation time as create said"
    );
    assert_eq!(
        found.signing_secret, first.signing_secret,
        "its signing secret"
    );
    assert!(!found.is_revoked(), "a new key counts");
    let unknown = new_key(KeyKind::Live);
    assert!(
        store
            .find_by_hash(&unknown.hash)
            .await
            .expect("answered")
            .is_none(),
        "no key for a hash never stored"
    );
    let live = store.live_hashes(100_000).await.expect("answered");
    assert!(live.contains(&first.hash), "a live key's hash is listed");

    let mut second = new_key(KeyKind::Sandbox);
    second.limits = KeyLimits::default()
        .with_entitlements(Entitlements {
            max_resolution: Some(Resolution::Hd720),
            denied: DeniedOptions::parse("motion_blur,video,skin").expect("a deny list"),
        })
        .with_max_replay_length(Some(300))
        .expect("limits")
        .with_weight(250)
        .expect("a weight");
    store.create(&second).await.expect("stored");
    assert_eq!(
        found_by_hash(&second.hash).await.summary.limits,
        second.limits,
        "its entitlements, replay length and weight as stored"
    );
    let listed = store.list(1_000).await.expect("answered");
    let at = |id| listed.iter().position(|key| key.id == id);
    match (at(second.id), at(first.id)) {
        (Some(newer), Some(older)) => assert!(newer < older, "the newest key first"),
        _ => panic!("both keys are listed"),
    }
    assert_eq!(
        store.list(1).await.expect("answered").len(),
        1,
        "at most `limit`"
    );

    let change = |weight, max_active| LimitsChange::new(weight, max_active).expect("a change");
    let heavier = first.limits.with_weight(40).expect("a weight");
    match store
        .change_limits(first.id, change(Some(40), None))
        .await
        .expect("answered")
    {
        LimitsUpdate::Changed(key) => {
            assert_eq!(
                (key.id, key.revoked_at),
                (first.id, None),
                "the key changed"
            );
            assert_eq!(key.limits, heavier, "only its weight changed");
        }
        other => panic!("changing a live key's weight changes it: {other:?}"),
    }
    assert_eq!(
        found_by_hash(&first.hash).await.summary.limits,
        heavier,
        "the new weight reads back"
    );
    let both = KeyLimits {
        max_active: 3,
        ..first.limits.with_weight(1_000).expect("a weight")
    };
    match store
        .change_limits(first.id, change(Some(1_000), Some(3)))
        .await
        .expect("answered")
    {
        LimitsUpdate::Changed(key) => assert_eq!(key.limits, both, "both changed"),
        other => panic!("changing both changes both: {other:?}"),
    }
    let fewer = KeyLimits {
        max_active: 7,
        ..both
    };
    match store
        .change_limits(first.id, change(None, Some(7)))
        .await
        .expect("answered")
    {
        LimitsUpdate::Changed(key) => assert_eq!(key.limits, fewer, "only max_active changed"),
        other => panic!("changing max_active changes it: {other:?}"),
    }
    assert_eq!(
        found_by_hash(&first.hash).await.summary.limits,
        fewer,
        "the new max_active reads back, the weight kept"
    );
    assert_eq!(
        found_by_hash(&second.hash).await.summary.limits,
        second.limits,
        "another key's limits are untouched"
    );
    assert_eq!(
        store
            .change_limits(KeyId::new(), change(Some(2), None))
            .await
            .expect("answered"),
        LimitsUpdate::NoSuchKey,
        "changing an id no key has"
    );

    let revoked_at = match store.revoke(first.id).await.expect("answered") {
        Revocation::Revoked(at) => at,
        other => panic!("revoking a live key revokes it: {other:?}"),
    };
    assert_eq!(
        store.revoke(first.id).await.expect("answered"),
        Revocation::AlreadyRevoked(revoked_at),
        "revoking again says when it was revoked"
    );
    assert_eq!(
        store.revoke(KeyId::new()).await.expect("answered"),
        Revocation::NoSuchKey,
        "revoking an id no key has"
    );
    assert_eq!(
        store
            .change_limits(first.id, change(Some(2), Some(2)))
            .await
            .expect("answered"),
        LimitsUpdate::Revoked(revoked_at),
        "a revoked key's limits are not changed, and it says when it was revoked"
    );
    let found = found_by_hash(&first.hash).await;
    assert_eq!(
        found.summary.revoked_at,
        Some(revoked_at),
        "found revoked, with when"
    );
    assert_eq!(found.summary.limits, fewer, "its limits as they were");
    let live = store.live_hashes(100_000).await.expect("answered");
    assert!(
        !live.contains(&first.hash),
        "a revoked key's hash is not listed"
    );
    assert!(live.contains(&second.hash), "the other key's still is");
}
