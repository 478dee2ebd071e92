//! Peak memory of ingesting one presigned skin upload (docs/PERFORMANCE.md, "Skin ingest
//! memory"), against the local stack (PostgreSQL and the AWS stand-in, `./infra/up.sh`):
//!
//! ```sh
//! (source infra/lib.sh && cargo run -p osurender-core --example skin_ingest_memory -- 200)
//! ```
//!
//! Writes a skin archive of about the given MiB (default 200: `MAX_SKIN_UPLOAD_BYTES` on AWS)
//! to a temporary file, uploads it under `incoming/` streamed from disk, resets this process's
//! peak resident set (`/proc/self/clear_refs`), runs `skins::ingest` on it as skin-ingest does,
//! and prints the peak (`VmHWM`) the ingest reached. Exits non-zero unless the skin was
//! published. Linux only. Its own database (`osurender_ingest_memory`) and bucket.

use std::io::Write;
use std::time::Instant;

use aws_sdk_s3::primitives::ByteStream;
use osurender_core::adapters::postgres::{migrations, Tls};
use osurender_core::support::config::DbSslMode;
use osurender_core::usecases::skins;
use osurender_core::usecases::skins::ingest::IngestOutcome;
use osurender_core::{Clients, Config};
use zip::write::SimpleFileOptions;
use zip::CompressionMethod;

const BUCKET: &str = "osurender-ingest-memory";
const DATABASE: &str = "osurender_ingest_memory";
const MIB: usize = 1024 * 1024;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mib: usize = std::env::args().nth(1).map_or(Ok(200), |arg| arg.parse())?;
    let server = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/osurender".into());
    let (base, _) = server
        .rsplit_once('/')
        .ok_or("DATABASE_URL ends in /<db>")?;
    let database_url = format!("{base}/{DATABASE}");
    let max_upload = (mib + 16) * MIB;
    // The local trust cluster is plain unless DB_SSLMODE or DATABASE_URL says otherwise.
    let config = Config::from_lookup_with_sslmode(
        |name| match name {
            "DATABASE_URL" => Some(database_url.clone()),
            "REPLAY_BUCKET" | "SKIN_BUCKET" => Some(BUCKET.into()),
            "MAX_SKIN_UPLOAD_BYTES" => Some(max_upload.to_string()),
            // As on AWS for skin-ingest (template.yaml).
            "AWS_TIMEOUT_MS" => Some("60000".into()),
            other => std::env::var(other).ok(),
        },
        DbSslMode::Disable,
    )?;
    let tls = Tls::from_config(&config)?;
    migrations::connect_and_apply(
        database_url.parse()?,
        &tls,
        config.database.timeout,
        config.database.migrate_lock_timeout,
        None,
    )
    .await?;
    let clients = Clients::new(&config).await?;
    if let Err(error) = clients.s3.create_bucket().bucket(BUCKET).send().await {
        let exists = error
            .as_service_error()
            .is_some_and(|e| e.is_bucket_already_owned_by_you() || e.is_bucket_already_exists());
        if !exists {
            return Err(error.into());
        }
    }
    let app = clients.app(config);

    let archive =
        std::env::temp_dir().join(format!("skin-ingest-memory-{}.osk", std::process::id()));
    write_skin(&archive, mib)?;
    let size = std::fs::metadata(&archive)?.len();
    let name = format!("Memory {}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let key = format!("incoming/{}/{name}.osk", uuid::Uuid::new_v4());
    clients
        .s3
        .put_object()
        .bucket(BUCKET)
        .key(&key)
        .body(ByteStream::from_path(&archive).await?)
        .send()
        .await?;
    std::fs::remove_file(&archive)?;

    let before = status("VmRSS")?;
    std::fs::write("/proc/self/clear_refs", "5")?;
    let started = Instant::now();
    let outcome = skins::ingest(&app, BUCKET, &key).await?;
    let elapsed = started.elapsed();
    let peak = status("VmHWM")?;
    println!(
        "ingested {size} bytes ({mib} MiB skin) in {elapsed:.1?}: {outcome:?}\n\
         resident before the ingest: {before} KiB; peak during it (VmHWM): {peak} KiB = {:.1} MiB",
        peak as f64 / 1024.0
    );
    clients
        .s3
        .delete_object()
        .bucket(BUCKET)
        .key(format!("skins/{name}.osk"))
        .send()
        .await?;
    if !matches!(outcome, IngestOutcome::Published(_)) {
        return Err("the skin was not published".into());
    }
    Ok(())
}

/// A skin of about `mib` MiB: 1 MiB images of noise (stored, as zip tools store what does not
/// compress) and a deflated `skin.ini` every tenth entry.
fn write_skin(path: &std::path::Path, mib: usize) -> std::io::Result<()> {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path)?);
    let stored = SimpleFileOptions::default().compression_method(CompressionMethod::Stored);
    let deflated = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut noise = vec![0u8; MIB];
    for index in 0..mib {
        if index % 10 == 0 {
            zip.start_file(format!("ini/{index}/skin.ini"), deflated)?;
            zip.write_all("[General]\nName: Memory\n".repeat(1000).as_bytes())?;
        }
        for byte in noise.iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *byte = state as u8;
        }
        zip.start_file(format!("images/hit{index}.png"), stored)?;
        zip.write_all(&noise)?;
    }
    zip.finish()?;
    Ok(())
}

/// A `kB` field of `/proc/self/status`.
fn status(field: &str) -> Result<u64, Box<dyn std::error::Error>> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|line| line.starts_with(&format!("{field}:")))
        .ok_or("no such field")?;
    Ok(line.split_whitespace().nth(1).ok_or("no value")?.parse()?)
}
