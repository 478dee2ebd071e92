//! The lookup's cache against the in-memory key store, on a paused clock.

use super::*;
use chrono::{DateTime, Utc};

use crate::adapters::memory::MemoryKeys;
use crate::domain::key::{KeyId, KeyKind, KeyLimits, KeyName, LimitsChange};
use crate::ports::keys::{KeySummary, LimitsUpdate, NewKey, Revocation};
use crate::usecases::keys::create;

const LOOKUP_TTL: Duration = Duration::from_secs(30);

/// `authenticate` with no gate before the read.
async fn authenticate(lookup: &KeyLookup, authorization: &str) -> Result<KeyRecord, KeyRefusal> {
    lookup.authenticate(authorization, async { Ok(()) }).await
}

/// A new live key named `name` in `store`.
async fn live_key(store: &MemoryKeys, name: &str) -> ApiKey {
    let name = KeyName::parse(name).unwrap();
    let created = create(store, name, KeyKind::Live, KeyLimits::default()).await;
    created.unwrap().key
}

async fn setup() -> (Arc<MemoryKeys>, KeyLookup, ApiKey) {
    let store = Arc::new(MemoryKeys::default());
    let key = live_key(&store, "ci").await;
    let lookup = KeyLookup::new(store.clone(), LOOKUP_TTL);
    (store, lookup, key)
}

fn bearer(key: &ApiKey) -> String {
    format!("Bearer {}", key.expose())
}

