//! Configuration from the environment. Every variable and its default is in `Config::from_env`,
//! and docs/API.md's configuration table mirrors it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::domain::client::{NetworkPrefixes, TrustedProxies};
use crate::domain::entitlement::{DeniedOptions, Entitlements};
use crate::domain::farm::{FarmModel, Weight};
use crate::domain::rate::RateLimit;
use crate::domain::render::Resolution;
use crate::domain::replay::GameMode;

mod sslmode;
pub use sslmode::{resolve_sslmode, split_sslmode, DbSslMode, DEFAULT_DB_SSLMODE};

#[derive(Debug, Clone)]
pub struct Config {
    pub database_url: String,
    /// Connections per instance: 1–2 behind RDS Proxy on Lambda, more for the dev server.
    pub db_pool_size: usize,
    /// Bound on connecting and on each statement, below the function's timeout.
    pub db_timeout: Duration,
    /// TLS to Postgres: `DB_SSLMODE` or `DATABASE_URL`'s `sslmode` (which must agree when both
    /// are set), else the caller's default (`resolve_sslmode`).
    pub db_sslmode: DbSslMode,
    /// `DB_SSLROOTCERT`: a PEM file of CAs trusted besides the compiled-in AWS ones
    /// (verify-full only).
    pub db_sslrootcert: Option<PathBuf>,
    /// Postgres' `lock_timeout` for the migrations (`MIGRATE_LOCK_TIMEOUT`): a migration waiting
    /// behind a long transaction fails instead of holding the deploy (and the table) forever.
    pub migrate_lock_timeout: Duration,
    /// `migrate` gives a run up after this (`MIGRATE_DEADLINE`), and earlier if the invocation
    /// would otherwise end before CloudFormation is answered.
    pub migrate_deadline: Duration,
    /// Every request is answered within this (deadline.rs); on Lambda also before the
    /// invocation's own deadline, less a margin.
    pub request_deadline: Duration,
    pub listen: SocketAddr,
    pub rate_limit_table: String,
    pub rate_limit_fail_open: bool,
    pub replay_bucket: String,
    /// Bound on every AWS call (DynamoDB, S3, SQS), retries included.
    pub aws_timeout: Duration,
    /// A stand-in's endpoint (moto, LocalStack) for every AWS client; `None` on AWS. The SDK
    /// would read `AWS_ENDPOINT_URL` itself, but carried here one process can run servers with
    /// different endpoints (the round-trip budget test routes one through a counting proxy).
    pub aws_endpoint_url: Option<String>,
    pub rate_limits: RateLimits,
    pub max_queued: i64,
    pub max_rendering: i64,
    /// How many jobs the farm renders at once (`RENDER_SLOTS`): jobs are released to the render
    /// queue while fewer than this plus `release_ahead` are released and not finished.
    pub render_slots: i64,
    /// Released jobs beyond the slots (`RELEASE_AHEAD`), so a worker that finishes finds the
    /// next one waiting.
    pub release_ahead: i64,
    /// Added to a replay's length for its expected render time (`RENDER_OVERHEAD_SECS`).
    pub render_overhead: Duration,
    /// Render-seconds one slot renders per second before the farm has rendered `MIN_SAMPLES`
    /// jobs within the hour (`RENDER_SPEED`).
    pub render_speed: f64,
    /// Each anonymous network's share of render time relative to a key of weight 1
    /// (`ANONYMOUS_WEIGHT`).
    pub anonymous_weight: Weight,
    /// A job whose estimated start is later than this is refused `queue_full`
    /// (`MAX_QUEUE_WAIT`; `None`, the default: no such cap).
    pub max_queue_wait: Option<Duration>,
    pub max_active_jobs_per_ip: i64,
    /// An anonymous network's cap on active jobs (`MAX_ACTIVE_PER_NETWORK`): many addresses of
    /// one allocation are one actor.
    pub max_active_per_network: i64,
    /// An anonymous wide network's cap on active jobs (`MAX_ACTIVE_PER_WIDE_NETWORK`): the
    /// networks of one allocation (the /48s of a tunnel broker's /32) are one actor too.
    pub max_active_per_wide_network: i64,
    /// The share of `MAX_QUEUED` anonymous clients together may hold (`ANONYMOUS_QUEUE_SHARE`,
    /// 0 < s <= 1; 1 is no reserve): the rest is kept for API keys.
    pub anonymous_queue_share: f64,
    /// What an anonymous client's renders may ask for (`ANONYMOUS_MAX_RESOLUTION`,
    /// `ANONYMOUS_DENY`); a key has its own.
    pub anonymous_entitlements: Entitlements,
    /// How long an instance keeps a key lookup's answer (keys/lookup.rs): at most
    /// `MAX_KEY_CACHE_TTL`, the issue's bound on a revocation taking effect.
    pub key_cache_ttl: Duration,
    /// How long an instance keeps the operator's policy (pause, bans) before reading it again
    /// (`POLICY_CACHE_TTL`, 1 s to `MAX_POLICY_CACHE_TTL`): a change reaches every instance
    /// within it.
    pub policy_cache_ttl: Duration,
    pub max_replay_bytes: usize,
    /// The game modes the render workers render (`RENDER_MODES`): a replay of another is 422
    /// `unsupported_mode`.
    pub render_modes: RenderModes,
    /// The longest play rendered, in real time (`MAX_REPLAY_LENGTH`); a key may have its own.
    pub max_replay_length: Duration,
    /// A replay whose render failed is refused for this long (`REPLAY_FAILURE_COOLDOWN`;
    /// zero: never refused).
    pub replay_failure_cooldown: Duration,
    pub trusted_proxies: TrustedProxies,
    pub ipv6_prefix_len: u8,
    /// An anonymous client's network (`IPV4_NETWORK_PREFIX`, `IPV6_NETWORK_PREFIX`).
    pub network_prefixes: NetworkPrefixes,
    /// The wider block around it (`IPV4_WIDE_NETWORK_PREFIX`, `IPV6_WIDE_NETWORK_PREFIX`):
    /// whole networks.
    pub wide_network_prefixes: NetworkPrefixes,
    /// The SQS render queue: its URL, or its name to look the URL up by.
    pub render_queue_url: Option<String>,
    pub render_queue_name: String,
    /// The dispatcher's wake queue (`CALLBACK_WAKE_QUEUE_URL`): set, a status change with a
    /// callback wakes the dispatcher through it at once, and a sweep asks to be woken when the
    /// next callback falls due; unset, callbacks wait for the scheduled sweep.
    pub callback_wake_queue_url: Option<String>,
    /// The key render workers sign reports with (`WEBHOOK_SECRET`, or `WEBHOOK_SECRET_ARN` on
    /// AWS); `job-webhook` refuses to start without one.
    pub webhook_secret: Option<SecretSource>,
    /// The value our edge (a Cloudflare Transform Rule) puts in `X-Origin-Secret`
    /// (`CF_ORIGIN_SECRET`, or `CF_ORIGIN_SECRET_ARN`). Set, every request must carry it, checked
    /// before anything else (http.rs); unset, no request is checked.
    pub origin_secret: Option<SecretSource>,
    /// A secret read from Secrets Manager is read again, on a value that matches neither of its
    /// known ones, at most this often: a rotation is learned without a redeploy, and a flood of
    /// wrong values costs one read per interval.
    pub secret_refresh_interval: Duration,
    /// `GET /health` probes the dependencies at most this often per instance (one probe at a
    /// time) and answers from the last probe meanwhile: a flood of health checks costs the
    /// dependencies nothing.
    pub health_check_interval: Duration,
    /// Bucket of uploaded skins (`skins/{name}.osk`, `incoming/…`); the replay bucket by default.
    pub skin_bucket: String,
    /// Direct skin uploads up to this size; larger ones go through a presigned POST.
    pub max_skin_bytes: usize,
    /// Cap of a presigned skin upload (S3 enforces it).
    pub max_skin_upload_bytes: usize,
    /// A job queued longer than this expires.
    pub queued_ttl: Duration,
    /// The janitor deletes a job (with its outbox events and callbacks) once it has ended this
    /// long ago; at
    /// least `MIN_JOB_RETENTION`.
    pub job_retention: Duration,
    /// The expected render time of a job that recorded none (admitted by an earlier release):
    /// what the estimates count it as (domain/farm.rs).
    pub default_render_duration: Duration,
    /// A downloading/rendering job with no webhook progress for this long fails.
    pub render_stall_timeout: Duration,
    /// Outbox publish attempts before an event is marked failed; callback sends too.
    pub outbox_max_attempts: i32,
    /// How long one callback send may take, connection included.
    pub callback_timeout: Duration,
    /// Development only: callbacks may use `http` and reach private and local addresses.
    pub allow_private_callbacks: bool,
    /// Whether the dispatcher can reach the internet (`CALLBACKS_EGRESS`). A deployment whose
    /// dispatcher has no route out sets it false, and a submission with a `callback_url` is
    /// refused (422 `callbacks_unavailable`) rather than accepted and never delivered.
    pub callbacks_egress: bool,
    /// A key's undelivered callbacks past which progress-only ones are not queued (the
    /// dispatcher records it for the database's trigger at each claim).
    pub max_pending_callbacks_per_key: i64,
    /// Bucket the render workers put videos and thumbnails in; the replay bucket by default.
    pub artifact_bucket: String,
    /// Lifetime of the presigned artifact URLs `GET /v1/jobs/{id}` hands out.
    pub artifact_url_ttl: Duration,
    /// Dev server only: how often it sweeps the outbox and runs the janitor (zero: never; on
    /// AWS these are scheduled functions), and whether it plays the render workers.
    pub outbox_sweep_interval: Duration,
    pub janitor_interval: Duration,
    pub simulate_workers: bool,
    /// Dev server only: how often it ingests presigned skin uploads waiting under `incoming/`
    /// (zero: never; on AWS an S3 event invokes the ingest).
    pub skin_ingest_interval: Duration,
    /// The origin (`https://example.com`, or `*`) whose pages may call the API: on Lambda they
    /// may read its answers (CORS; API Gateway answers the preflights), and everywhere only
    /// they may submit renders and uploads from a browser (routes/mod.rs
    /// `check_request_site`). `None`: no CORS headers, and no page submits.
    pub cors_allow_origin: Option<String>,
    /// The live events' WebSocket URL clients are shown (`links.events`); none: not shown.
    pub events_url: Option<String>,
    /// Where clients reach this API (`https://render.example.com`, no trailing slash): every
    /// link (`links.*`, `Location`, a page's `next`) is absolute under it, in answers, callbacks
    /// and live events. None: links are paths (the dev server sets its own address).
    pub public_base_url: Option<PublicBaseUrl>,
    /// Where API Gateway's Management API posts to this deployment's connections; none: no
    /// frames are pushed from this process (the dev server pushes to its own sockets).
    pub events_management_url: Option<String>,
    /// The DynamoDB table of live-event connections and subscriptions.
    pub events_table: String,
}

