//! The skin-name registry's guarantees (`SkinRegistry`): names, and presigned uploads' ingests.

use crate::domain::render::SkinName;
use crate::ports::skins::{IngestClaim, IngestTicket, NameClaim, NameState, SkinRegistry};

fn fresh_name(prefix: &str) -> String {
    let n = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix} {}", &n[..12])
}

fn name(text: &str) -> SkinName {
    SkinName::parse(text).expect("a skin name")
}

pub async fn suite(registry: &dyn SkinRegistry) {
    names(registry).await;
    ingests(registry).await;
}

async fn names(registry: &dyn SkinRegistry) {
    let spelled = fresh_name("Contract");
    let (skin, folded) = (name(&spelled), name(&spelled.to_uppercase()));
    assert_eq!(
        registry.state(&skin).await.expect("answered"),
        NameState::Free,
        "a new name is free"
    );
    let NameClaim::Claimed(first) = registry.claim(&skin).await.expect("answered") else {
        panic!("a free name is claimed");
    };
    assert_eq!(
        registry.state(&folded).await.expect("answered"),
        NameState::Held,
        "held, in any case"
    );
    assert!(
        matches!(
            registry.claim(&folded).await.expect("answered"),
            NameClaim::Held
        ),
        "a held name, in another case, is not claimed again"
    );
    registry.release(&first).await.expect("answered");
    assert_eq!(
        registry.state(&skin).await.expect("answered"),
        NameState::Free,
        "a released name is free"
    );
    let NameClaim::Claimed(second) = registry.claim(&skin).await.expect("answered") else {
        panic!("a released name is claimed again");
    };
    registry.release(&first).await.expect("answered");
    assert_eq!(
        registry.state(&skin).await.expect("answered"),
        NameState::Held,
        "an old claim's release leaves the new claim alone"
    );
    registry.confirm(&second, None).await.expect("answered");
    assert_eq!(
        registry.state(&folded).await.expect("answered"),
        NameState::Stored,
        "stored, in any case"
    );
    assert!(
        matches!(
            registry.claim(&folded).await.expect("answered"),
            NameClaim::Stored
        ),
        "a stored name is not claimed"
    );
    registry.release(&second).await.expect("answered");
    assert_eq!(
        registry.state(&skin).await.expect("answered"),
        NameState::Stored,
        "a confirmed name stays"
    );

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
    let key = format!("incoming/{}/contract.osk", uuid::Uuid::new_v4().simple());
    let first = IngestTicket::new(&key);
    assert_eq!(
        registry
            .claim_ingest(&first, "etag-1")
            .await
            .expect("answered"),
        IngestClaim::Ours,
        "a new upload's ingest is claimed"
    );
    let second = IngestTicket::new(&key);
    assert_eq!(
        registry
            .claim_ingest(&second, "etag-1")
            .await
            .expect("answered"),
        IngestClaim::Running,
        "the same version, claimed and live, is running elsewhere"
    );
    assert_eq!(
        registry
            .claim_ingest(&second, "etag-2")
            .await
            .expect("answered"),
        IngestClaim::Replaced,
        "another version of the same key was posted again"
    );
    registry.release_ingest(&first).await.expect("answered");
    assert_eq!(
        registry
            .claim_ingest(&second, "etag-1")
            .await
            .expect("answered"),
        IngestClaim::Ours,
        "a released ingest is claimed again at once"
    );
    registry.finish_ingest(&second).await.expect("answered");
    let third = IngestTicket::new(&key);
    assert_eq!(
        registry
            .claim_ingest(&third, "etag-1")
            .await
            .expect("answered"),
        IngestClaim::Done,
        "a finished ingest is done for good"
    );
}
