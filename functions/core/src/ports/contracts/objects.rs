//! The object stores' guarantees: replays (`ReplayStore`) and skins (`SkinStore`) — writes that
//! never overwrite another's skin, reads and copies pinned to the version that was checked.

use bytes::Bytes;
use futures_util::TryStreamExt;

use crate::domain::render::SkinName;
use crate::ports::replays::ReplayStore;
use crate::ports::skins::{self, Copied, ObjectVersion, SkinStore, INCOMING_PREFIX};

/// `exists` says whether the bucket holds a key (a look past the port).
pub async fn replays<E>(store: &dyn ReplayStore, exists: E)
where
    E: AsyncFn(&str) -> bool,
{
    let key = format!("replays/contract-{}.osr", uuid::Uuid::new_v4());
    store
        .put(&key, Bytes::from_static(b"first"))
        .await
        .expect("stored");
    assert!(exists(&key).await, "a put replay is stored");
    store
        .put(&key, Bytes::from_static(b"again"))
        .await
        .expect("a replay's key is its job's: a retry may write it again");
    store.delete(&key).await.expect("deleted");
    assert!(!exists(&key).await, "a deleted replay is gone");
    store
        .delete(&key)
        .await
        .expect("deleting what is gone succeeds (a cleanup may run twice)");
}

/// `place` puts bytes at a key, as a client's presigned upload does.
pub async fn skins<P>(store: &dyn SkinStore, place: P)
where
    P: AsyncFn(&str, Bytes),
{
    let fresh_name = || {
        SkinName::parse(&format!(
            "contract-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        ))
        .expect("a skin name")
    };
    let (ours, theirs) = (
        Bytes::from_static(b"our skin"),
        Bytes::from_static(b"theirs"),
    );
    let name = fresh_name();
    assert!(
        !store.exists(&name).await.expect("answered"),
        "a new name has no object"
    );
    assert!(
        store.put_new(&name, ours.clone()).await.expect("answered"),
        "a free name is written"
    );
    assert!(
        store.exists(&name).await.expect("answered"),
        "a written skin exists"
    );
    assert!(
        store.put_new(&name, ours.clone()).await.expect("answered"),
        "the same content found there counts as written (a lost answer's retry)"
    );
    assert!(
        !store
            .put_new(&name, theirs.clone())
            .await
            .expect("answered"),
        "another content is never written over a skin"
    );
    assert!(
        store
            .holds(&name, &skins::content_id(&ours))
            .await
            .expect("answered")
            && !store
                .holds(&name, &skins::content_id(&theirs))
                .await
                .expect("answered"),
        "the skin holds the first content only"
    );

    let upload = format!("{INCOMING_PREFIX}contract-{}", uuid::Uuid::new_v4());
    let bytes = Bytes::from_static(b"0123456789");
    place(&upload, bytes.clone()).await;
    assert!(
        store
            .list_incoming(100_000)
            .await
            .expect("answered")
            .contains(&upload),
        "an upload is listed under incoming/"
    );
    let version = store
        .head(&upload)
        .await
        .expect("answered")
        .expect("an upload has a version");
    assert_eq!(version.size, 10, "the version has the upload's size");
    let read: Vec<Bytes> = store
        .read(&upload, &version, 2..5)
        .await
        .expect("read")
        .try_collect()
        .await
        .expect("streamed");
    assert_eq!(read.concat(), b"234", "a range read returns those bytes");
    let stale = ObjectVersion {
        size: version.size,
        etag: "\"00000000000000000000000000000000\"".into(),
    };
    assert!(
        store.read(&upload, &stale, 0..10).await.is_err(),
        "a read of another version fails"
    );
    let copy = fresh_name();
    assert!(
        store.copy_new(&upload, &stale, &copy).await.is_err(),
        "a copy of another version fails"
    );
    let copy_to = async |name: &SkinName| {
        let copied = store.copy_new(&upload, &version, name).await;
        copied.expect("answered")
    };
    assert_eq!(
        copy_to(&copy).await,
        Copied::Stored,
        "an upload is copied to a free name"
    );
    let upload_id = skins::incoming_content_id(&version);
    assert!(
        store.holds(&copy, &upload_id).await.expect("answered"),
        "the copy names the upload it came from"
    );
    assert_eq!(
        copy_to(&copy).await,
        Copied::Stored,
        "the same upload copied again counts as stored"
    );
    assert_eq!(
        copy_to(&name).await,
        Copied::Exists,
        "an upload is never copied over another skin"
    );
    store.delete(&upload).await.expect("deleted");
    assert_eq!(
        store.head(&upload).await.expect("answered"),
        None,
        "a deleted upload is gone"
    );
}
