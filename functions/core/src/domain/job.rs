//! Jobs: their identity and the states they move through.

use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A render job's id: a random UUID, rendered in its hyphenated form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(Uuid);

impl JobId {
    pub fn new() -> Self {
        Self(Uuid::new_v4())
    }

    pub fn as_uuid(&self) -> Uuid {
        self.0
    }

    /// Where the replay of this job lives in the replay bucket.
    pub fn replay_key(&self) -> String {
        format!("replays/{}.osr", self.0)
    }

    pub fn status_path(&self) -> String {
        format!("/v1/jobs/{}", self.0)
    }
}

impl Default for JobId {
    fn default() -> Self {
        Self::new()
    }
}

impl From<Uuid> for JobId {
    fn from(id: Uuid) -> Self {
        Self(id)
    }
}

impl FromStr for JobId {
    type Err = uuid::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(Self)
    }
}

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A client's own label for a job (`client_reference`): 1 to 128 characters, none of them a
/// control character. Stored with the job and echoed in its reads, callbacks and live events,
/// so a bot can match the first callback before it has stored the job id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ClientReference(String);

impl ClientReference {
    pub const FIELD: &str = "client_reference";
    pub const MAX_CHARS: usize = 128;

    pub fn parse(text: &str) -> Result<Self, String> {
        let chars = text.chars().count();
        if chars == 0 || chars > Self::MAX_CHARS || text.chars().any(char::is_control) {
            return Err(format!(
                "must be 1 to {} printable characters",
                Self::MAX_CHARS
            ));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `queued → downloading → rendering → completed | failed`, plus `expired` for queued jobs
/// the janitor ends. The first three are active: they hold a per-client and a global slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Queued,
    Downloading,
    Rendering,
    Completed,
    Failed,
    Expired,
}

impl JobStatus {
    pub const ALL: [JobStatus; 6] = [
        Self::Queued,
        Self::Downloading,
        Self::Rendering,
        Self::Completed,
        Self::Failed,
        Self::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Downloading => "downloading",
            Self::Rendering => "rendering",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Expired => "expired",
        }
    }

    pub fn is_active(self) -> bool {
        matches!(self, Self::Queued | Self::Downloading | Self::Rendering)
    }

    /// The transition table: the states a worker's report may move a job from into `self`.
    /// Reports move jobs forward only: repeating the current active state updates progress,
    /// a worker may skip a step it does not need (a cached replay: `queued → rendering`),
    /// `completed` needs a render, and `failed` ends any active job. Nothing leaves a
    /// terminal state, and no report makes a job `queued` or `expired`.
    pub fn predecessors(self) -> &'static [JobStatus] {
        match self {
            Self::Downloading => &[Self::Queued, Self::Downloading],
            Self::Rendering => &[Self::Queued, Self::Downloading, Self::Rendering],
            Self::Completed => &[Self::Rendering],
            Self::Failed => &[Self::Queued, Self::Downloading, Self::Rendering],
            Self::Queued | Self::Expired => &[],
        }
    }

    pub fn can_move_to(self, next: JobStatus) -> bool {
        next.predecessors().contains(&self)
    }
}

super::named_values!(JobStatus, "job status");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_reference_is_short_printable_text() {
        let longest = ["x".repeat(128), "é".repeat(128)];
        let sent = ["a", "discord:1234/5678", "émoji 🎉 ok"];
        for ok in sent.into_iter().chain(longest.iter().map(String::as_str)) {
            assert_eq!(ClientReference::parse(ok).unwrap().as_str(), ok);
        }
        for bad in ["", &"x".repeat(129), "a\nb", "tab\there", "nul\0", "\u{7f}"] {
            assert!(ClientReference::parse(bad).is_err(), "{bad:?}");
        }
    }
    use JobStatus::*;

    #[test]
    fn transition_table() {
        let legal = [
            (Queued, Downloading),
            (Queued, Rendering),
            (Queued, Failed),
            (Downloading, Downloading),
            (Downloading, Rendering),
            (Downloading, Failed),
            (Rendering, Rendering),
            (Rendering, Completed),
            (Rendering, Failed),
        ];
        for from in JobStatus::ALL {
            for to in JobStatus::ALL {
                assert_eq!(
                    from.can_move_to(to),
                    legal.contains(&(from, to)),
                    "{from} -> {to}"
                );
            }
        }
    }

    #[test]
    fn only_active_jobs_move_and_terminal_states_are_final() {
        for from in JobStatus::ALL {
            let moves = JobStatus::ALL.iter().any(|to| from.can_move_to(*to));
            assert_eq!(moves, from.is_active(), "{from}");
        }
    }

    #[test]
    fn statuses_round_trip_through_text() {
        for status in JobStatus::ALL {
            assert_eq!(status.as_str().parse::<JobStatus>(), Ok(status));
        }
        assert!("paused".parse::<JobStatus>().is_err());
    }
}
