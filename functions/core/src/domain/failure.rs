//! Why a render failed, as a code a bot can act on: the worker reports one (`error_code`) from
//! this documented set, and whether trying again may help follows from it.

/// A failed job's `error_code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureCode {
    /// Anything else, and any code this service does not know: not retried by itself.
    RenderFailed,
    /// The worker went silent past its deadline (the janitor's).
    TimedOut,
    BeatmapNotFound,
    BeatmapDownloadFailed,
    ReplayDownloadFailed,
    SkinNotFound,
    SkinDownloadFailed,
    /// The renderer itself stopped on this replay.
    RendererCrashed,
    /// The worker found the replay itself unrenderable (whoever submits it, with any skin).
    ReplayUnrenderable,
    /// The video could not be stored.
    UploadFailed,
    /// The worker was stopped (a deploy, a spot reclaim) before it finished.
    WorkerStopped,
    /// No worker took the queued job within `QUEUED_TTL`: the janitor ended it `expired`.
    QueueExpired,
}

impl FailureCode {
    pub const ALL: [FailureCode; 12] = [
        Self::RenderFailed,
        Self::TimedOut,
        Self::BeatmapNotFound,
        Self::BeatmapDownloadFailed,
        Self::ReplayDownloadFailed,
        Self::SkinNotFound,
        Self::SkinDownloadFailed,
        Self::RendererCrashed,
        Self::ReplayUnrenderable,
        Self::UploadFailed,
        Self::WorkerStopped,
        Self::QueueExpired,
    ];

    /// The failures that are the replay's own, whoever submits it and with whatever skin and
    /// options: only these keep the replay out for `REPLAY_FAILURE_COOLDOWN` (a failure one
    /// submitter's choices or the service caused must not lock everyone else out). The admission
    /// read lists them too (adapters/postgres/jobs.rs, the `jobs_failed_by_replay` index).
    pub const THE_REPLAYS: [FailureCode; 2] = [Self::BeatmapNotFound, Self::ReplayUnrenderable];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::RenderFailed => "render_failed",
            Self::TimedOut => "timed_out",
            Self::BeatmapNotFound => "beatmap_not_found",
            Self::BeatmapDownloadFailed => "beatmap_download_failed",
            Self::ReplayDownloadFailed => "replay_download_failed",
            Self::SkinNotFound => "skin_not_found",
            Self::SkinDownloadFailed => "skin_download_failed",
            Self::RendererCrashed => "renderer_crashed",
            Self::ReplayUnrenderable => "replay_unrenderable",
            Self::UploadFailed => "upload_failed",
            Self::WorkerStopped => "worker_stopped",
            Self::QueueExpired => "queue_expired",
        }
    }

    /// A worker's code; one this service does not know is `render_failed`, so a newer worker
    /// never makes a report fail.
    /// A worker's report: a code it may report, else `render_failed`.
    pub fn reported(text: &str) -> Self {
        Some(Self::stored(text))
            .filter(|code| code.reported_by_workers())
            .unwrap_or(Self::RenderFailed)
    }

    /// A stored code (a worker's, or the janitor's `queue_expired`): one this code does not
    /// know reads as `render_failed`.
    pub fn stored(text: &str) -> Self {
        text.parse().unwrap_or(Self::RenderFailed)
    }

    /// Whether a worker reports it (all but `queue_expired`, the janitor's).
    pub fn reported_by_workers(self) -> bool {
        self != Self::QueueExpired
    }

    /// Whether submitting the same request again may render it: the failure was the
    /// service's or a download's, not the replay's, beatmap's or skin's.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            Self::TimedOut
                | Self::BeatmapDownloadFailed
                | Self::ReplayDownloadFailed
                | Self::SkinDownloadFailed
                | Self::UploadFailed
                | Self::WorkerStopped
                | Self::QueueExpired
        )
    }
}

super::named_values!(FailureCode, "error code");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_ones_are_render_failed() {
        for code in FailureCode::ALL {
            assert_eq!(FailureCode::stored(code.as_str()), code);
            let reported = FailureCode::reported(code.as_str());
            match code.reported_by_workers() {
                true => assert_eq!(reported, code),
                false => assert_eq!(reported, FailureCode::RenderFailed, "the janitor's"),
            }
        }
        assert_eq!(
            FailureCode::reported("gpu_on_fire"),
            FailureCode::RenderFailed
        );
        assert!(!FailureCode::RenderFailed.retryable());
        assert!(!FailureCode::BeatmapNotFound.retryable());
        assert!(FailureCode::TimedOut.retryable());
        for code in FailureCode::THE_REPLAYS {
            assert!(!code.retryable(), "{code}: the replay's failure recurs");
        }
    }
}
