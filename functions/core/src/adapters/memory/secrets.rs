//! The secret store.

use super::*;

/// Secrets by id: `put` rotates one as Secrets Manager does (the current value becomes the
/// previous); `reads` counts the reads. An unknown id fails to read.
#[derive(Default)]
pub struct MemorySecrets {
    versions: Mutex<HashMap<String, SecretVersions>>,
    reads: Mutex<usize>,
}

impl MemorySecrets {
    pub fn put(&self, id: &str, value: &str) {
        let mut versions = lock(&self.versions);
        let previous = versions.remove(id).map(|old| old.current);
        versions.insert(
            id.to_owned(),
            SecretVersions {
                current: value.to_owned(),
                previous,
            },
        );
    }

    pub fn reads(&self) -> usize {
        *lock(&self.reads)
    }
}

#[async_trait]
impl SecretStore for MemorySecrets {
    async fn versions(&self, id: &str) -> Result<SecretVersions, StoreError> {
        *lock(&self.reads) += 1;
        lock(&self.versions)
            .get(id)
            .cloned()
            .ok_or_else(|| StoreError::new(format!("no secret `{id}`")))
    }
}
