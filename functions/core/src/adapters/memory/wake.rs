//! The dispatcher's wake queue.

use super::*;

/// The wakes asked for, each as the time it is due; `take_due` receives those due, as the
/// dispatcher's event source would.
#[derive(Default)]
pub struct MemoryWake {
    wakes: Mutex<Vec<DateTime<Utc>>>,
    down: Outage,
}

impl MemoryWake {
    /// Every wake asked for so far, still waiting or due, as its delay from now (zero once due).
    pub fn asked(&self) -> Vec<Duration> {
        let now = Utc::now();
        lock(&self.wakes)
            .iter()
            .map(|&at| (at - now).to_std().unwrap_or_default())
            .collect()
    }

    /// Removes and counts the wakes that are due.
    pub fn take_due(&self) -> usize {
        let now = Utc::now();
        let mut wakes = lock(&self.wakes);
        let before = wakes.len();
        wakes.retain(|&at| at > now);
        before - wakes.len()
    }

    /// Sending a wake fails until told otherwise.
    pub fn set_down(&self, down: bool) {
        self.down.set(down);
    }
}

#[async_trait]
impl DispatcherWake for MemoryWake {
    async fn wake(&self, after: Duration) -> Result<(), StoreError> {
        self.down.check("the wake queue is down")?;
        let delay = Duration::from_secs(delay_secs(after) as u64);
        lock(&self.wakes).push(Utc::now() + delay);
        Ok(())
    }
}
