//! The probe's rate and single flight, with a dependency that counts its checks, on a paused
//! clock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_trait::async_trait;
use tokio::time::Instant;

use super::*;

const INTERVAL: Duration = Duration::from_secs(10);

/// A dependency that counts its checks; each takes 100 ms, and fails while `down`.
#[derive(Default)]
struct Counted {
    checks: AtomicUsize,
    down: AtomicBool,
}

#[async_trait]
impl Dependency for Counted {
    fn name(&self) -> &'static str {
        "counted"
    }

    async fn check(&self) -> Result<(), String> {
        self.checks.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
        match self.down.load(Ordering::SeqCst) {
            true => Err("down".into()),
            false => Ok(()),
        }
    }
}

fn setup() -> (Arc<Counted>, Arc<HealthCheck>) {
    let dependency = Arc::new(Counted::default());
    let health = HealthCheck::new(vec![dependency.clone() as Arc<dyn Dependency>], INTERVAL);
    (dependency, Arc::new(health))
}

#[tokio::test(start_paused = true)]
async fn requests_at_once_share_one_probe() {
    let (dependency, health) = setup();
    let requests = (0..100).map(|_| {
        let health = health.clone();
        tokio::spawn(async move { health.checks().await })
    });
    for answer in join_all(requests).await {
        assert_eq!(&*answer.unwrap(), &[("counted", true)]);
    }
    assert_eq!(dependency.checks.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn at_most_one_probe_per_interval_and_the_answer_follows_the_next() {
    let (dependency, health) = setup();
    let start = Instant::now();
    // A request every 100 ms for a minute (each probe itself takes 100 ms).
    while start.elapsed() < Duration::from_secs(60) {
        health.checks().await;
        tokio::time::advance(Duration::from_millis(100)).await;
    }
    let probes = dependency.checks.load(Ordering::SeqCst);
    assert!((6..=7).contains(&probes), "{probes} probes in 60 s");

    tokio::time::advance(INTERVAL).await;
    assert_eq!(&*health.checks().await, &[("counted", true)], "probed");
    dependency.down.store(true, Ordering::SeqCst);
    tokio::time::advance(INTERVAL - Duration::from_millis(200)).await;
    assert_eq!(&*health.checks().await, &[("counted", true)], "cached");
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_eq!(&*health.checks().await, &[("counted", false)], "probed");
    assert_eq!(dependency.checks.load(Ordering::SeqCst), probes + 2);
}
