//! The connection store's guarantees (`ConnectionStore`): a connection's subscriptions are
//! counted and capped exactly, each held once, listed per topic (bounded, unexpired), and all
//! forgotten with the connection. Connections and topics are fresh per run.

use chrono::{Duration, Utc};

use crate::domain::events::{ConnectionId, Topic};
use crate::domain::job::JobId;
use crate::ports::events::{ConnectionStore, Subscribed};

fn fresh_connection() -> ConnectionId {
    ConnectionId::parse(&format!("contract-{}", uuid::Uuid::new_v4().simple())).expect("an id")
}

fn fresh_topic() -> Topic {
    Topic::Job(JobId::new())
}

pub async fn suite<S: ConnectionStore + ?Sized>(store: &S) {
    let until = Utc::now() + Duration::hours(2);
    let (a, b) = (fresh_connection(), fresh_connection());
    store.open(&a, until).await.expect("opened");
    store
        .open(&a, until)
        .await
        .expect("opening again only extends");
    store.open(&b, until).await.expect("opened");
    let (one, two, three) = (fresh_topic(), fresh_topic(), fresh_topic());

    // Held once, capped exactly.
    for (topic, expected, why) in [
        (&one, Subscribed::Added, "a first subscription is added"),
        (
            &one,
            Subscribed::Already,
            "a subscription held is held once",
        ),
        (&two, Subscribed::Added, "a second is added"),
        (&three, Subscribed::Full, "a connection holds at most `max`"),
        (
            &two,
            Subscribed::Already,
            "one held is Already even when the connection is full",
        ),
    ] {
        let subscribed = store.subscribe(&a, topic, 2, until).await.unwrap();
        assert_eq!(subscribed, expected, "{why}");
    }
    assert!(
        store.subscribers(&three, 10).await.unwrap().is_empty(),
        "a refused subscription is not listed"
    );

    // Listed per topic, for every connection, topics apart.
    assert_eq!(
        store.subscribe(&b, &one, 2, until).await.unwrap(),
        Subscribed::Added
    );
    let mut listed = store.subscribers(&one, 10).await.unwrap();
    listed.sort();
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(listed, both, "a topic lists each of its subscribers");
    assert_eq!(store.subscribers(&two, 10).await.unwrap(), vec![a.clone()]);
    assert_eq!(
        store.subscribers(&one, 1).await.unwrap().len(),
        1,
        "a listing is bounded by its limit"
    );

    // Unsubscribing frees a place and says whether one was held.
    assert!(store.unsubscribe(&a, &two).await.unwrap(), "held");
    assert!(
        !store.unsubscribe(&a, &two).await.unwrap(),
        "no longer held"
    );
    assert!(!store.unsubscribe(&b, &three).await.unwrap(), "never held");
    assert!(store.subscribers(&two, 10).await.unwrap().is_empty());
    assert_eq!(
        store.subscribe(&a, &three, 2, until).await.unwrap(),
        Subscribed::Added,
        "an unsubscribe frees its place"
    );

    // An expired subscription is not listed (TTL removes it later).
    let (c, lapsed) = (fresh_connection(), fresh_topic());
    store.open(&c, until).await.expect("opened");
    let past = Utc::now() - Duration::seconds(5);
    assert_eq!(
        store.subscribe(&c, &lapsed, 2, past).await.unwrap(),
        Subscribed::Added
    );
    assert!(
        store.subscribers(&lapsed, 10).await.unwrap().is_empty(),
        "an expired subscription is not listed"
    );

    // Closing forgets the connection and every subscription it held; closing again is fine.
    store.close(&a).await.expect("closed");
    store
        .close(&a)
        .await
        .expect("closing an unknown connection is no error");
    assert_eq!(store.subscribers(&one, 10).await.unwrap(), vec![b.clone()]);
    assert!(store.subscribers(&three, 10).await.unwrap().is_empty());
    store.open(&a, until).await.expect("reopened");
    assert_eq!(
        store.subscribe(&a, &two, 2, until).await.unwrap(),
        Subscribed::Added,
        "a closed connection's count is gone with it"
    );
    assert_eq!(
        store.subscribe(&a, &one, 2, until).await.unwrap(),
        Subscribed::Added
    );

    // Many subscriptions: all listed, all closed (pages and batches, for the real store).
    let d = fresh_connection();
    store.open(&d, until).await.expect("opened");
    let many: Vec<Topic> = (0..60).map(|_| fresh_topic()).collect();
    for topic in &many {
        assert_eq!(
            store.subscribe(&d, topic, 100, until).await.unwrap(),
            Subscribed::Added
        );
    }
    store.close(&d).await.expect("closed");
    for topic in &many {
        assert!(store.subscribers(topic, 10).await.unwrap().is_empty());
    }
}
