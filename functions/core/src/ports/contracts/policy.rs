//! The policy store's guarantees (`PolicyStore`). The pause is global: the suite leaves the
//! intake as it found it only if it was not paused; give it a store of its own.

use chrono::{Duration, Utc};

use crate::domain::key::KeyId;
use crate::domain::policy::{BanTarget, PlayerName, Reason};
use crate::ports::policy::{NewBan, PolicyStore, MAX_BANS};

fn ban(target: BanTarget, until: Option<chrono::DateTime<Utc>>) -> NewBan {
    NewBan {
        target,
        reason: Some(Reason::parse("contract").expect("a reason")),
        until,
    }
}

pub async fn suite(store: &dyn PolicyStore) {
    let read = async || store.read(MAX_BANS).await.expect("answered");

    store.resume().await.expect("answered");
    assert_eq!(read().await.pause, None, "not paused after resume");
    let reason = Reason::parse("maintenance").expect("a reason");
    let paused = store.pause(true, Some(&reason)).await.expect("paused");
    assert!(paused.anonymous_only, "paused as asked");
    assert_eq!(
        read().await.pause,
        Some(paused.clone()),
        "the pause is read"
    );
    let again = store.pause(false, None).await.expect("paused again");
    assert!(
        !again.anonymous_only && again.reason.is_none(),
        "pausing again replaces the scope and the reason"
    );
    assert!(again.since >= paused.since, "and its since");
    assert_eq!(
        store.resume().await.expect("answered"),
        Some(again),
        "resume answers the pause it lifted"
    );
    assert_eq!(store.resume().await.expect("answered"), None, "once");
    assert_eq!(read().await.pause, None, "lifted");

    let key = KeyId::new();
    let player = PlayerName::parse(&format!(
        "Contract-{}",
        &uuid::Uuid::new_v4().to_string()[..8]
    ))
    .expect("a name");
    let range: BanTarget = BanTarget::Address("2001:db8:77::/48".parse().expect("a range"));
    let soon = Utc::now() + Duration::hours(1);
    let forever = store
        .add_ban(&ban(BanTarget::Key(key), None))
        .await
        .expect("added");
    let temporary = store
        .add_ban(&ban(BanTarget::Player(player.clone()), Some(soon)))
        .await
        .expect("added");
    let by_address = store
        .add_ban(&ban(range.clone(), None))
        .await
        .expect("added");
    let ended = store
        .add_ban(&ban(
            BanTarget::Key(KeyId::new()),
            Some(Utc::now() - Duration::seconds(1)),
        ))
        .await
        .expect("added, though it has ended");
    assert_eq!(forever.target, BanTarget::Key(key), "stored as given");
    assert_eq!(forever.until, None, "until removed");
    assert_eq!(
        temporary.target,
        BanTarget::Player(player),
        "the name as typed"
    );
    assert_eq!(
        temporary.until.map(|t| t.timestamp_micros()),
        Some(soon.timestamp_micros()),
        "its end as given"
    );
    assert_ne!(forever.id, temporary.id, "each ban its own id");

    let policy = read().await;
    let ids: Vec<i64> = policy.bans.iter().map(|ban| ban.id).collect();
    for added in [&forever, &temporary, &by_address] {
        assert!(ids.contains(&added.id), "a ban in force is read");
        let found = policy.bans.iter().find(|ban| ban.id == added.id);
        assert_eq!(found, Some(added), "read as added");
    }
    assert!(!ids.contains(&ended.id), "an ended ban is not read");
    let at = |id| ids.iter().position(|x| *x == id).expect("read");
    assert!(
        at(forever.id) < at(temporary.id),
        "the longest lasting first"
    );
    assert!(
        store.read(1).await.expect("answered").bans.len() <= 1,
        "at most max_bans"
    );

    assert_eq!(
        store.remove_ban(temporary.id).await.expect("answered"),
        Some(temporary.clone()),
        "remove answers the ban removed"
    );
    assert_eq!(
        store.remove_ban(temporary.id).await.expect("answered"),
        None,
        "once"
    );
    let ids: Vec<i64> = read().await.bans.iter().map(|ban| ban.id).collect();
    assert!(!ids.contains(&temporary.id), "a removed ban is not read");
    assert!(ids.contains(&forever.id), "the others still are");
    for left in [forever.id, by_address.id, ended.id] {
        store.remove_ban(left).await.expect("answered");
    }
}
