//! One bucket of objects behind the replay, skin and artifact ports.

use super::*;

/// One bucket of objects: replays, skins, artifacts.
pub struct MemoryObjects {
    calls: Calls,
    objects: Mutex<HashMap<String, (Bytes, Option<String>)>>,
    down: Outage,
}

impl MemoryObjects {
    pub(super) fn new(calls: Calls) -> Self {
        Self {
            calls,
            objects: Mutex::default(),
            down: Outage::default(),
        }
    }

    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = lock(&self.objects).keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Puts `body` at `key` as a client's presigned upload does.
    pub fn place(&self, key: &str, body: Bytes) {
        lock(&self.objects).insert(key.to_owned(), (body, None));
    }

    /// A delete, recorded as `call`: deleting what is gone succeeds, as on S3.
    fn remove(&self, call: &'static str, key: &str) -> Result<(), StorageError> {
        self.calls.record(call);
        lock(&self.objects).remove(key);
        Ok(())
    }

    /// Writes fail (transiently) until told otherwise.
    pub fn set_down(&self, down: bool) {
        self.down.set(down);
    }

    fn up(&self) -> Result<(), StorageError> {
        if self.down.is_down() {
            Err(StorageError::transient("the bucket does not answer"))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl ReplayStore for MemoryObjects {
    async fn put(&self, key: &str, body: Bytes) -> Result<(), StorageError> {
        self.calls.record("replays.put");
        self.up()?;
        lock(&self.objects).insert(key.to_owned(), (body, None));
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.remove("replays.delete", key)
    }
}

#[async_trait]
impl SkinStore for MemoryObjects {
    async fn exists(&self, name: &SkinName) -> Result<bool, StorageError> {
        self.calls.record("skins.exists");
        Ok(lock(&self.objects).contains_key(&skins::skin_key(name)))
    }

    async fn put_new(&self, name: &SkinName, body: Bytes) -> Result<bool, StorageError> {
        self.calls.record("skins.put_new");
        self.up()?;
        let content = skins::content_id(&body);
        let mut objects = lock(&self.objects);
        match objects.get(&skins::skin_key(name)) {
            Some((_, stored)) => Ok(stored.as_deref() == Some(content.as_str())),
            None => {
                objects.insert(skins::skin_key(name), (body, Some(content)));
                Ok(true)
            }
        }
    }

    async fn holds(&self, name: &SkinName, content: &str) -> Result<bool, StorageError> {
        self.calls.record("skins.holds");
        Ok(lock(&self.objects)
            .get(&skins::skin_key(name))
            .is_some_and(|(_, stored)| stored.as_deref() == Some(content)))
    }

    async fn presign_post(
        &self,
        key: &str,
        size: u64,
        _expires_at: SystemTime,
    ) -> Result<PresignedPost, StorageError> {
        self.calls.record("skins.presign_post");
        Ok(PresignedPost {
            url: "memory://bucket".into(),
            fields: [("key", key.to_owned()), ("size", size.to_string())].into(),
        })
    }

    async fn list_incoming(&self, limit: usize) -> Result<Vec<String>, StorageError> {
        self.calls.record("skins.list_incoming");
        let keys = self.keys();
        Ok(keys
            .into_iter()
            .filter(|key| key.starts_with(skins::INCOMING_PREFIX))
            .take(limit)
            .collect())
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectVersion>, StorageError> {
        self.calls.record("skins.head");
        Ok(lock(&self.objects).get(key).map(|(body, _)| ObjectVersion {
            size: body.len() as u64,
            etag: skins::content_id(body),
        }))
    }

    async fn read(
        &self,
        key: &str,
        version: &ObjectVersion,
        range: Range<u64>,
    ) -> Result<ByteChunks, StorageError> {
        self.calls.record("skins.read");
        let body = lock(&self.objects)
            .get(key)
            .filter(|(body, _)| skins::content_id(body) == version.etag)
            .map(|(body, _)| body.clone())
            .ok_or_else(|| StorageError::new(format!("{key} changed")))?;
        let end = usize::try_from(range.end)
            .unwrap_or(usize::MAX)
            .min(body.len());
        let start = usize::try_from(range.start).unwrap_or(end).min(end);
        let chunk = body.slice(start..end);
        Ok(Box::pin(futures_util::stream::iter([Ok(chunk)])))
    }

    async fn copy_new(
        &self,
        key: &str,
        version: &ObjectVersion,
        name: &SkinName,
    ) -> Result<Copied, StorageError> {
        self.calls.record("skins.copy_new");
        let mut objects = lock(&self.objects);
        let body = objects
            .get(key)
            .filter(|(body, _)| skins::content_id(body) == version.etag)
            .map(|(body, _)| body.clone())
            .ok_or_else(|| StorageError::new(format!("{key} is gone or changed")))?;
        let content = skins::incoming_content_id(version);
        match objects.get(&skins::skin_key(name)) {
            Some((_, stored)) if stored.as_deref() == Some(content.as_str()) => Ok(Copied::Stored),
            Some(_) => Ok(Copied::Exists),
            None => {
                objects.insert(skins::skin_key(name), (body, Some(content)));
                Ok(Copied::Stored)
            }
        }
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.remove("skins.delete", key)
    }
}

#[async_trait]
impl ArtifactLinks for MemoryObjects {
    async fn link(&self, key: &str, ttl: Duration) -> Result<String, StorageError> {
        self.calls.record("artifacts.link");
        Ok(format!("memory://bucket/{key}?ttl={}", ttl.as_secs()))
    }
}