#[derive(Debug, Clone, Copy)]
pub struct RateLimits {
    pub render: RateLimit,
    /// Renders of all anonymous clients of one network together.
    pub render_network: RateLimit,
    /// Renders of all anonymous clients of one wide network together.
    pub render_wide_network: RateLimit,
    pub skins_upload: RateLimit,
    pub legacy_skins_upload: RateLimit,
    /// Skin uploads (either route) of all anonymous clients of one network together.
    pub skins_upload_network: RateLimit,
    /// The same of one wide network.
    pub skins_upload_wide_network: RateLimit,
    /// The read endpoints (`GET /v1/jobs…`, `GET /v1/skins`): generous, per client.
    pub read: RateLimit,
    /// Key lookups that reach the database (a key not in the instance's cache), per address:
    /// what holds back a flood of made-up keys.
    pub key_lookup: RateLimit,
    /// The same per network (an IPv4 /24 or IPv6 /48), of all its addresses together.
    pub key_lookup_network: RateLimit,
    /// Live-event connections opened per client address (an IPv6 /64).
    pub events_connect: RateLimit,
    /// The same of all addresses of one network together.
    pub events_connect_network: RateLimit,
    /// Frames one live-event connection may send.
    pub events_frames: RateLimit,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{name}: {reason}")]
pub struct ConfigError {
    name: &'static str,
    reason: String,
}

impl Config {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// As `from_env`, with `sslmode` as the TLS mode when neither `DB_SSLMODE` nor
    /// `DATABASE_URL` names one (the dev server's `disable`).
    pub fn from_env_with_sslmode(sslmode: DbSslMode) -> Result<Self, ConfigError> {
        Self::from_lookup_with_sslmode(|name| std::env::var(name).ok(), sslmode)
    }

    /// Reads every setting through `lookup`, so tests can configure without touching the
    /// process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::from_lookup_with_sslmode(lookup, DEFAULT_DB_SSLMODE)
    }

