//! Replays and the render forms that carry them.

use std::path::PathBuf;

use reqwest::multipart::{Form, Part};

/// A replay of `tests/fixtures/replays`.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/replays")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A render form with `replay` as `file_name` and the given text fields.
pub fn render_form(replay: Vec<u8>, file_name: &str, fields: &[(&str, &str)]) -> Form {
    fields.iter().fold(
        Form::new().part(
            "replay",
            Part::bytes(replay).file_name(file_name.to_owned()),
        ),
        |form, (name, value)| form.text(name.to_string(), value.to_string()),
    )
}

/// A render form with no `replay` file: a text field only.
pub fn form_without_replay() -> Form {
    Form::new().text("skin", "Default")
}

/// A valid replay no other call returns: `valid_0.osr` with a unique trailer (trailing bytes
/// are tolerated, as osrparse tolerates them). A client's second submission of one replay is a
/// `duplicate_replay` while the first is active, so independent submissions need their own.
pub fn unique_replay() -> Vec<u8> {
    let mut replay = fixture("valid_0.osr");
    replay.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    replay
}

/// A render form of a `unique_replay`.
pub fn valid_form() -> Form {
    render_form(unique_replay(), "play.osr", &[])
}

/// A multipart body with `replay` as the `replay` file, and its content type: for a request
/// built by hand rather than by `reqwest` (budget.rs calls the core directly with it).
pub fn multipart(replay: &[u8]) -> (String, Vec<u8>) {
    let boundary = "budget-test-boundary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"replay\"; \
         filename=\"play.osr\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(replay);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}