#[tokio::test(start_paused = true)]
async fn a_revocation_is_seen_once_the_cached_answer_expires() {
    let (store, lookup, key) = setup().await;
    let record = authenticate(&lookup, &bearer(&key)).await.unwrap();
    assert_eq!(record.summary.name.as_str(), "ci");
    assert_eq!(store.lookups(), 1);

    store.revoke(record.summary.id).await.unwrap();
    tokio::time::advance(LOOKUP_TTL - Duration::from_millis(1)).await;
    assert!(
        authenticate(&lookup, &bearer(&key)).await.is_ok(),
        "cached within the TTL"
    );
    assert_eq!(store.lookups(), 1, "answered from the cache");

    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(matches!(
        authenticate(&lookup, &bearer(&key)).await,
        Err(KeyRefusal::Revoked)
    ));
    assert_eq!(store.lookups(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_limits_change_is_seen_once_the_cached_answer_expires() {
    let (store, lookup, key) = setup().await;
    let record = authenticate(&lookup, &bearer(&key)).await.unwrap();
    assert_eq!(record.summary.limits.weight.get(), 1);

    let change = LimitsChange::new(Some(50), Some(4)).unwrap();
    let changed = store.change_limits(record.summary.id, change).await;
    assert!(
        matches!(changed, Ok(LimitsUpdate::Changed(_))),
        "{changed:?}"
    );
    tokio::time::advance(LOOKUP_TTL - Duration::from_millis(1)).await;
    let cached = authenticate(&lookup, &bearer(&key)).await.unwrap();
    assert_eq!(
        cached.summary.limits, record.summary.limits,
        "cached within the TTL"
    );

    tokio::time::advance(Duration::from_millis(1)).await;
    let limits = authenticate(&lookup, &bearer(&key))
        .await
        .unwrap()
        .summary
        .limits;
    assert_eq!((limits.weight.get(), limits.max_active), (50, 4));
    assert_eq!(store.lookups(), 2);
}

#[tokio::test(start_paused = true)]
async fn unknown_keys_are_remembered_for_the_ttl_and_malformed_ones_never_read() {
    let (store, lookup, _) = setup().await;
    let stranger = ApiKey::generate(KeyKind::Sandbox).unwrap();
    for _ in 0..3 {
        assert!(matches!(
            authenticate(&lookup, &bearer(&stranger)).await,
            Err(KeyRefusal::Unknown)
        ));
    }
    assert_eq!(store.lookups(), 1);
    tokio::time::advance(LOOKUP_TTL).await;
    assert!(authenticate(&lookup, &bearer(&stranger)).await.is_err());
    assert_eq!(store.lookups(), 2);

    for malformed in ["", "Bearer", "Bearer osr_live_short", "Basic abc"] {
        assert!(matches!(
            authenticate(&lookup, malformed).await,
            Err(KeyRefusal::Malformed(_))
        ));
    }
    assert_eq!(store.lookups(), 2, "malformed keys cost no read");
}

/// A gate that always refuses, as an address's spent `RATE_LIMIT_KEY_LOOKUP` does.
async fn spent() -> Result<(), Rejection> {
    Err(Rejection::LimiterUnavailable)
}

#[tokio::test(start_paused = true)]
async fn an_open_gate_never_loads_the_live_list() {
    let (store, lookup, key) = setup().await;
    let stranger = ApiKey::generate(KeyKind::Live).unwrap();
    assert!(authenticate(&lookup, &bearer(&key)).await.is_ok());
    assert!(matches!(
        authenticate(&lookup, &bearer(&stranger)).await,
        Err(KeyRefusal::Unknown)
    ));
    tokio::time::advance(LOOKUP_TTL).await;
    assert!(authenticate(&lookup, &bearer(&key)).await.is_ok());
    assert_eq!(store.lookups(), 3, "one point read per miss");
    assert_eq!(store.live_lists(), 0, "and no listing of the table");
}

#[tokio::test(start_paused = true)]
async fn a_refused_gate_holds_back_an_unknown_key_and_not_a_live_one() {
    let (store, lookup, key) = setup().await;
    let stranger = ApiKey::generate(KeyKind::Live).unwrap();
    let held = lookup.authenticate(&bearer(&stranger), spent()).await;
    assert!(matches!(
        held,
        Err(KeyRefusal::Held(Rejection::LimiterUnavailable))
    ));
    assert_eq!(store.lookups(), 0, "held back before the read");
    assert_eq!(store.live_lists(), 1, "the refusal consulted the list");

    let live = lookup.authenticate(&bearer(&key), spent()).await;
    assert!(live.is_ok(), "a live key is read past a spent gate");
    assert_eq!(store.lookups(), 1);
    assert_eq!(store.live_lists(), 1, "the list is fresh");
    let cached = lookup.authenticate(&bearer(&key), spent()).await;
    assert!(cached.is_ok(), "a cached answer needs no gate");
    assert_eq!(store.lookups(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_live_list_is_loaded_once_per_refresh_however_many_are_refused_at_once() {
    let (store, lookup, _) = setup().await;
    let lookup = Arc::new(lookup);
    let strangers = (0..50).map(|_| {
        let lookup = lookup.clone();
        let stranger = bearer(&ApiKey::generate(KeyKind::Live).unwrap());
        tokio::spawn(async move { lookup.authenticate(&stranger, spent()).await })
    });
    for refused in futures_util::future::join_all(strangers).await {
        assert!(matches!(refused.unwrap(), Err(KeyRefusal::Held(_))));
    }
    assert_eq!(store.live_lists(), 1, "one load for 50 refusals at once");
    assert_eq!(store.lookups(), 0);

    // A key made after the load is not on the list until the next one: the gate applies.
    let young = live_key(&store, "young").await;
    tokio::time::advance(LIVE_KEYS_REFRESH - Duration::from_millis(1)).await;
    assert!(matches!(
        lookup.authenticate(&bearer(&young), spent()).await,
        Err(KeyRefusal::Held(_))
    ));
    assert_eq!(store.live_lists(), 1);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(lookup.authenticate(&bearer(&young), spent()).await.is_ok());
    assert_eq!(
        store.live_lists(),
        2,
        "reloaded once the list was as old as the refresh"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_load_of_the_live_list_is_retried_after_the_retry_delay() {
    let (store, lookup, key) = setup().await;
    store.set_down(true);
    assert!(matches!(
        lookup.authenticate(&bearer(&key), spent()).await,
        Err(KeyRefusal::Held(_))
    ));
    store.set_down(false);
    assert!(
        authenticate(&lookup, &bearer(&key)).await.is_ok(),
        "an open gate lets it read"
    );
    tokio::time::advance(LOOKUP_TTL).await;
    assert_eq!(store.live_lists(), 1);

    let (store, lookup, key) = setup().await;
    store.set_down(true);
    assert!(lookup.authenticate(&bearer(&key), spent()).await.is_err());
    store.set_down(false);
    tokio::time::advance(RETRY_AFTER_FAILURE - Duration::from_millis(1)).await;
    assert!(matches!(
        lookup.authenticate(&bearer(&key), spent()).await,
        Err(KeyRefusal::Held(_))
    ));
    assert_eq!(
        store.live_lists(),
        1,
        "not asked again before the retry delay"
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(
        lookup.authenticate(&bearer(&key), spent()).await.is_ok(),
        "the retry found it, well before a whole refresh"
    );
    assert_eq!(store.live_lists(), 2);
}

#[tokio::test(start_paused = true)]
async fn failures_are_not_kept() {
    let (store, lookup, key) = setup().await;
    store.set_down(true);
    assert!(matches!(
        authenticate(&lookup, &bearer(&key)).await,
        Err(KeyRefusal::Unavailable(_))
    ));
    store.set_down(false);
    assert!(authenticate(&lookup, &bearer(&key)).await.is_ok());
    assert_eq!(store.lookups(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_unknown_side_is_bounded_and_makes_room_as_entries_expire() {
    let (store, lookup, _) = setup().await;
    let strangers: Vec<ApiKey> = (0..=MAX_UNKNOWN)
        .map(|_| ApiKey::generate(KeyKind::Live).unwrap())
        .collect();
    for stranger in &strangers {
        lookup.find(stranger).await.unwrap();
    }
    assert_eq!(
        lock(&lookup.unknown).len(),
        MAX_UNKNOWN,
        "the last was not kept"
    );
    let reads = store.lookups();
    lookup.find(&strangers[MAX_UNKNOWN]).await.unwrap();
    assert_eq!(store.lookups(), reads + 1, "read again: it was not kept");

    tokio::time::advance(LOOKUP_TTL).await;
    let late = ApiKey::generate(KeyKind::Live).unwrap();
    lookup.find(&late).await.unwrap();
    assert_eq!(lock(&lookup.unknown).len(), 1, "expired entries made room");
}

/// A table of `self.0` live keys, as far as the list sees it: building one of
/// `MAX_LIVE_HASHES` keys through `create` would take minutes.
struct LiveOnly(usize);

#[async_trait::async_trait]
impl KeyStore for LiveOnly {
    async fn create(&self, _: &NewKey) -> Result<DateTime<Utc>, StoreError> {
        Err(StoreError::new("only the list is stored here"))
    }
    async fn list(&self, _: usize) -> Result<Vec<KeySummary>, StoreError> {
        Err(StoreError::new("only the list is stored here"))
    }
    async fn revoke(&self, _: KeyId) -> Result<Revocation, StoreError> {
        Err(StoreError::new("only the list is stored here"))
    }
    async fn change_limits(&self, _: KeyId, _: LimitsChange) -> Result<LimitsUpdate, StoreError> {
        Err(StoreError::new("only the list is stored here"))
    }
    async fn find_by_hash(&self, _: &KeyHash) -> Result<Option<KeyRecord>, StoreError> {
        Err(StoreError::new("only the list is stored here"))
    }
    async fn live_hashes(&self, limit: usize) -> Result<Vec<KeyHash>, StoreError> {
        let hash = |i: usize| {
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&(i as u64).to_le_bytes());
            KeyHash::from_bytes(&bytes).unwrap()
        };
        Ok((0..self.0.min(limit)).map(hash).collect())
    }
}

/// The warnings logged by `loads` loads of `store`'s list (each for a refused stranger).
async fn warnings_of(store: LiveOnly, loads: u32) -> String {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            lock(&self.0).extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let lookup = KeyLookup::new(Arc::new(store), LOOKUP_TTL);
    for _ in 0..loads {
        let stranger = ApiKey::generate(KeyKind::Live).unwrap();
        let held = lookup.authenticate(&bearer(&stranger), spent()).await;
        assert!(matches!(held, Err(KeyRefusal::Held(_))));
        tokio::time::advance(LIVE_KEYS_REFRESH).await;
    }
    let logged = lock(&buffer.0).clone();
    String::from_utf8_lossy(&logged).into_owned()
}

#[tokio::test(start_paused = true)]
async fn a_list_that_reaches_its_limit_is_warned_about_once_per_load() {
    let full = warnings_of(LiveOnly(MAX_LIVE_HASHES + 1), 2).await;
    assert_eq!(full.matches("reached its limit").count(), 2, "{full}");
    let room = warnings_of(LiveOnly(MAX_LIVE_HASHES - 1), 2).await;
    assert!(!room.contains("reached its limit"), "{room}");
}