    /// As `from_lookup`, with `default_sslmode` when nothing names a TLS mode.
    pub fn from_lookup_with_sslmode(
        lookup: impl Fn(&str) -> Option<String>,
        default_sslmode: DbSslMode,
    ) -> Result<Self, ConfigError> {
        let env = Env(&lookup);
        let trusted_proxies = match lookup("TRUSTED_PROXY_CIDRS") {
            Some(list) => TrustedProxies::parse(&list).map_err(|e| ConfigError {
                name: "TRUSTED_PROXY_CIDRS",
                reason: e.to_string(),
            })?,
            None => TrustedProxies::cloudflare(),
        };
        let ipv6_prefix_len = env.parse("IPV6_CLIENT_PREFIX", 64u8)?;
        if ipv6_prefix_len > 128 {
            return Err(ConfigError {
                name: "IPV6_CLIENT_PREFIX",
                reason: "must be 0..=128".into(),
            });
        }
        let network_prefixes = NetworkPrefixes {
            ipv4: env.parse("IPV4_NETWORK_PREFIX", 24u8)?,
            ipv6: env.parse("IPV6_NETWORK_PREFIX", 48u8)?,
        };
        if network_prefixes.ipv4 > 32 {
            return Err(ConfigError {
                name: "IPV4_NETWORK_PREFIX",
                reason: "must be 0..=32".into(),
            });
        }
        if network_prefixes.ipv6 > ipv6_prefix_len {
            return Err(ConfigError {
                name: "IPV6_NETWORK_PREFIX",
                reason: "must be 0..=IPV6_CLIENT_PREFIX: a network holds whole clients".into(),
            });
        }
        let wide_network_prefixes = NetworkPrefixes {
            ipv4: env.parse("IPV4_WIDE_NETWORK_PREFIX", 16u8)?,
            ipv6: env.parse("IPV6_WIDE_NETWORK_PREFIX", 32u8)?,
        };
        if wide_network_prefixes.ipv4 > network_prefixes.ipv4 {
            return Err(ConfigError {
                name: "IPV4_WIDE_NETWORK_PREFIX",
                reason: "must be 0..=IPV4_NETWORK_PREFIX: a wide network holds whole networks"
                    .into(),
            });
        }
        if wide_network_prefixes.ipv6 > network_prefixes.ipv6 {
            return Err(ConfigError {
                name: "IPV6_WIDE_NETWORK_PREFIX",
                reason: "must be 0..=IPV6_NETWORK_PREFIX: a wide network holds whole networks"
                    .into(),
            });
        }
        let anonymous_queue_share = env.parse("ANONYMOUS_QUEUE_SHARE", 1.0f64)?;
        if !(anonymous_queue_share > 0.0 && anonymous_queue_share <= 1.0) {
            return Err(ConfigError {
                name: "ANONYMOUS_QUEUE_SHARE",
                reason: "must be more than 0 and at most 1".into(),
            });
        }
        let max_queued: i64 = env.parse("MAX_QUEUED", 100)?;
        if max_queued > 0 && (max_queued as f64 * anonymous_queue_share) < 1.0 {
            // Rounded down, the share would be no place at all: every anonymous render a 503.
            return Err(ConfigError {
                name: "ANONYMOUS_QUEUE_SHARE",
                reason: "times MAX_QUEUED is less than one place".into(),
            });
        }
        let render_slots: i64 = env.parse("RENDER_SLOTS", 16)?;
        let release_ahead: i64 = env.parse("RELEASE_AHEAD", 2)?;
        if !(1..=10_000).contains(&render_slots) {
            return Err(ConfigError {
                name: "RENDER_SLOTS",
                reason: "must be 1..=10000".into(),
            });
        }
        if !(0..=10_000).contains(&release_ahead) {
            return Err(ConfigError {
                name: "RELEASE_AHEAD",
                reason: "must be 0..=10000".into(),
            });
        }
        let render_speed: f64 = env.parse("RENDER_SPEED", 1.0)?;
        if !(render_speed > 0.0 && render_speed <= 10_000.0) {
            return Err(ConfigError {
                name: "RENDER_SPEED",
                reason: "must be more than 0 and at most 10000".into(),
            });
        }
        let anonymous_weight =
            Weight::new(env.parse("ANONYMOUS_WEIGHT", 1u32)?).map_err(|reason| ConfigError {
                name: "ANONYMOUS_WEIGHT",
                reason,
            })?;
        let max_queue_wait = match env.parse::<Seconds>("MAX_QUEUE_WAIT", Seconds(0))? {
            Seconds(0) => None,
            wait => Some(wait.into()),
        };
        let job_retention: Duration = env
            .parse::<Seconds>("JOB_RETENTION", Seconds(30 * 86_400))?
            .into();
        if job_retention < MIN_JOB_RETENTION {
            return Err(ConfigError {
                name: "JOB_RETENTION",
                reason: "must be at least 1d: idempotency keys and admission fences refer to a \
                         job for a day"
                    .into(),
            });
        }
        let key_cache_ttl: Duration = env
            .parse::<Seconds>("API_KEY_CACHE_TTL", Seconds(30))?
            .into();
        if key_cache_ttl > MAX_KEY_CACHE_TTL {
            return Err(ConfigError {
                name: "API_KEY_CACHE_TTL",
                reason: "must be at most 60s: a revoked key must stop working within a minute"
                    .into(),
            });
        }
        let policy_cache_ttl: Duration = env
            .parse::<Seconds>("POLICY_CACHE_TTL", Seconds(30))?
            .into();
        if policy_cache_ttl.is_zero() || policy_cache_ttl > MAX_POLICY_CACHE_TTL {
            return Err(ConfigError {
                name: "POLICY_CACHE_TTL",
                reason: "must be 1s to 300s: a pause or a ban must reach every instance within \
                         minutes"
                    .into(),
            });
        }
        let callback_timeout = Duration::from_millis(env.parse("CALLBACK_TIMEOUT_MS", 5_000)?);
        if callback_timeout.is_zero() || callback_timeout > MAX_CALLBACK_TIMEOUT {
            return Err(ConfigError {
                name: "CALLBACK_TIMEOUT_MS",
                reason: "must be 1 to 20000: a dispatcher run sends several rounds of callbacks \
                         within its 50 s"
                    .into(),
            });
        }
        let max_pending_callbacks_per_key = env.parse("MAX_PENDING_CALLBACKS_PER_KEY", 1_000)?;
        if max_pending_callbacks_per_key < 1 {
            return Err(ConfigError {
                name: "MAX_PENDING_CALLBACKS_PER_KEY",
                reason: "must be at least 1".into(),
            });
        }
        let replay_bucket = env.string("REPLAY_BUCKET", "osurender-replays");
        // Empty counts as unset: `sam local` passes the template's declared-but-empty one.
        let database_url = lookup("DATABASE_URL")
            .filter(|url| !url.is_empty())
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/osurender".into());
        let db_sslmode = resolve_sslmode(
            lookup("DB_SSLMODE").as_deref(),
            &split_sslmode(&database_url).1,
            default_sslmode,
        )?;
        let migrate_lock_timeout: Duration = env
            .parse::<Seconds>("MIGRATE_LOCK_TIMEOUT", Seconds(10))?
            .into();
        let migrate_deadline: Duration = env
            .parse::<Seconds>("MIGRATE_DEADLINE", Seconds(40))?
            .into();
        for (name, value) in [
            ("MIGRATE_LOCK_TIMEOUT", migrate_lock_timeout),
            ("MIGRATE_DEADLINE", migrate_deadline),
        ] {
            // Zero is Postgres' "wait forever" for lock_timeout, and no time at all for a run.
            if value.is_zero() {
                return Err(ConfigError {
                    name,
                    reason: "must be at least 1s".into(),
                });
            }
        }
        let db_sslrootcert = lookup("DB_SSLROOTCERT")
            .filter(|path| !path.is_empty())
            .map(PathBuf::from);
        if db_sslrootcert.is_some() && db_sslmode != DbSslMode::VerifyFull {
            // libpq would verify the chain under `require` then; here it would do nothing.
            return Err(ConfigError {
                name: "DB_SSLROOTCERT",
                reason: "is only read with verify-full".into(),
            });
        }
        Ok(Self {
            database_url,
            db_pool_size: env.parse("DB_POOL_SIZE", 2)?,
            db_timeout: Duration::from_millis(env.parse("DB_TIMEOUT_MS", 5_000)?),
            db_sslmode,
            db_sslrootcert,
            migrate_lock_timeout,
            migrate_deadline,
            request_deadline: Duration::from_millis(env.parse("REQUEST_DEADLINE_MS", 10_000)?),
            listen: env.parse("OSURENDER_LISTEN", SocketAddr::from(([127, 0, 0, 1], 3000)))?,
            rate_limit_table: env.string("RATE_LIMIT_TABLE", "osurender-rate-limits"),
            rate_limit_fail_open: env.parse("RATE_LIMIT_FAIL_OPEN", false)?,
            aws_timeout: Duration::from_millis(env.parse("AWS_TIMEOUT_MS", 5_000)?),
            aws_endpoint_url: lookup("AWS_ENDPOINT_URL").filter(|url| !url.is_empty()),
            rate_limits: RateLimits {
                render: env.parse("RATE_LIMIT_RENDER", limit("5/minute"))?,
                render_network: env.parse("RATE_LIMIT_RENDER_NETWORK", limit("20/minute"))?,
                render_wide_network: env
                    .parse("RATE_LIMIT_RENDER_WIDE_NETWORK", limit("60/minute"))?,
                skins_upload: env.parse("RATE_LIMIT_SKINS_UPLOAD", limit("2/minute"))?,
                legacy_skins_upload: env
                    .parse("RATE_LIMIT_LEGACY_SKINS_UPLOAD", limit("5/minute"))?,
                skins_upload_network: env
                    .parse("RATE_LIMIT_SKINS_UPLOAD_NETWORK", limit("10/minute"))?,
                skins_upload_wide_network: env
                    .parse("RATE_LIMIT_SKINS_UPLOAD_WIDE_NETWORK", limit("30/minute"))?,
                read: env.parse("RATE_LIMIT_READ", limit("120/minute"))?,
                key_lookup: env.parse("RATE_LIMIT_KEY_LOOKUP", limit("30/minute"))?,
                key_lookup_network: env
                    .parse("RATE_LIMIT_KEY_LOOKUP_NETWORK", limit("120/minute"))?,
                events_connect: env.parse("RATE_LIMIT_EVENTS_CONNECT", limit("10/minute"))?,
                events_connect_network: env
                    .parse("RATE_LIMIT_EVENTS_CONNECT_NETWORK", limit("40/minute"))?,
                events_frames: env.parse("RATE_LIMIT_EVENTS_FRAMES", limit("5/second"))?,
            },
            max_queued,
            max_rendering: env.parse("MAX_RENDERING", 20)?,
            render_slots,
            release_ahead,
            render_overhead: env
                .parse::<Seconds>("RENDER_OVERHEAD_SECS", Seconds(20))?
                .into(),
            render_speed,
            anonymous_weight,
            max_queue_wait,
            max_active_jobs_per_ip: env.parse("MAX_ACTIVE_JOBS_PER_IP", 2)?,
            max_active_per_network: env.parse("MAX_ACTIVE_PER_NETWORK", 8)?,
            max_active_per_wide_network: env.parse("MAX_ACTIVE_PER_WIDE_NETWORK", 24)?,
            anonymous_queue_share,
            anonymous_entitlements: Entitlements {
                max_resolution: env
                    .parse("ANONYMOUS_MAX_RESOLUTION", MaxResolution(None))?
                    .0,
                denied: env.parse("ANONYMOUS_DENY", DeniedOptions::default())?,
            },
            key_cache_ttl,
            policy_cache_ttl,
            max_replay_bytes: env.parse("MAX_REPLAY_BYTES", 4 * 1024 * 1024)?,
            render_modes: env.parse("RENDER_MODES", RenderModes(vec![GameMode::Std]))?,
            max_replay_length: env
                .parse::<Seconds>("MAX_REPLAY_LENGTH", Seconds(900))?
                .into(),
            replay_failure_cooldown: env
                .parse::<Seconds>("REPLAY_FAILURE_COOLDOWN", Seconds(3600))?
                .into(),
            trusted_proxies,
            ipv6_prefix_len,
            network_prefixes,
            wide_network_prefixes,
            render_queue_url: lookup("RENDER_QUEUE_URL").filter(|url| !url.is_empty()),
            render_queue_name: env.string("RENDER_QUEUE_NAME", "osurender-render-jobs"),
            callback_wake_queue_url: lookup("CALLBACK_WAKE_QUEUE_URL")
                .filter(|url| !url.is_empty()),
            webhook_secret: SecretSource::from_lookup(&lookup, "WEBHOOK_SECRET")?,
            origin_secret: SecretSource::from_lookup(&lookup, "CF_ORIGIN_SECRET")?,
            secret_refresh_interval: env
                .parse::<Seconds>("SECRET_REFRESH_INTERVAL", Seconds(30))?
                .into(),
            health_check_interval: env
                .parse::<Seconds>("HEALTH_CHECK_INTERVAL", Seconds(10))?
                .into(),
            skin_bucket: lookup("SKIN_BUCKET").unwrap_or_else(|| replay_bucket.clone()),
            max_skin_bytes: env.parse("MAX_SKIN_BYTES", 4 * 1024 * 1024)?,
            max_skin_upload_bytes: env.parse("MAX_SKIN_UPLOAD_BYTES", 200 * 1024 * 1024)?,
            queued_ttl: env
                .parse::<Seconds>("QUEUED_TTL", Seconds(6 * 3600))?
                .into(),
            job_retention,
            default_render_duration: env
                .parse::<Seconds>("DEFAULT_RENDER_SECS", Seconds(120))?
                .into(),
            render_stall_timeout: env
                .parse::<Seconds>("RENDER_STALL_TIMEOUT", Seconds(900))?
                .into(),
            outbox_max_attempts: env.parse("OUTBOX_MAX_ATTEMPTS", 10)?,
            callback_timeout,
            allow_private_callbacks: env.parse::<Flag>("ALLOW_PRIVATE_CALLBACKS", Flag(false))?.0,
            callbacks_egress: env.parse::<Flag>("CALLBACKS_EGRESS", Flag(true))?.0,
            max_pending_callbacks_per_key,
            artifact_bucket: lookup("ARTIFACT_BUCKET").unwrap_or_else(|| replay_bucket.clone()),
            artifact_url_ttl: env
                .parse::<Seconds>("ARTIFACT_URL_TTL", Seconds(900))?
                .into(),
            outbox_sweep_interval: env
                .parse::<Seconds>("OUTBOX_SWEEP_INTERVAL", Seconds(5))?
                .into(),
            janitor_interval: env
                .parse::<Seconds>("JANITOR_INTERVAL", Seconds(30))?
                .into(),
            simulate_workers: env.parse::<Flag>("SIMULATE_WORKERS", Flag(false))?.0,
            skin_ingest_interval: env
                .parse::<Seconds>("SKIN_INGEST_INTERVAL", Seconds(5))?
                .into(),
            cors_allow_origin: lookup("CORS_ALLOW_ORIGIN").filter(|origin| !origin.is_empty()),
            events_url: lookup("EVENTS_URL").filter(|url| !url.is_empty()),
            public_base_url: match lookup("PUBLIC_BASE_URL").filter(|url| !url.trim().is_empty()) {
                None => None,
                Some(url) => Some(url.parse().map_err(|reason| ConfigError {
                    name: "PUBLIC_BASE_URL",
                    reason,
                })?),
            },
            events_management_url: lookup("EVENTS_MANAGEMENT_URL").filter(|url| !url.is_empty()),
            events_table: env.string("EVENTS_TABLE", "osurender-events"),
            replay_bucket,
        })
    }
}

