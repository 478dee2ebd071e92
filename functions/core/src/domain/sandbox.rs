//! Sandbox jobs (keys `osr_test_…`, DESIGN.md §6, "Sandbox jobs"): a job admitted by every real check that
//! never reaches a renderer. Its state is a function of its age, the same for every read and
//! every callback, so nothing has to run to advance it and nothing can leave it stuck.

use std::str::FromStr;
use std::time::Duration;

use super::failure::FailureCode;
use super::job::JobStatus;

/// How a sandbox job ends (the form's `sandbox_outcome`): rendered (the default), or failed
/// while rendering with a failure code a worker reports (`failed`: the sample one), so a bot
/// can test its error handling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Outcome {
    #[default]
    Completed,
    Failed(FailureCode),
}

impl Outcome {
    /// The render form's field.
    pub const FIELD: &'static str = "sandbox_outcome";

    /// The state the job ends in, as admission stores it.
    pub fn final_status(self) -> JobStatus {
        match self {
            Self::Completed => JobStatus::Completed,
            Self::Failed(_) => JobStatus::Failed,
        }
    }

    /// The failure it ends with, if it fails.
    pub fn failure(self) -> Option<FailureCode> {
        match self {
            Self::Completed => None,
            Self::Failed(code) => Some(code),
        }
    }
}

/// What a sandbox request rehearses (`sandbox_outcome`): a job that ends as `Outcome` says,
/// or a refusal the live service answers when it is busy, paused or the key's quota is spent,
/// with the same status, code and `Retry-After`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rehearsal {
    Job(Outcome),
    Refused(Refusal),
}

/// A refusal a sandbox request can rehearse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    QueueFull,
    RenderJobsPaused,
    RateLimited,
}

impl Rehearsal {
    /// What the field takes, for its error.
    pub const NAMES: &'static str = "`completed`, `failed`, a failure code a worker reports \
        (`render_failed`, `beatmap_not_found`, …), `queue_full`, `render_jobs_paused` or \
        `rate_limited`";
}

impl FromStr for Rehearsal {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let code = FailureCode::ALL
            .into_iter()
            .find(|code| code.as_str() == s && code.reported_by_workers());
        match (s, code) {
            ("completed", _) => Ok(Self::Job(Outcome::Completed)),
            ("failed", _) => Ok(Self::Job(Outcome::Failed(SAMPLE_FAILURE_CODE))),
            (_, Some(code)) => Ok(Self::Job(Outcome::Failed(code))),
            ("queue_full", _) => Ok(Self::Refused(Refusal::QueueFull)),
            ("render_jobs_paused", _) => Ok(Self::Refused(Refusal::RenderJobsPaused)),
            ("rate_limited", _) => Ok(Self::Refused(Refusal::RateLimited)),
            _ => Err(format!("{}: one of {}", Outcome::FIELD, Self::NAMES)),
        }
    }
}

/// The `Retry-After` of a rehearsed `queue_full`: a plausible wait (a live one is the farm's
/// estimate of its first free slot).
pub const REHEARSED_QUEUE_WAIT: Duration = Duration::from_secs(30);

/// The failure a sandbox job with `sandbox_outcome=failed` ends with.
pub const SAMPLE_FAILURE_CODE: FailureCode = FailureCode::BeatmapNotFound;

/// A sandbox job's failure text: which code it rehearses.
pub fn sample_failure(code: FailureCode) -> String {
    format!("sample failure (sandbox_outcome): {code}")
}

/// Where a sandbox job's artifacts point, in the artifact bucket (docs/DEPLOY.md has the
/// operator upload them; the dev server does at start).
pub const SAMPLE_VIDEO_KEY: &str = "sandbox/sample.mp4";
pub const SAMPLE_THUMB_KEY: &str = "sandbox/sample.jpg";

/// When each state begins, from admission.
const DOWNLOADING_AT: Duration = Duration::from_secs(2);
/// How long a sandbox job shows queued.
pub const QUEUED_FOR: Duration = DOWNLOADING_AT;
const RENDERING_AT: Duration = Duration::from_secs(4);
const COMPLETED_AT: Duration = Duration::from_secs(9);

