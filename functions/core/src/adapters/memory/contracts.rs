//! Every in-memory adapter held to its port's contract suite (ports/contracts/), the same suites
//! the real adapters pass in tests/api/contracts.rs.

use std::sync::atomic::AtomicI64;

use super::*;
use crate::ports::callbacks::{Callback, CallbackClaim, KeyShares};
use crate::ports::contracts;

#[tokio::test]
async fn the_database_keeps_the_jobs_idempotency_and_skin_name_contracts() {
    contracts::jobs::suite(&MemoryDatabase::new(Calls::default())).await;
    contracts::idempotency::suite(&MemoryDatabase::new(Calls::default())).await;
    contracts::skin_names::suite(&MemoryDatabase::new(Calls::default())).await;
}

#[tokio::test]
async fn the_replay_urls_keep_the_fetch_contract() {
    let urls = MemoryReplayUrls::default();
    let served = contracts::replay_urls::Served {
        ok: "https://replays.example/a.osr".into(),
        body: Bytes::from_static(b"a replay"),
        big: "https://replays.example/big".into(),
        missing: "https://replays.example/missing".into(),
    };
    urls.serve(&served.ok, served.body.clone());
    urls.serve(&served.big, Bytes::from(vec![0; 4000]));
    contracts::replay_urls::suite(&urls, &served).await;
}

#[tokio::test]
async fn the_database_keeps_the_push_queue_contract() {
    let database = MemoryDatabase::new(Calls::default());
    contracts::pushes::suite(&database, &database).await;
}

#[tokio::test]
async fn the_database_keeps_the_fair_release_contract() {
    contracts::release::suite(&MemoryDatabase::new(Calls::default())).await;
}

#[tokio::test]
async fn the_outbox_keeps_the_leased_queue_contract() {
    let database = MemoryDatabase::new(Calls::default());
    let seed = async || contracts::leased::seed_event(&database).await;
    contracts::leased::suite(&database, |lease| lease, seed).await;
}

#[tokio::test]
async fn the_callbacks_keep_the_leased_queue_contract() {
    let callbacks = MemoryCallbacks::default();
    let next_id = AtomicI64::new(1);
    let seed = async || {
        let id = next_id.fetch_add(1, Ordering::SeqCst);
        callbacks.push(Callback {
            id,
            job_id: JobId::new(),
            sequence: 1,
            url: "https://example.com/hook".into(),
            body: serde_json::json!({}),
            attempts: 0,
            signing_secret: None,
        });
        id
    };
    let shares = KeyShares {
        per_client: 1000,
        max_pending_per_key: 1000,
    };
    let claim_of = |lease| CallbackClaim { lease, shares };
    contracts::leased::suite(&callbacks, claim_of, seed).await;
    contracts::callbacks::addresses(&callbacks).await;
    contracts::callbacks::sender(&callbacks).await;
}

#[tokio::test]
async fn the_wake_keeps_its_contract() {
    let wake = MemoryWake::default();
    contracts::wake::suite(&wake, async || wake.take_due()).await;
}

#[tokio::test]
async fn the_keys_policy_limiter_queue_and_secrets_keep_their_contracts() {
    contracts::keys::suite(&MemoryKeys::default()).await;
    contracts::policy::suite(&MemoryPolicy::default()).await;
    contracts::limiter::suite(&MemoryLimiter::new(Calls::default())).await;
    contracts::queue::suite(&MemoryQueue::new(Calls::default())).await;
    let secrets = MemorySecrets::default();
    let put = async |id: &str, value: &str| secrets.put(id, value);
    contracts::secrets::suite(&secrets, put).await;
}

#[tokio::test]
async fn the_objects_keep_the_replay_skin_store_and_artifact_contracts() {
    let objects = MemoryObjects::new(Calls::default());
    let exists = async |key: &str| objects.keys().iter().any(|stored| stored == key);
    contracts::objects::replays(&objects, exists).await;
    let place = async |key: &str, body: Bytes| objects.place(key, body);
    contracts::objects::skins(&objects, place).await;
    contracts::artifacts::suite(&objects).await;
}

#[tokio::test]
async fn the_connection_store_and_the_local_sockets_keep_their_contracts() {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use tokio::sync::mpsc::UnboundedReceiver;

    use crate::domain::events::ConnectionId;

    contracts::connections::suite(&MemoryConnections::default()).await;
    let sockets = LocalSockets::default();
    type Inbox = (UnboundedReceiver<String>, Vec<String>);
    let inboxes: Mutex<HashMap<ConnectionId, Inbox>> = Mutex::default();
    let open = async || {
        let id = sockets.new_connection_id();
        let frames = sockets.register(&id);
        inboxes
            .lock()
            .unwrap()
            .insert(id.clone(), (frames, Vec::new()));
        id
    };
    let received = async |id: &ConnectionId| {
        let mut inboxes = inboxes.lock().unwrap();
        let (frames, seen) = inboxes.get_mut(id).expect("opened");
        while let Ok(frame) = frames.try_recv() {
            seen.push(frame);
        }
        seen.clone()
    };
    let close = async |id: &ConnectionId| sockets.unregister(id);
    contracts::pushers::suite(&sockets, open, received, close).await;
}