impl Config {
    /// The farm the estimates model.
    pub fn farm(&self) -> FarmModel {
        FarmModel {
            slots: self.render_slots,
            default_speed: self.render_speed,
            unknown_cost: self.default_render_duration.as_secs_f64(),
        }
    }

    /// Whether the farm may hold `MAX_RENDERING` jobs downloading or rendering: then step 6's
    /// breaker trips on a farm that holds only what it was given, and admission refuses while
    /// the queue could wait (logged as a warning at start).
    pub fn farm_reaches_breaker(&self) -> bool {
        self.render_slots + self.release_ahead >= self.max_rendering
    }

    /// How many queued jobs anonymous clients together may hold: `ANONYMOUS_QUEUE_SHARE` of
    /// `MAX_QUEUED`, rounded down.
    pub fn max_anonymous_queued(&self) -> i64 {
        (self.max_queued as f64 * self.anonymous_queue_share).floor() as i64
    }
}

/// A stored response (idempotency keys live `KEY_TTL`, a day) and an admission fence (kept a
/// day, longer than any statement is in flight) may name a job for a day after it was made: it
/// must not be deleted before, or a retry would be sent to a job that is gone, or an unknown
/// admission resolved as never made.
pub const MIN_JOB_RETENTION: Duration = Duration::from_secs(86_400);
/// A shorter shared secret could be guessed (or brute-forced from one signed report).
pub const MIN_SECRET_BYTES: usize = 16;

