//! Sandbox jobs (keys `osr_test_…`, DESIGN.md §9): a job admitted by every real check that
//! never reaches a renderer. Its state is a function of its age, the same for every read and
//! every callback, so nothing has to run to advance it and nothing can leave it stuck.

use std::time::Duration;

use super::job::JobStatus;

/// Where a sandbox job's artifacts point, in the artifact bucket (docs/DEPLOY.md has the
/// operator upload them; the dev server does at start).
pub const SAMPLE_VIDEO_KEY: &str = "sandbox/sample.mp4";
pub const SAMPLE_THUMB_KEY: &str = "sandbox/sample.jpg";

/// When each state begins, from admission.
const DOWNLOADING_AT: Duration = Duration::from_secs(2);
const RENDERING_AT: Duration = Duration::from_secs(4);
const COMPLETED_AT: Duration = Duration::from_secs(9);

/// How long a sandbox job is active: while younger, it counts toward its key's `max_active`
/// and is a duplicate of its replay.
pub const ACTIVE_FOR: Duration = COMPLETED_AT;

/// A sandbox job's status and progress (per state, 0–100, as a worker reports it) at `age`.
pub fn state_at(age: Duration) -> (JobStatus, f32) {
    let through = |start: Duration, end: Duration| {
        let done = age.saturating_sub(start).as_secs_f32() / (end - start).as_secs_f32();
        (done * 100.0).clamp(0.0, 100.0).floor()
    };
    if age < DOWNLOADING_AT {
        (JobStatus::Queued, 0.0)
    } else if age < RENDERING_AT {
        (
            JobStatus::Downloading,
            through(DOWNLOADING_AT, RENDERING_AT),
        )
    } else if age < COMPLETED_AT {
        (JobStatus::Rendering, through(RENDERING_AT, COMPLETED_AT))
    } else {
        (JobStatus::Completed, 100.0)
    }
}

/// The callbacks of a sandbox job: each state change, and one progress update while it
/// renders, at the age it happens; what `state_at` shows then.
pub fn callback_schedule() -> Vec<(Duration, JobStatus, f32)> {
    let halfway = RENDERING_AT + (COMPLETED_AT - RENDERING_AT) / 2;
    [
        Duration::ZERO,
        DOWNLOADING_AT,
        RENDERING_AT,
        halfway,
        COMPLETED_AT,
    ]
    .into_iter()
    .map(|at| {
        let (status, progress) = state_at(at);
        (at, status, progress)
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_job_moves_forward_to_completed_within_ten_seconds() {
        let ms = Duration::from_millis;
        let mut last = (JobStatus::Queued, 0.0);
        for age in (0..=12_000).step_by(250).map(ms) {
            let (status, progress) = state_at(age);
            assert!((0.0..=100.0).contains(&progress));
            if status == last.0 {
                assert!(progress >= last.1, "{age:?}: progress went back");
            } else {
                assert!(
                    last.0.can_move_to(status),
                    "{age:?}: {} -> {status}",
                    last.0
                );
            }
            last = (status, progress);
        }
        assert_eq!(state_at(ms(0)), (JobStatus::Queued, 0.0));
        assert_eq!(state_at(ms(3_000)), (JobStatus::Downloading, 50.0));
        assert_eq!(state_at(ms(6_500)), (JobStatus::Rendering, 50.0));
        assert_eq!(state_at(ms(8_999)).0, JobStatus::Rendering);
        assert_eq!(state_at(ms(9_000)), (JobStatus::Completed, 100.0));
    }

    #[test]
    fn its_callbacks_are_each_state_change_and_a_progress_update_in_order() {
        let schedule = callback_schedule();
        let statuses: Vec<_> = schedule.iter().map(|(_, status, _)| *status).collect();
        use JobStatus::*;
        assert_eq!(
            statuses,
            [Queued, Downloading, Rendering, Rendering, Completed]
        );
        assert!(schedule.windows(2).all(|pair| pair[0].0 < pair[1].0));
        assert_eq!(schedule[3].2, 50.0);
        assert_eq!(schedule.last().unwrap().0, ACTIVE_FOR);
    }
}
