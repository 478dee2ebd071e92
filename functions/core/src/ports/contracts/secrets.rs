//! The secret store's guarantee (`SecretStore`): the current value, and the one a rotation
//! replaced, as they are now.

use crate::ports::secrets::SecretStore;

/// `put` stores a value as the secret's new version (creating it the first time).
pub async fn suite<P>(store: &dyn SecretStore, put: P)
where
    P: AsyncFn(&str, &str),
{
    let id = format!("osurender-contract/{}", uuid::Uuid::new_v4().simple());
    assert!(
        store.versions(&id).await.is_err(),
        "an unknown secret is an error"
    );
    put(&id, "first").await;
    let versions = store.versions(&id).await.expect("read");
    assert_eq!(
        (versions.current.as_str(), versions.previous),
        ("first", None),
        "a secret never rotated has no previous value"
    );
    put(&id, "second").await;
    let versions = store.versions(&id).await.expect("read");
    assert_eq!(
        (versions.current.as_str(), versions.previous.as_deref()),
        ("second", Some("first")),
        "a rotation keeps the replaced value as the previous one"
    );
}