/// Where a shared secret comes from: the environment (`{NAME}`, and `{NAME}_PREVIOUS` while a
/// rotation is under way), or a Secrets Manager secret (`{NAME}_ARN`) whose `AWSCURRENT` and
/// `AWSPREVIOUS` versions are both accepted, so rotating it needs no redeploy.
#[derive(Clone, PartialEq, Eq)]
pub enum SecretSource {
    Fixed {
        current: String,
        previous: Option<String>,
    },
    /// The secret's ARN (or name).
    Stored(String),
}

impl SecretSource {
    /// `None` when neither `{name}` nor `{name}_ARN` is set (empty counts as unset).
    fn from_lookup(
        lookup: &dyn Fn(&str) -> Option<String>,
        name: &'static str,
    ) -> Result<Option<Self>, ConfigError> {
        let set = |suffix: &str| lookup(&format!("{name}{suffix}")).filter(|v| !v.is_empty());
        let error = |reason: String| ConfigError { name, reason };
        let too_short = |value: &String| value.len() < MIN_SECRET_BYTES;
        match (set(""), set("_PREVIOUS"), set("_ARN")) {
            (None, None, None) => Ok(None),
            (None, None, Some(arn)) => Ok(Some(Self::Stored(arn))),
            (Some(_), _, Some(_)) | (None, Some(_), Some(_)) => Err(error(format!(
                "set either {name} (and {name}_PREVIOUS) or {name}_ARN, not both"
            ))),
            (None, Some(_), None) => Err(error(format!("{name}_PREVIOUS is set without {name}"))),
            (Some(current), previous, None) => {
                if too_short(&current) || previous.as_ref().is_some_and(too_short) {
                    return Err(error(format!("must be at least {MIN_SECRET_BYTES} bytes")));
                }
                Ok(Some(Self::Fixed { current, previous }))
            }
        }
    }
}

/// Never prints a value: the configuration may be logged.
impl std::fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fixed { previous, .. } => f
                .debug_struct("Fixed")
                .field("previous", &previous.is_some())
                .finish_non_exhaustive(),
            Self::Stored(arn) => f.debug_tuple("Stored").field(arn).finish(),
        }
    }
}

/// The longest a key lookup's answer may be kept: a revocation takes effect within it.
pub const MAX_KEY_CACHE_TTL: Duration = Duration::from_secs(60);

/// The longest an instance may keep the operator's policy (`POLICY_CACHE_TTL`).
pub const MAX_POLICY_CACHE_TTL: Duration = Duration::from_secs(300);

/// Shortest outbox lease: ample for one concurrent round of SQS calls and the marking statement.
pub const MIN_LEASE: Duration = Duration::from_secs(30);
/// The longest `CALLBACK_TIMEOUT_MS`.
pub const MAX_CALLBACK_TIMEOUT: Duration = Duration::from_secs(20);

/// At most this part of a request's deadline is kept for settling a write whose answer was
/// lost (a third: the write itself still gets the rest).
const SETTLE_SHARE_OF_DEADLINE: u32 = 3;

/// An `http(s)://host[:port][/prefix]` URL that links are made absolute under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicBaseUrl(String);

impl FromStr for PublicBaseUrl {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let url = text.trim().trim_end_matches('/');
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))
            .ok_or_else(|| format!("`{text}`: expected an http(s):// URL"))?;
        let host = rest.split('/').next().unwrap_or_default();
        if host.is_empty() || url.contains(['?', '#', ' ']) {
            return Err(format!(
                "`{text}`: expected a scheme, a host and at most a path"
            ));
        }
        Ok(Self(url.to_owned()))
    }
}

impl PublicBaseUrl {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Config {
    /// `path` (`/v1/jobs/…`) as clients are shown it: absolute under `PUBLIC_BASE_URL`, or as
    /// it is without one.
    pub fn link(&self, path: &str) -> String {
        match &self.public_base_url {
            Some(base) if path.starts_with('/') => format!("{}{path}", base.as_str()),
            _ => path.to_owned(),
        }
    }

    /// What a write leaves of the request's deadline for settling its outcome if no answer
    /// comes: one `settle_call` (bounded as it is), at most a third of the deadline.
    pub fn settle_reserve(&self, settle_call: Duration) -> Duration {
        settle_call.min(self.request_deadline / SETTLE_SHARE_OF_DEADLINE)
    }

    /// How long a publisher owns an event it took: longer than its slowest SQS call (each bounded
    /// by `AWS_TIMEOUT_MS`) plus the statement that marks it, so a live publisher never loses an
    /// event to a second one.
    pub fn event_lease(&self) -> Duration {
        (3 * self.aws_timeout.max(self.db_timeout)).max(MIN_LEASE)
    }

    /// How long a dispatcher owns a callback it took: as `event_lease`, for a send bounded by
    /// `CALLBACK_TIMEOUT_MS` (its lookup included).
    pub fn callback_lease(&self) -> Duration {
        (3 * self.callback_timeout.max(self.db_timeout)).max(MIN_LEASE)
    }
}

fn limit(text: &str) -> RateLimit {
    text.parse().expect("built-in limits are valid")
}

/// A duration in seconds, or with a unit: `900`, `90s`, `15m`, `6h`, `1d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seconds(u64);

impl FromStr for Seconds {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (digits, unit) = text.split_at(
            text.find(|c: char| !c.is_ascii_digit())
                .unwrap_or(text.len()),
        );
        let scale = match unit.trim() {
            "" | "s" => 1,
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            _ => return Err("expected seconds, or a number with s, m, h or d".into()),
        };
        digits
            .parse::<u64>()
            .map(|n| Seconds(n * scale))
            .map_err(|e| e.to_string())
    }
}

impl From<Seconds> for Duration {
    fn from(secs: Seconds) -> Self {
        Duration::from_secs(secs.0)
    }
}

/// `RENDER_MODES`: a comma-separated list of modes as osu!'s API names them, none twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderModes(Vec<GameMode>);

impl RenderModes {
    pub fn renders(&self, mode: GameMode) -> bool {
        self.0.contains(&mode)
    }

    /// The modes, as the configuration names them.
    pub fn names(&self) -> String {
        let names: Vec<_> = self.0.iter().map(|mode| mode.as_str()).collect();
        names.join(", ")
    }
}

impl FromStr for RenderModes {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut modes = Vec::new();
        for name in text.split(',').map(str::trim) {
            let mode: GameMode = name.parse()?;
            if modes.contains(&mode) {
                return Err(format!("`{name}` is listed twice"));
            }
            modes.push(mode);
        }
        Ok(Self(modes))
    }
}

/// `ANONYMOUS_MAX_RESOLUTION`: a resolution, or empty for any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MaxResolution(Option<Resolution>);

