//! The skin-name registry's guarantees (`SkinRegistry`): names, the operator's reservations and
//! removals, and presigned uploads' ingests.

use std::time::Duration;

use crate::domain::render::SkinName;
use crate::ports::skins::{
    Freeing, IngestClaim, IngestTicket, NameClaim, NameState, Removal, SkinRegistry,
};

fn fresh_name(prefix: &str) -> String {
    let n = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix} {}", &n[..12])
}

fn name(text: &str) -> SkinName {
    SkinName::parse(text).expect("a skin name")
}

pub async fn suite(registry: &dyn SkinRegistry) {
    names(registry).await;
    reservations(registry).await;
    removals(registry).await;
    freeing(registry).await;
    ingests(registry).await;
}

/// `name` stored, as an upload leaves it.
async fn stored(registry: &dyn SkinRegistry, skin: &SkinName) {
    let NameClaim::Claimed(claim) = registry.claim(skin).await.expect("answered") else {
        panic!("a free name is claimed");
    };
    registry.confirm(&claim, None).await.expect("answered");
}

async fn listed(registry: &dyn SkinRegistry, spelled: &str) -> bool {
    let before = &spelled[..spelled.len() - 1];
    let page = registry.list(before, 1_000).await.expect("answered");
    page.iter().any(|name| name == spelled)
}

async fn kept(registry: &dyn SkinRegistry, skin: &SkinName, why: &str) {
    let claim = registry.claim(skin).await.expect("answered");
    assert!(matches!(claim, NameClaim::Kept), "{why}: {claim:?}");
}

async fn reservations(registry: &dyn SkinRegistry) {
    let state = async |skin: &SkinName| registry.state(skin).await.expect("answered");
    let spelled = fresh_name("Reserved");
    let (skin, folded) = (name(&spelled), name(&spelled.to_uppercase()));
    assert!(registry.reserve(&skin).await.expect("answered"), "newly");
    assert!(
        !registry.reserve(&folded).await.expect("answered"),
        "again, in any case"
    );
    assert_eq!(state(&folded).await, NameState::Reserved { stored: false });
    assert!(!state(&skin).await.renderable());
    kept(registry, &folded, "a reserved name is not claimed").await;
    assert!(registry.unreserve(&folded).await.expect("answered"));
    assert!(
        !registry.unreserve(&skin).await.expect("answered"),
        "not twice"
    );
    assert_eq!(state(&skin).await, NameState::Free, "unreserved is free");

    stored(registry, &skin).await;
    assert!(registry.reserve(&folded).await.expect("answered"));
    let reserved = state(&skin).await;
    assert_eq!(reserved, NameState::Reserved { stored: true });
    assert!(reserved.renderable() && reserved.kept_by_operator());
    assert!(
        listed(registry, &spelled).await,
        "a reserved skin stays listed"
    );
    kept(registry, &skin, "nor is a reserved stored one").await;
    assert!(registry.unreserve(&skin).await.expect("answered"));
    assert_eq!(state(&skin).await, NameState::Stored);

    // A reservation made while an upload holds its claim lets that upload finish.
    let racing = name(&fresh_name("Racing"));
    let NameClaim::Claimed(claim) = registry.claim(&racing).await.expect("answered") else {
        panic!("a free name is claimed");
    };
    registry.reserve(&racing).await.expect("answered");
    assert_eq!(state(&racing).await, NameState::Reserved { stored: false });
    registry.confirm(&claim, None).await.expect("answered");
    assert_eq!(state(&racing).await, NameState::Reserved { stored: true });
}

