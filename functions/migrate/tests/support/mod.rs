//! What the migrate tests share besides the testkit (fresh databases, connections, the Lambda
//! Runtime API): the migrations the code ships.

use std::path::Path;

/// The migrations in `migrations/` (what this code embeds), by refinery's name (`V1__jobs_and_outbox`), oldest first.
pub fn shipped_migrations() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations");
    let mut names: Vec<(u32, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|file| {
            let stem = file.strip_suffix(".sql")?;
            let version = stem.strip_prefix('V')?.split_once("__")?.0.parse().ok()?;
            Some((version, stem.to_owned()))
        })
        .collect();
    names.sort();
    names.into_iter().map(|(_, name)| name).collect()
}