impl FromStr for MaxResolution {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "" => Ok(Self(None)),
            name => Resolution::parse(name)
                .map(|resolution| Self(Some(resolution)))
                .map_err(|_| format!("expected one of {}, or empty", Resolution::NAMES)),
        }
    }
}

/// A switch: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Flag(bool);

impl FromStr for Flag {
    type Err = &'static str;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(Flag(true)),
            "0" | "false" | "no" | "off" => Ok(Flag(false)),
            _ => Err("expected 1/0, true/false, yes/no or on/off"),
        }
    }
}

struct Env<'a>(&'a dyn Fn(&str) -> Option<String>);

impl Env<'_> {
    fn string(&self, name: &str, default: &str) -> String {
        (self.0)(name).unwrap_or_else(|| default.to_owned())
    }

    fn parse<T>(&self, name: &'static str, default: T) -> Result<T, ConfigError>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        match (self.0)(name) {
            None => Ok(default),
            Some(raw) => raw.trim().parse().map_err(|e: T::Err| ConfigError {
                name,
                reason: format!("`{raw}`: {e}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|name| vars.get(name).cloned())
    }

    #[test]
    fn defaults_apply() {
        let c = config(&[]).unwrap();
        assert_eq!(c.max_queued, 100);
        assert_eq!(c.max_rendering, 20);
        assert_eq!(c.max_active_jobs_per_ip, 2);
        assert_eq!(c.max_replay_bytes, 4 * 1024 * 1024);
        assert_eq!(c.rate_limits.render.requests, 5);
        assert_eq!(c.trusted_proxies, TrustedProxies::cloudflare());
    }

    #[test]
    fn the_farm_defaults_below_the_breaker_and_is_validated() {
        let c = config(&[]).unwrap();
        assert_eq!((c.render_slots, c.release_ahead), (16, 2));
        assert_eq!(c.render_overhead, Duration::from_secs(20));
        assert_eq!((c.render_speed, c.anonymous_weight.get()), (1.0, 1));
        assert_eq!(c.max_queue_wait, None);
        assert!(
            !c.farm_reaches_breaker(),
            "a waiting queue is never refused by default"
        );
        let c = config(&[("RENDER_SLOTS", "19"), ("RELEASE_AHEAD", "1")]).unwrap();
        assert!(c.farm_reaches_breaker(), "it starts, with a warning");
        let c = config(&[("MAX_QUEUE_WAIT", "10m"), ("ANONYMOUS_WEIGHT", "3")]).unwrap();
        assert_eq!(c.max_queue_wait, Some(Duration::from_secs(600)));
        assert_eq!(c.anonymous_weight.get(), 3);
        for (name, value) in [
            ("RENDER_SLOTS", "0"),
            ("RELEASE_AHEAD", "-1"),
            ("RENDER_SPEED", "0"),
            ("RENDER_SPEED", "NaN"),
            ("ANONYMOUS_WEIGHT", "0"),
            ("ANONYMOUS_WEIGHT", "1001"),
            ("MAX_QUEUE_WAIT", "soon"),
        ] {
            assert!(config(&[(name, value)]).is_err(), "{name}={value}");
        }
    }

    #[test]
    fn network_limits_default_and_are_bounded() {
        let c = config(&[]).unwrap();
        assert_eq!(c.network_prefixes, NetworkPrefixes { ipv4: 24, ipv6: 48 });
        assert_eq!(c.max_active_per_network, 8);
        assert_eq!(c.rate_limits.render_network.to_string(), "20/minute");
        assert_eq!(
            c.wide_network_prefixes,
            NetworkPrefixes { ipv4: 16, ipv6: 32 }
        );
        assert_eq!(c.max_active_per_wide_network, 24);
        assert_eq!(c.rate_limits.render_wide_network.to_string(), "60/minute");
        assert_eq!(c.rate_limits.skins_upload_network.to_string(), "10/minute");
        assert_eq!(
            c.rate_limits.skins_upload_wide_network.to_string(),
            "30/minute"
        );
        assert_eq!(c.anonymous_queue_share, 1.0);
        assert_eq!(c.max_anonymous_queued(), c.max_queued);
        let c = config(&[("ANONYMOUS_QUEUE_SHARE", "0.5"), ("MAX_QUEUED", "41")]).unwrap();
        assert_eq!(c.max_anonymous_queued(), 20);
        let too_small = config(&[("ANONYMOUS_QUEUE_SHARE", "0.009")]).unwrap_err();
        assert!(
            too_small.to_string().contains("less than one place"),
            "{too_small}"
        );
        for (name, value) in [
            ("ANONYMOUS_QUEUE_SHARE", "0"),
            ("ANONYMOUS_QUEUE_SHARE", "1.5"),
            ("ANONYMOUS_QUEUE_SHARE", "NaN"),
            ("IPV4_NETWORK_PREFIX", "33"),
            ("IPV6_NETWORK_PREFIX", "65"),
            // A wide network holds whole networks.
            ("IPV4_WIDE_NETWORK_PREFIX", "25"),
            ("IPV6_WIDE_NETWORK_PREFIX", "49"),
        ] {
            assert!(config(&[(name, value)]).is_err(), "{name}={value}");
        }
        let c = config(&[("IPV6_CLIENT_PREFIX", "56"), ("IPV6_NETWORK_PREFIX", "40")]).unwrap();
        assert_eq!(c.network_prefixes.ipv6, 40);
        let narrower = [
            ("IPV4_NETWORK_PREFIX", "20"),
            ("IPV4_WIDE_NETWORK_PREFIX", "24"),
        ];
        assert!(
            config(&narrower).is_err(),
            "the wide prefix follows the network's"
        );
        let c = config(&[
            ("IPV4_WIDE_NETWORK_PREFIX", "24"),
            ("IPV6_WIDE_NETWORK_PREFIX", "48"),
        ]);
        assert_eq!(
            c.unwrap().wide_network_prefixes,
            NetworkPrefixes { ipv4: 24, ipv6: 48 },
            "a wide network may be the network itself"
        );
    }

    #[test]
    fn overrides_and_errors() {
        let c = config(&[("MAX_QUEUED", "8"), ("TRUSTED_PROXY_CIDRS", "")]).unwrap();
        assert_eq!(c.max_queued, 8);
        assert_eq!(c.trusted_proxies, TrustedProxies::default());
        assert!(config(&[("MAX_QUEUED", "lots")]).is_err());
        assert!(config(&[("RATE_LIMIT_RENDER", "5/fortnight")]).is_err());
        assert!(config(&[("IPV6_CLIENT_PREFIX", "200")]).is_err());
        let c = config(&[("QUEUED_TTL", "2h"), ("RENDER_STALL_TIMEOUT", "90")]).unwrap();
        assert_eq!(c.queued_ttl, Duration::from_secs(7200));
        assert_eq!(c.render_stall_timeout, Duration::from_secs(90));
        assert!(config(&[("QUEUED_TTL", "2 weeks")]).is_err());
        assert_eq!(config(&[]).unwrap().job_retention.as_secs(), 30 * 86_400);
        let c = config(&[("JOB_RETENTION", "7d")]).unwrap();
        assert_eq!(c.job_retention, Duration::from_secs(7 * 86_400));
        assert_eq!(
            config(&[("JOB_RETENTION", "1d")]).unwrap().job_retention,
            MIN_JOB_RETENTION
        );
        for short in ["23h", "60", "0"] {
            let error = config(&[("JOB_RETENTION", short)]).unwrap_err();
            assert!(error.to_string().starts_with("JOB_RETENTION"), "{error}");
        }
        assert_eq!(config(&[]).unwrap().key_cache_ttl, Duration::from_secs(30));
        assert_eq!(
            config(&[("API_KEY_CACHE_TTL", "1m")])
                .unwrap()
                .key_cache_ttl,
            MAX_KEY_CACHE_TTL
        );
        let error = config(&[("API_KEY_CACHE_TTL", "61")]).unwrap_err();
        assert!(
            error.to_string().starts_with("API_KEY_CACHE_TTL"),
            "{error}"
        );
        assert_eq!(
            config(&[]).unwrap().policy_cache_ttl,
            Duration::from_secs(30)
        );
        let ttl = |value| config(&[("POLICY_CACHE_TTL", value)]).map(|c| c.policy_cache_ttl);
        assert_eq!(ttl("5m").unwrap(), MAX_POLICY_CACHE_TTL);
        assert_eq!(ttl("1").unwrap(), Duration::from_secs(1));
        for wrong in ["0", "301", "soon"] {
            let error = ttl(wrong).unwrap_err();
            assert!(error.to_string().starts_with("POLICY_CACHE_TTL"), "{error}");
        }
        assert_eq!(config(&[]).unwrap().rate_limits.key_lookup.requests, 30);
        let network = config(&[]).unwrap().rate_limits.key_lookup_network;
        assert_eq!(network.to_string(), "120/minute");
        assert_eq!(config(&[("REPLAY_BUCKET", "r")]).unwrap().skin_bucket, "r");
        assert_eq!(
            config(&[("REPLAY_BUCKET", "r")]).unwrap().artifact_bucket,
            "r"
        );
    }

    #[test]
    fn database_tls_settings() {
        let c = config(&[]).unwrap();
        assert_eq!(c.db_sslmode, DbSslMode::VerifyFull);
        assert_eq!(c.db_sslrootcert, None);
        let c = config(&[
            ("DB_SSLMODE", "verify-full"),
            ("DB_SSLROOTCERT", "/etc/ca.pem"),
        ])
        .unwrap();
        assert_eq!(c.db_sslmode, DbSslMode::VerifyFull);
        assert_eq!(c.db_sslrootcert, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(
            config(&[("DB_SSLMODE", "require")]).unwrap().db_sslmode,
            DbSslMode::Require
        );
        for unknown in ["prefer", "allow", "verify-ca", "VERIFY-FULL", "on", ""] {
            let error = config(&[("DB_SSLMODE", unknown)]).unwrap_err().to_string();
            assert!(error.starts_with("DB_SSLMODE: "), "{unknown}: {error}");
        }
        let error = config(&[("DB_SSLMODE", "require"), ("DB_SSLROOTCERT", "/ca.pem")])
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("DB_SSLROOTCERT: "), "{error}");
        // The URL's verify-full lets DB_SSLROOTCERT be read.
        let url = "postgres://u@db.example/osurender?sslmode=verify-full";
        let c = config(&[("DATABASE_URL", url), ("DB_SSLROOTCERT", "/ca.pem")]).unwrap();
        assert_eq!(c.db_sslmode, DbSslMode::VerifyFull);
        // The dev server's default applies only when nothing names a mode.
        let dev = |vars: &[(&str, &str)]| {
            let vars: HashMap<&str, &str> = vars.iter().copied().collect();
            Config::from_lookup_with_sslmode(
                |name| vars.get(name).map(|v| v.to_string()),
                DbSslMode::Disable,
            )
        };
        assert_eq!(dev(&[]).unwrap().db_sslmode, DbSslMode::Disable);
        let required = "postgres://u@127.0.0.1/osurender?sslmode=require";
        assert_eq!(
            dev(&[("DATABASE_URL", required)]).unwrap().db_sslmode,
            DbSslMode::Require
        );
    }

    /// Every row of the table docs/API.md's `DB_SSLMODE` documents.
    #[test]
    fn the_tls_mode_is_never_weaker_than_asked() {
        use DbSslMode::{Disable, Require, VerifyFull};
        let url = |mode: &str| vec![mode.to_owned()];
        let resolve =
            |setting: Option<&str>, in_url: &[String]| resolve_sslmode(setting, in_url, VerifyFull);
        // Neither: the default.
        assert_eq!(resolve(None, &[]), Ok(VerifyFull));
        assert_eq!(resolve_sslmode(None, &[], Disable), Ok(Disable));
        // One of them: that one, whatever the default.
        for (text, mode) in [
            ("disable", Disable),
            ("require", Require),
            ("verify-full", VerifyFull),
        ] {
            assert_eq!(resolve(Some(text), &[]), Ok(mode), "DB_SSLMODE={text}");
            assert_eq!(resolve(None, &url(text)), Ok(mode), "sslmode={text}");
            assert_eq!(resolve_sslmode(None, &url(text), Disable), Ok(mode));
            // Both, alike.
            assert_eq!(resolve(Some(text), &url(text)), Ok(mode));
        }
        // Both, different: refused, naming both, in either direction.
        for (setting, in_url) in [
            ("disable", "require"),
            ("require", "disable"),
            ("require", "verify-full"),
            ("verify-full", "disable"),
        ] {
            let error = resolve(Some(setting), &url(in_url))
                .unwrap_err()
                .to_string();
            assert!(error.starts_with("DB_SSLMODE: "), "{error}");
            assert!(error.contains(setting) && error.contains(in_url), "{error}");
            assert!(error.contains("DATABASE_URL"), "{error}");
        }
        // Modes that could fall back to plain text, or would be a guess: refused from either.
        for text in ["allow", "prefer", "verify-ca", "bogus"] {
            let error = resolve(None, &url(text)).unwrap_err().to_string();
            assert!(error.starts_with("DATABASE_URL: "), "{error}");
            assert!(error.contains(text), "{error}");
            let error = resolve(Some(text), &[]).unwrap_err().to_string();
            assert!(error.starts_with("DB_SSLMODE: "), "{error}");
        }
        let error = resolve(Some("require"), &url("prefer")).unwrap_err();
        assert!(error.to_string().contains("plain text"), "{error}");
        // A URL that says it twice must say the same.
        assert_eq!(
            resolve(None, &[url("require"), url("require")].concat()),
            Ok(Require)
        );
        let twice = [url("require"), url("disable")].concat();
        assert!(resolve(None, &twice).is_err());
    }

    #[test]
    fn sslmode_is_read_from_either_form_of_the_url() {
        let split = |url: &str| {
            let (rest, modes) = split_sslmode(url);
            (rest, modes.join("|"))
        };
        let owned = |rest: &str, modes: &str| (rest.to_owned(), modes.to_owned());
        assert_eq!(
            split("postgres://u@h:5432/db"),
            owned("postgres://u@h:5432/db", "")
        );
        assert_eq!(
            split("postgres://u@h/db?sslmode=require"),
            owned("postgres://u@h/db", "require")
        );
        assert_eq!(
            split("postgresql://u@h/db?connect_timeout=3&sslmode=verify-full&application_name=x"),
            owned(
                "postgresql://u@h/db?connect_timeout=3&application_name=x",
                "verify-full"
            )
        );
        assert_eq!(
            split("host=h user=u sslmode=require dbname=db"),
            owned("host=h user=u dbname=db", "require")
        );
        assert_eq!(
            split("host=h sslmode = 'verify-full' password='a b\\'c'"),
            owned("host=h password='a b\\'c'", "verify-full")
        );
        assert_eq!(split("host=h dbname=db"), owned("host=h dbname=db", ""));
        // The rest is what tokio-postgres parses.
        let (rest, _) = split_sslmode("host=h sslmode=verify-full password='a b\\'c'");
        let pg: tokio_postgres::Config = rest.parse().unwrap();
        assert_eq!(pg.get_password(), Some(&b"a b'c"[..]));
    }

    #[test]
    fn migration_bounds() {
        let c = config(&[]).unwrap();
        assert_eq!(c.migrate_lock_timeout, Duration::from_secs(10));
        assert_eq!(c.migrate_deadline, Duration::from_secs(40));
        let c = config(&[("MIGRATE_LOCK_TIMEOUT", "2"), ("MIGRATE_DEADLINE", "2m")]).unwrap();
        assert_eq!(c.migrate_lock_timeout, Duration::from_secs(2));
        assert_eq!(c.migrate_deadline, Duration::from_secs(120));
        for name in ["MIGRATE_LOCK_TIMEOUT", "MIGRATE_DEADLINE"] {
            for bad in ["0", "0s", "soon"] {
                let error = config(&[(name, bad)]).unwrap_err().to_string();
                assert!(error.starts_with(&format!("{name}: ")), "{bad}: {error}");
            }
        }
    }

    #[test]
    fn aws_endpoint_override() {
        assert_eq!(config(&[]).unwrap().aws_endpoint_url, None);
        assert_eq!(
            config(&[("AWS_ENDPOINT_URL", "")])
                .unwrap()
                .aws_endpoint_url,
            None
        );
        let c = config(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")]).unwrap();
        assert_eq!(c.aws_endpoint_url.as_deref(), Some("http://127.0.0.1:4566"));
    }

    #[test]
    fn lifecycle_settings() {
        let c = config(&[]).unwrap();
        assert_eq!(c.outbox_sweep_interval, Duration::from_secs(5));
        assert_eq!(c.janitor_interval, Duration::from_secs(30));
        assert_eq!(c.artifact_url_ttl, Duration::from_secs(900));
        assert!(!c.simulate_workers);
        assert_eq!(c.callback_timeout, Duration::from_secs(5));
        assert!(!c.allow_private_callbacks);
        assert!(c.callbacks_egress);
        for (text, egress) in [
            ("false", false),
            ("0", false),
            ("off", false),
            ("TRUE", true),
        ] {
            let c = config(&[("CALLBACKS_EGRESS", text)]).unwrap();
            assert_eq!(c.callbacks_egress, egress, "CALLBACKS_EGRESS={text}");
        }
        let error = config(&[("CALLBACKS_EGRESS", "sometimes")]).unwrap_err();
        assert!(
            error.to_string().starts_with("CALLBACKS_EGRESS: "),
            "{error}"
        );
        assert_eq!(c.max_pending_callbacks_per_key, 1_000);
        assert_eq!(
            config(&[("MAX_PENDING_CALLBACKS_PER_KEY", "5")])
                .unwrap()
                .max_pending_callbacks_per_key,
            5
        );
        assert!(config(&[("MAX_PENDING_CALLBACKS_PER_KEY", "0")]).is_err());
        assert!(
            config(&[("ALLOW_PRIVATE_CALLBACKS", "true")])
                .unwrap()
                .allow_private_callbacks
        );
        let c = config(&[("SIMULATE_WORKERS", "1"), ("OUTBOX_SWEEP_INTERVAL", "0")]).unwrap();
        assert!(c.simulate_workers);
        assert_eq!(c.outbox_sweep_interval, Duration::ZERO);
        assert!(config(&[("SIMULATE_WORKERS", "maybe")]).is_err());
    }

    #[test]
    fn secrets_come_from_the_environment_or_secrets_manager() {
        let c = config(&[]).unwrap();
        assert_eq!(c.origin_secret, None);
        assert_eq!(c.webhook_secret, None);
        assert_eq!(c.secret_refresh_interval, Duration::from_secs(30));
        assert_eq!(c.health_check_interval, Duration::from_secs(10));
        let long = "a-secret-of-enough-bytes";
        let c = config(&[
            ("CF_ORIGIN_SECRET", long),
            ("CF_ORIGIN_SECRET_PREVIOUS", "the-previous-secret-value"),
            (
                "WEBHOOK_SECRET_ARN",
                "arn:aws:secretsmanager:us-east-1:1:secret:w",
            ),
            ("CF_ORIGIN_SECRET_ARN", ""),
        ])
        .unwrap();
        assert_eq!(
            c.origin_secret,
            Some(SecretSource::Fixed {
                current: long.into(),
                previous: Some("the-previous-secret-value".into())
            })
        );
        assert_eq!(
            c.webhook_secret,
            Some(SecretSource::Stored(
                "arn:aws:secretsmanager:us-east-1:1:secret:w".into()
            ))
        );
        let debug = format!("{:?}", c.origin_secret);
        assert!(
            !debug.contains(long) && !debug.contains("previous-secret"),
            "{debug}"
        );
        for bad in [
            &[("CF_ORIGIN_SECRET", "short")][..],
            &[
                ("WEBHOOK_SECRET", long),
                ("WEBHOOK_SECRET_PREVIOUS", "short"),
            ],
            &[("CF_ORIGIN_SECRET_PREVIOUS", long)],
            &[("CF_ORIGIN_SECRET", long), ("CF_ORIGIN_SECRET_ARN", "arn")],
            &[("SECRET_REFRESH_INTERVAL", "soon")],
        ] {
            assert!(config(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn skin_settings() {
        let c = config(&[]).unwrap();
        assert_eq!(c.skin_bucket, c.replay_bucket);
        assert_eq!(c.max_skin_bytes, 4 * 1024 * 1024);
        assert_eq!(c.max_skin_upload_bytes, 200 * 1024 * 1024);
        assert_eq!(c.rate_limits.skins_upload.requests, 2);
        assert_eq!(c.rate_limits.legacy_skins_upload.requests, 5);
        assert_eq!(c.skin_ingest_interval, Duration::from_secs(5));
        let c = config(&[("SKIN_BUCKET", "s"), ("SKIN_INGEST_INTERVAL", "0")]).unwrap();
        assert_eq!(c.skin_bucket, "s");
        assert_eq!(c.skin_ingest_interval, Duration::ZERO);
    }

    #[test]
    fn anonymous_entitlements_default_to_everything() {
        assert_eq!(
            config(&[]).unwrap().anonymous_entitlements,
            Entitlements::default()
        );
        let c = config(&[
            ("ANONYMOUS_MAX_RESOLUTION", "720p"),
            ("ANONYMOUS_DENY", "video, motion_blur"),
        ])
        .unwrap();
        let entitlements = c.anonymous_entitlements;
        assert_eq!(entitlements.max_resolution, Some(Resolution::Hd720));
        assert_eq!(
            entitlements.denied.to_string(),
            "motion_blur_960fps,load_video"
        );
        let c = config(&[("ANONYMOUS_MAX_RESOLUTION", ""), ("ANONYMOUS_DENY", "")]).unwrap();
        assert_eq!(c.anonymous_entitlements, Entitlements::default());
        for (name, value) in [
            ("ANONYMOUS_MAX_RESOLUTION", "8k"),
            ("ANONYMOUS_DENY", "video,bg_dim"),
        ] {
            let error = config(&[(name, value)]).unwrap_err().to_string();
            assert!(error.contains(name), "{error}");
        }
    }
}