/// How long a sandbox job is active: while younger, it counts toward its key's `max_active`
/// and is a duplicate of its replay.
pub const ACTIVE_FOR: Duration = COMPLETED_AT;

/// A sandbox job's status and progress (per state, 0–100, as a worker reports it) at `age`,
/// ending in `ends`, its stored status (a failed job's progress starts its state at 0, as a
/// worker's failed report without one does).
pub fn state_at(age: Duration, ends: JobStatus) -> (JobStatus, f32) {
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
        match ends {
            JobStatus::Failed => (JobStatus::Failed, 0.0),
            _ => (JobStatus::Completed, 100.0),
        }
    }
}

/// How long after admission a sandbox job shows `status` (from, and until if it ends), for a
/// listing filtered by the status the jobs show: `None` for a status none shows. A final
/// status is shown by the jobs stored with it, from `ACTIVE_FOR` on.
pub fn shown_between(status: JobStatus) -> Option<(Duration, Option<Duration>)> {
    match status {
        JobStatus::Queued => Some((Duration::ZERO, Some(DOWNLOADING_AT))),
        JobStatus::Downloading => Some((DOWNLOADING_AT, Some(RENDERING_AT))),
        JobStatus::Rendering => Some((RENDERING_AT, Some(COMPLETED_AT))),
        JobStatus::Completed | JobStatus::Failed => Some((COMPLETED_AT, None)),
        JobStatus::Expired => None,
    }
}

/// The ages at which a sandbox job's callbacks and live events report it: each state's start,
/// and halfway through rendering.
const STEPS: [Duration; 5] = [
    Duration::ZERO,
    DOWNLOADING_AT,
    RENDERING_AT,
    Duration::from_millis(
        (RENDERING_AT.as_millis() + (COMPLETED_AT.as_millis() - RENDERING_AT.as_millis()) / 2)
            as u64,
    ),
    COMPLETED_AT,
];

/// The step of its schedule a sandbox job of `age` is at (1-based: its live events'
/// `sequence`), and the age of its next step, if any.
pub fn step_at(age: Duration) -> (i64, Option<Duration>) {
    let reached = STEPS.iter().take_while(|&&at| at <= age).count();
    (reached as i64, STEPS.get(reached).copied())
}

/// The step of its schedule a sandbox job showing `status` at `progress` has reached: its
/// live events' `sequence`. Read from the state shown, not the clock, so a frame's sequence is
/// that of the state it carries.
pub fn step_of(status: JobStatus, progress: f32) -> i64 {
    let rank = |status| match status {
        JobStatus::Queued => 0,
        JobStatus::Downloading => 1,
        JobStatus::Rendering => 2,
        JobStatus::Completed | JobStatus::Failed | JobStatus::Expired => 3,
    };
    let shown = (rank(status), progress);
    STEPS
        .iter()
        .filter(|&&at| {
            let (status, progress) = state_at(at, status);
            (rank(status), progress) <= shown
        })
        .count() as i64
}

