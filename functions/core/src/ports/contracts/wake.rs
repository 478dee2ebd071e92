//! The wake's guarantee (`DispatcherWake`): a wake is delivered once its delay has passed and
//! not before, and a delay past the maximum is cut to it, not refused. `take_due` receives (and
//! removes) the wakes delivered by now, as the dispatcher's event source would.

use std::time::{Duration, Instant};

use crate::ports::wake::{delay_secs, DispatcherWake, MAX_WAKE_DELAY};

/// How long a delivered wake may take to be received (`take_due` is polled every 100 ms).
const RECEIVED_WITHIN: Duration = Duration::from_secs(5);

pub async fn suite<W, T>(wake: &W, take_due: T)
where
    W: DispatcherWake + ?Sized,
    T: AsyncFn() -> usize,
{
    // Received within `RECEIVED_WITHIN`: how many.
    let take_within = async || {
        let started = Instant::now();
        loop {
            let taken = take_due().await;
            if taken > 0 || started.elapsed() > RECEIVED_WITHIN {
                return taken;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    assert_eq!(delay_secs(Duration::from_millis(1)), 1, "rounded up");
    assert_eq!(delay_secs(MAX_WAKE_DELAY * 4), 900, "cut to SQS's maximum");

    wake.wake(Duration::ZERO).await.expect("sent");
    assert_eq!(
        take_within().await,
        1,
        "a wake without delay is delivered at once"
    );

    let delay = Duration::from_secs(2);
    let asked = Instant::now();
    wake.wake(delay).await.expect("sent");
    assert_eq!(
        take_due().await,
        0,
        "a delayed wake is not delivered before its delay"
    );
    assert_eq!(
        take_within().await,
        1,
        "a delayed wake is delivered after its delay"
    );
    assert!(
        asked.elapsed() >= delay,
        "delivered after {:?}",
        asked.elapsed()
    );

    wake.wake(Duration::from_secs(24 * 3600))
        .await
        .expect("a delay past the maximum is cut, not refused");
    assert_eq!(take_due().await, 0, "and it is still a delay");
}