async fn removals(registry: &dyn SkinRegistry) {
    let state = async |skin: &SkinName| registry.state(skin).await.expect("answered");
    let spelled = fresh_name("Removed");
    let (skin, folded) = (name(&spelled), name(&spelled.to_lowercase()));
    assert_eq!(
        registry.remove(&skin).await.expect("answered"),
        Removal::NotStored
    );
    let NameClaim::Claimed(held) = registry.claim(&skin).await.expect("answered") else {
        panic!("a free name is claimed");
    };
    let removal = registry.remove(&skin).await.expect("answered");
    assert_eq!(
        removal,
        Removal::NotStored,
        "an upload running is no skin yet"
    );
    registry.confirm(&held, None).await.expect("answered");

    let removal = registry.remove(&folded).await.expect("answered");
    assert_eq!(
        removal,
        Removal::Removed(vec![spelled.clone()]),
        "in any case"
    );
    let again = registry.remove(&skin).await.expect("answered");
    assert_eq!(again, Removal::AlreadyRemoved);
    assert_eq!(state(&folded).await, NameState::Removed);
    assert!(!state(&skin).await.renderable());
    assert!(
        !listed(registry, &spelled).await,
        "a removed skin is not listed"
    );
    kept(registry, &folded, "a removed name is not free again").await;
    registry.release(&held).await.expect("answered");
    assert_eq!(state(&skin).await, NameState::Removed, "nor released");
    registry.reserve(&skin).await.expect("answered");
    registry.unreserve(&skin).await.expect("answered");
    assert_eq!(state(&skin).await, NameState::Removed, "nor unreserved");
}

/// `skins free`'s steps: only a removed name, only once it has settled, and then forgotten, so
/// it may be claimed again (unless it is reserved too). The jobs that keep a name in use are
/// the API tests' (tests/api/skins.rs): they need the jobs table.
async fn freeing(registry: &dyn SkinRegistry) {
    let hour = Duration::from_secs(3600);
    let freeable =
        async |skin: &SkinName, settle| registry.freeable(skin, settle).await.expect("answered");
    let spelled = fresh_name("Freed");
    let (skin, folded) = (name(&spelled), name(&spelled.to_uppercase()));
    assert_eq!(
        freeable(&skin, Duration::ZERO).await,
        Freeing::NotRemoved,
        "never stored"
    );
    stored(registry, &skin).await;
    assert_eq!(
        freeable(&skin, Duration::ZERO).await,
        Freeing::NotRemoved,
        "stored"
    );
    registry.remove(&skin).await.expect("answered");
    match freeable(&folded, hour).await {
        Freeing::RemovedRecently(left) => {
            assert!(
                left > hour - Duration::from_secs(60) && left <= hour,
                "{left:?}"
            )
        }
        other => panic!("a name removed just now settles for the hour first: {other:?}"),
    }
    assert_eq!(
        freeable(&folded, Duration::ZERO).await,
        Freeing::Ready(vec![spelled.clone()]),
        "its removed skins as registered, in any case"
    );
    assert_eq!(registry.forget_removed(&folded).await.expect("answered"), 1);
    assert_eq!(
        registry.state(&skin).await.expect("answered"),
        NameState::Free
    );
    assert_eq!(
        freeable(&skin, Duration::ZERO).await,
        Freeing::NotRemoved,
        "freed"
    );
    assert_eq!(registry.forget_removed(&skin).await.expect("answered"), 0);
    stored(registry, &folded).await;
    assert_eq!(
        registry.state(&skin).await.expect("answered"),
        NameState::Stored,
        "a freed name is uploaded again"
    );

    // A reservation outlasts the freeing: the name stays kept.
    let reserved = name(&fresh_name("Freed reserved"));
    stored(registry, &reserved).await;
    registry.reserve(&reserved).await.expect("answered");
    registry.remove(&reserved).await.expect("answered");
    assert!(registry.forget_removed(&reserved).await.expect("answered") == 1);
    assert_eq!(
        registry.state(&reserved).await.expect("answered"),
        NameState::Reserved { stored: false }
    );
    kept(registry, &reserved, "a reserved name freed stays reserved").await;
}

