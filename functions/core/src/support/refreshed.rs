//! A value an instance keeps and loads again when it goes stale: the operator's policy, the
//! status counts, the health probe, a rotating secret, the database secret's credentials, the
//! list of live keys. One load at a time (concurrent callers share it), counted from before it
//! starts; a failed load keeps the last value and is tried again after `retry_after_failure`,
//! so an outage costs one load per that long per instance, not one per request.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// How soon a failed load is tried again, unless a caller needs otherwise: a blip should not
/// leave an old value in place for a whole TTL, nor an outage cost a load per request.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// What a caller that finds the value stale does while another caller loads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhileLoading {
    /// Takes the stale value at once (waits only when there is none yet).
    ServeStale,
    /// Waits for the load and takes what it found.
    Wait,
}

/// How a `Refreshed` value ages.
#[derive(Debug, Clone, Copy)]
pub struct Refresh {
    /// A loaded value is fresh this long.
    pub ttl: Duration,
    /// After a failed load, the next one waits this long. (A load whose caller is cancelled
    /// changes nothing: the next caller loads.)
    pub retry_after_failure: Duration,
    pub while_loading: WhileLoading,
}

/// A value loaded at most once per `Refresh::ttl`; see the module's documentation.
pub struct Refreshed<T> {
    refresh: Refresh,
    last: Mutex<Last<T>>,
    /// Held by the one caller loading.
    loading: tokio::sync::Mutex<()>,
}

struct Last<T> {
    value: Option<T>,
    /// When to load again; `None` before the first load.
    stale_at: Option<Instant>,
}

impl<T: Clone> Refreshed<T> {
    /// Empty: the first `get` loads.
    pub fn new(refresh: Refresh) -> Self {
        Self {
            refresh,
            last: Mutex::new(Last {
                value: None,
                stale_at: None,
            }),
            loading: tokio::sync::Mutex::new(()),
        }
    }

    /// The last value loaded, fresh or not, without loading.
    pub fn last(&self) -> Option<T> {
        self.lock().value.clone()
    }

    /// The value: the last one while fresh, else what `load` finds (or what a concurrent
    /// caller's load found). A failed load keeps the last value (`load` logs its error); `None`
    /// while no load has succeeded.
    pub async fn get<E, Fut>(&self, load: impl FnOnce() -> Fut) -> Option<T>
    where
        Fut: Future<Output = Result<T, E>>,
    {
        let (value, fresh) = self.snapshot();
        if fresh {
            return value;
        }
        let _loading = match self.loading.try_lock() {
            Ok(guard) => guard,
            Err(_) if self.refresh.while_loading == WhileLoading::ServeStale && value.is_some() => {
                return value
            }
            Err(_) => self.loading.lock().await,
        };
        // A load may have ended while this caller waited for its turn.
        let (value, fresh) = self.snapshot();
        if fresh {
            return value;
        }
        let started = Instant::now();
        let loaded = load().await;
        let mut last = self.lock();
        match loaded {
            Ok(value) => {
                last.value = Some(value.clone());
                last.stale_at = Some(started + self.refresh.ttl);
                Some(value)
            }
            Err(_) => {
                last.stale_at = Some(started + self.refresh.retry_after_failure);
                last.value.clone()
            }
        }
    }

    /// The last value, and whether it is fresh.
    fn snapshot(&self) -> (Option<T>, bool) {
        let last = self.lock();
        let fresh = last.stale_at.is_some_and(|at| Instant::now() < at);
        (last.value.clone(), fresh)
    }

    fn lock(&self) -> MutexGuard<'_, Last<T>> {
        // Every critical section is an assignment that cannot be left half-done.
        self.last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests;