/// The callbacks of a sandbox job: each state change, and one progress update while it
/// renders, at the age it happens; what `state_at` shows then.
pub fn callback_schedule(outcome: Outcome) -> Vec<(Duration, JobStatus, f32)> {
    STEPS
        .into_iter()
        .map(|at| {
            let (status, progress) = state_at(at, outcome.final_status());
            (at, status, progress)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_step_a_state_shows_is_the_step_of_its_age() {
        for outcome in [Outcome::Completed, Outcome::Failed(SAMPLE_FAILURE_CODE)] {
            for ms in (0..11_000).step_by(50) {
                let age = Duration::from_millis(ms);
                let (status, progress) = state_at(age, outcome.final_status());
                assert_eq!(step_of(status, progress), step_at(age).0, "{ms} ms");
            }
        }
    }

    #[test]
    fn a_sandbox_job_steps_through_its_schedule() {
        let ms = Duration::from_millis;
        assert_eq!(step_at(ms(0)), (1, Some(ms(2_000))));
        assert_eq!(step_at(ms(1_999)), (1, Some(ms(2_000))));
        assert_eq!(step_at(ms(6_500)), (4, Some(ms(9_000))));
        assert_eq!(step_at(ms(9_000)), (5, None));
        assert_eq!(step_at(ms(60_000)), (5, None));
    }

    #[test]
    fn a_sandbox_job_moves_forward_to_completed_within_ten_seconds() {
        let ms = Duration::from_millis;
        let mut last = (JobStatus::Queued, 0.0);
        for age in (0..=12_000).step_by(250).map(ms) {
            let (status, progress) = state_at(age, JobStatus::Completed);
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
        let at = |ms| state_at(Duration::from_millis(ms), JobStatus::Completed);
        assert_eq!(at(0), (JobStatus::Queued, 0.0));
        assert_eq!(at(3_000), (JobStatus::Downloading, 50.0));
        assert_eq!(at(6_500), (JobStatus::Rendering, 50.0));
        assert_eq!(at(8_999).0, JobStatus::Rendering);
        assert_eq!(at(9_000), (JobStatus::Completed, 100.0));
        let failed = |ms| state_at(Duration::from_millis(ms), JobStatus::Failed);
        assert_eq!(failed(6_500), (JobStatus::Rendering, 50.0));
        assert_eq!(failed(9_000), (JobStatus::Failed, 0.0));
        assert!(JobStatus::Rendering.can_move_to(JobStatus::Failed));
    }

    #[test]
    fn its_callbacks_are_each_state_change_and_a_progress_update_in_order() {
        let schedule = callback_schedule(Outcome::Completed);
        let statuses: Vec<_> = schedule.iter().map(|(_, status, _)| *status).collect();
        use JobStatus::*;
        assert_eq!(
            statuses,
            [Queued, Downloading, Rendering, Rendering, Completed]
        );
        assert!(schedule.windows(2).all(|pair| pair[0].0 < pair[1].0));
        assert_eq!(schedule[3].2, 50.0);
        assert_eq!(schedule.last().unwrap().0, ACTIVE_FOR);
        let failing = callback_schedule(Outcome::Failed(SAMPLE_FAILURE_CODE));
        assert_eq!(failing.last().unwrap().1, Failed);
    }

    #[test]
    fn each_shown_status_has_its_age_range() {
        for outcome in [Outcome::Completed, Outcome::Failed(SAMPLE_FAILURE_CODE)] {
            for age in (0..=12_000).step_by(250).map(Duration::from_millis) {
                let (shown, _) = state_at(age, outcome.final_status());
                for status in JobStatus::ALL {
                    let stored = !status.is_active() && status != outcome.final_status();
                    let inside = !stored
                        && shown_between(status).is_some_and(|(from, until)| {
                            age >= from && until.is_none_or(|until| age < until)
                        });
                    assert_eq!(inside, status == shown, "{age:?} {status} {outcome:?}");
                }
            }
        }
    }

    #[test]
    fn a_rehearsal_is_a_failure_code_or_a_refusal() {
        assert_eq!("completed".parse(), Ok(Rehearsal::Job(Outcome::Completed)));
        assert_eq!(
            "failed".parse(),
            Ok(Rehearsal::Job(Outcome::Failed(SAMPLE_FAILURE_CODE)))
        );
        for code in FailureCode::ALL {
            let rehearsed = code.as_str().parse::<Rehearsal>();
            match code {
                FailureCode::QueueExpired => assert!(rehearsed.is_err(), "the janitor's"),
                _ => assert_eq!(rehearsed, Ok(Rehearsal::Job(Outcome::Failed(code)))),
            }
        }
        for (name, refusal) in [
            ("queue_full", Refusal::QueueFull),
            ("render_jobs_paused", Refusal::RenderJobsPaused),
            ("rate_limited", Refusal::RateLimited),
        ] {
            assert_eq!(name.parse(), Ok(Rehearsal::Refused(refusal)));
        }
        assert!("exploded".parse::<Rehearsal>().is_err());
    }
}