async fn names(registry: &dyn SkinRegistry) {
    let state_is = async |skin: &SkinName, expected: NameState, why: &str| {
        let state = registry.state(skin).await.expect("answered");
        assert_eq!(state, expected, "{why}");
    };
    let spelled = fresh_name("Contract");
    let (skin, folded) = (name(&spelled), name(&spelled.to_uppercase()));
    state_is(&skin, NameState::Free, "a new name is free").await;
    let NameClaim::Claimed(first) = registry.claim(&skin).await.expect("answered") else {
        panic!("a free name is claimed");
    };
    state_is(&folded, NameState::Held, "held, in any case").await;
    let refused = async |expected: NameState| {
        let claim = registry.claim(&folded).await.expect("answered");
        match (claim, expected) {
            (NameClaim::Held, NameState::Held) | (NameClaim::Stored, NameState::Stored) => {}
            (claim, _) => panic!("a {expected:?} name is not claimed again, got {claim:?}"),
        }
    };
    refused(NameState::Held).await;
    registry.release(&first).await.expect("answered");
    state_is(&skin, NameState::Free, "a released name is free").await;
    let NameClaim::Claimed(second) = registry.claim(&skin).await.expect("answered") else {
        panic!("a released name is claimed again");
    };
    registry.release(&first).await.expect("answered");
    state_is(
        &skin,
        NameState::Held,
        "an old claim's release leaves the new claim alone",
    )
    .await;
    registry.confirm(&second, None).await.expect("answered");
    state_is(&folded, NameState::Stored, "stored, in any case").await;
    refused(NameState::Stored).await;
    registry.release(&second).await.expect("answered");
    state_is(&skin, NameState::Stored, "a confirmed name stays").await;

    let before = spelled.clone() + " ";
    let listed = registry
        .list(&spelled[..spelled.len() - 1], 1_000)
        .await
        .expect("answered");
    assert!(
        listed.contains(&spelled),
        "a stored name is listed after a name before it: {listed:?}"
    );
    assert!(
        listed.windows(2).all(|pair| pair[0] < pair[1]),
        "in byte order: {listed:?}"
    );
    let after = registry.list(&spelled, 1_000).await.expect("answered");
    assert!(!after.contains(&spelled), "`after` is exclusive");
    assert!(
        after
            .iter()
            .all(|listed| listed.as_str() > spelled.as_str()),
        "only names after it"
    );
    assert!(
        registry.list(&before, 1).await.expect("answered").len() <= 1,
        "at most `limit`"
    );
}

async fn ingests(registry: &dyn SkinRegistry) {
    let claims = async |ticket: &IngestTicket, etag: &str, expected: IngestClaim, why: &str| {
        let claimed = registry.claim_ingest(ticket, etag).await.expect("answered");
        assert_eq!(claimed, expected, "{why}");
    };
    let key = format!("incoming/{}/contract.osk", uuid::Uuid::new_v4().simple());
    let (first, second) = (IngestTicket::new(&key), IngestTicket::new(&key));
    let steps = [
        (
            &first,
            "etag-1",
            IngestClaim::Ours,
            "a new upload's ingest is claimed",
        ),
        (
            &second,
            "etag-1",
            IngestClaim::Running,
            "the same version, claimed and live, is running elsewhere",
        ),
        (
            &second,
            "etag-2",
            IngestClaim::Replaced,
            "another version of the same key was posted again",
        ),
    ];
    for (ticket, etag, expected, why) in steps {
        claims(ticket, etag, expected, why).await;
    }
    registry.release_ingest(&first).await.expect("answered");
    claims(
        &second,
        "etag-1",
        IngestClaim::Ours,
        "a released ingest is claimed again at once",
    )
    .await;
    registry.finish_ingest(&second).await.expect("answered");
    let third = IngestTicket::new(&key);
    claims(
        &third,
        "etag-1",
        IngestClaim::Done,
        "a finished ingest is done for good",
    )
    .await;
}
