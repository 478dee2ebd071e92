use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::domain::client::{NetworkPrefixes, TrustedProxies};
use crate::domain::entitlement::Entitlements;
use crate::domain::render::Resolution;

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
    assert_eq!(c.capacity.max_queued, 100);
    assert_eq!(c.capacity.max_rendering, 20);
    assert_eq!(c.capacity.max_active_per_client, 2);
    assert_eq!(c.renders.max_replay_bytes, 4 * 1024 * 1024);
    assert_eq!(c.rate_limits.render.requests, 5);
    assert_eq!(c.clients.trusted_proxies, TrustedProxies::cloudflare());
}

#[test]
fn the_farm_defaults_below_the_breaker_and_is_validated() {
    let c = config(&[]).unwrap();
    assert_eq!((c.capacity.render_slots, c.capacity.release_ahead), (16, 2));
    assert_eq!(c.capacity.render_overhead, Duration::from_secs(20));
    assert_eq!(
        (c.capacity.render_speed, c.capacity.anonymous_weight.get()),
        (1.0, 1)
    );
    assert_eq!(c.capacity.max_queue_wait, None);
    assert!(
        !c.capacity.farm_reaches_breaker(),
        "a waiting queue is never refused by default"
    );
    let c = config(&[("RENDER_SLOTS", "19"), ("RELEASE_AHEAD", "1")]).unwrap();
    assert!(
        c.capacity.farm_reaches_breaker(),
        "it starts, with a warning"
    );
    let c = config(&[("MAX_QUEUE_WAIT", "10m"), ("ANONYMOUS_WEIGHT", "3")]).unwrap();
    assert_eq!(c.capacity.max_queue_wait, Some(Duration::from_secs(600)));
    assert_eq!(c.capacity.anonymous_weight.get(), 3);
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
    assert_eq!(
        c.clients.network_prefixes,
        NetworkPrefixes { ipv4: 24, ipv6: 48 }
    );
    assert_eq!(c.capacity.max_active_per_network, 8);
    assert_eq!(c.rate_limits.render_network.to_string(), "20/minute");
    assert_eq!(
        c.clients.wide_network_prefixes,
        NetworkPrefixes { ipv4: 16, ipv6: 32 }
    );
    assert_eq!(c.capacity.max_active_per_wide_network, 24);
    assert_eq!(c.rate_limits.render_wide_network.to_string(), "60/minute");
    assert_eq!(c.rate_limits.skins_upload_network.to_string(), "10/minute");
    assert_eq!(
        c.rate_limits.skins_upload_wide_network.to_string(),
        "30/minute"
    );
    assert_eq!(c.capacity.anonymous_queue_share, 1.0);
    assert_eq!(c.capacity.max_anonymous_queued(), c.capacity.max_queued);
    let c = config(&[("ANONYMOUS_QUEUE_SHARE", "0.5"), ("MAX_QUEUED", "41")]).unwrap();
    assert_eq!(c.capacity.max_anonymous_queued(), 20);
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
    assert_eq!(c.clients.network_prefixes.ipv6, 40);
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
        c.unwrap().clients.wide_network_prefixes,
        NetworkPrefixes { ipv4: 24, ipv6: 48 },
        "a wide network may be the network itself"
    );
}

#[test]
fn overrides_and_errors() {
    let c = config(&[("MAX_QUEUED", "8"), ("TRUSTED_PROXY_CIDRS", "")]).unwrap();
    assert_eq!(c.capacity.max_queued, 8);
    assert_eq!(c.clients.trusted_proxies, TrustedProxies::default());
    assert!(config(&[("MAX_QUEUED", "lots")]).is_err());
    assert!(config(&[("RATE_LIMIT_RENDER", "5/fortnight")]).is_err());
    assert!(config(&[("IPV6_CLIENT_PREFIX", "200")]).is_err());
    let c = config(&[("QUEUED_TTL", "2h"), ("RENDER_STALL_TIMEOUT", "90")]).unwrap();
    assert_eq!(c.lifecycle.queued_ttl, Duration::from_secs(7200));
    assert_eq!(c.lifecycle.render_stall_timeout, Duration::from_secs(90));
    assert!(config(&[("QUEUED_TTL", "2 weeks")]).is_err());
    assert_eq!(
        config(&[]).unwrap().lifecycle.job_retention.as_secs(),
        30 * 86_400
    );
    let c = config(&[("JOB_RETENTION", "7d")]).unwrap();
    assert_eq!(c.lifecycle.job_retention, Duration::from_secs(7 * 86_400));
    assert_eq!(
        config(&[("JOB_RETENTION", "1d")])
            .unwrap()
            .lifecycle
            .job_retention,
        MIN_JOB_RETENTION
    );
    for short in ["23h", "60", "0"] {
        let error = config(&[("JOB_RETENTION", short)]).unwrap_err();
        assert!(error.to_string().starts_with("JOB_RETENTION"), "{error}");
    }
    assert_eq!(config(&[]).unwrap().caches.key_ttl, Duration::from_secs(30));
    let capped = config(&[("API_KEY_CACHE_TTL", "1m")]).unwrap();
    assert_eq!(capped.caches.key_ttl, MAX_KEY_CACHE_TTL);
    let error = config(&[("API_KEY_CACHE_TTL", "61")]).unwrap_err();
    assert!(
        error.to_string().starts_with("API_KEY_CACHE_TTL"),
        "{error}"
    );
    assert_eq!(
        config(&[]).unwrap().caches.policy_ttl,
        Duration::from_secs(30)
    );
    let ttl = |value| config(&[("POLICY_CACHE_TTL", value)]).map(|c| c.caches.policy_ttl);
    assert_eq!(ttl("5m").unwrap(), MAX_POLICY_CACHE_TTL);
    assert_eq!(ttl("1").unwrap(), Duration::from_secs(1));
    for wrong in ["0", "301", "soon"] {
        let error = ttl(wrong).unwrap_err();
        assert!(error.to_string().starts_with("POLICY_CACHE_TTL"), "{error}");
    }
    assert_eq!(config(&[]).unwrap().rate_limits.key_lookup.requests, 30);
    let network = config(&[]).unwrap().rate_limits.key_lookup_network;
    assert_eq!(network.to_string(), "120/minute");
    assert_eq!(
        config(&[("REPLAY_BUCKET", "r")]).unwrap().aws.skin_bucket,
        "r"
    );
    assert_eq!(
        config(&[("REPLAY_BUCKET", "r")])
            .unwrap()
            .aws
            .artifact_bucket,
        "r"
    );
}

#[test]
fn database_tls_settings() {
    let c = config(&[]).unwrap();
    assert_eq!(c.database.sslmode, DbSslMode::VerifyFull);
    assert_eq!(c.database.sslrootcert, None);
    let c = config(&[
        ("DB_SSLMODE", "verify-full"),
        ("DB_SSLROOTCERT", "/etc/ca.pem"),
    ])
    .unwrap();
    assert_eq!(c.database.sslmode, DbSslMode::VerifyFull);
    assert_eq!(c.database.sslrootcert, Some(PathBuf::from("/etc/ca.pem")));
    assert_eq!(
        config(&[("DB_SSLMODE", "require")])
            .unwrap()
            .database
            .sslmode,
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
    assert_eq!(c.database.sslmode, DbSslMode::VerifyFull);
    // The dev server's default applies only when nothing names a mode.
    let dev = |vars: &[(&str, &str)]| {
        let vars: HashMap<&str, &str> = vars.iter().copied().collect();
        Config::from_lookup_with_sslmode(
            |name| vars.get(name).map(|v| v.to_string()),
            DbSslMode::Disable,
        )
    };
    assert_eq!(dev(&[]).unwrap().database.sslmode, DbSslMode::Disable);
    let required = "postgres://u@127.0.0.1/osurender?sslmode=require";
    assert_eq!(
        dev(&[("DATABASE_URL", required)]).unwrap().database.sslmode,
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
    assert_eq!(c.database.migrate_lock_timeout, Duration::from_secs(10));
    assert_eq!(c.database.migrate_deadline, Duration::from_secs(40));
    let c = config(&[("MIGRATE_LOCK_TIMEOUT", "2"), ("MIGRATE_DEADLINE", "2m")]).unwrap();
    assert_eq!(c.database.migrate_lock_timeout, Duration::from_secs(2));
    assert_eq!(c.database.migrate_deadline, Duration::from_secs(120));
    for name in ["MIGRATE_LOCK_TIMEOUT", "MIGRATE_DEADLINE"] {
        for bad in ["0", "0s", "soon"] {
            let error = config(&[(name, bad)]).unwrap_err().to_string();
            assert!(error.starts_with(&format!("{name}: ")), "{bad}: {error}");
        }
    }
}

#[test]
fn aws_endpoint_override() {
    assert_eq!(config(&[]).unwrap().aws.endpoint_url, None);
    let blank = config(&[("AWS_ENDPOINT_URL", "")]).unwrap();
    assert_eq!(blank.aws.endpoint_url, None);
    let c = config(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")]).unwrap();
    assert_eq!(c.aws.endpoint_url.as_deref(), Some("http://127.0.0.1:4566"));
}

#[test]
fn lifecycle_settings() {
    let c = config(&[]).unwrap();
    assert_eq!(c.dev_server.outbox_sweep_interval, Duration::from_secs(5));
    assert_eq!(c.dev_server.janitor_interval, Duration::from_secs(30));
    assert_eq!(c.http.artifact_url_ttl, Duration::from_secs(900));
    assert!(!c.dev_server.simulate_workers);
    assert_eq!(c.callbacks.timeout, Duration::from_secs(5));
    assert!(!c.callbacks.allow_private);
    assert!(c.callbacks.egress);
    for (text, egress) in [
        ("false", false),
        ("0", false),
        ("off", false),
        ("TRUE", true),
    ] {
        let c = config(&[("CALLBACKS_EGRESS", text)]).unwrap();
        assert_eq!(c.callbacks.egress, egress, "CALLBACKS_EGRESS={text}");
    }
    let error = config(&[("CALLBACKS_EGRESS", "sometimes")]).unwrap_err();
    assert!(
        error.to_string().starts_with("CALLBACKS_EGRESS: "),
        "{error}"
    );
    assert_eq!(c.callbacks.max_pending_per_key, 1_000);
    assert_eq!(
        config(&[("MAX_PENDING_CALLBACKS_PER_KEY", "5")])
            .unwrap()
            .callbacks
            .max_pending_per_key,
        5
    );
    assert!(config(&[("MAX_PENDING_CALLBACKS_PER_KEY", "0")]).is_err());
    assert!(
        config(&[("ALLOW_PRIVATE_CALLBACKS", "true")])
            .unwrap()
            .callbacks
            .allow_private
    );
    let c = config(&[("SIMULATE_WORKERS", "1"), ("OUTBOX_SWEEP_INTERVAL", "0")]).unwrap();
    assert!(c.dev_server.simulate_workers);
    assert_eq!(c.dev_server.outbox_sweep_interval, Duration::ZERO);
    assert!(config(&[("SIMULATE_WORKERS", "maybe")]).is_err());
}

#[test]
fn secrets_come_from_the_environment_or_secrets_manager() {
    let c = config(&[]).unwrap();
    assert_eq!(c.secrets.origin, None);
    assert_eq!(c.secrets.webhook, None);
    assert_eq!(c.secrets.refresh_interval, Duration::from_secs(30));
    assert_eq!(c.caches.health_check_interval, Duration::from_secs(10));
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
        c.secrets.origin,
        Some(SecretSource::Fixed {
            current: long.into(),
            previous: Some("the-previous-secret-value".into())
        })
    );
    assert_eq!(
        c.secrets.webhook,
        Some(SecretSource::Stored(
            "arn:aws:secretsmanager:us-east-1:1:secret:w".into()
        ))
    );
    let debug = format!("{:?}", c.secrets.origin);
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
    assert_eq!(c.aws.skin_bucket, c.aws.replay_bucket);
    assert_eq!(c.skins.max_direct_bytes, 4 * 1024 * 1024);
    assert_eq!(c.skins.max_presigned_bytes, 200 * 1024 * 1024);
    assert_eq!(c.rate_limits.skins_upload.requests, 2);
    assert_eq!(c.rate_limits.legacy_skins_upload.requests, 5);
    assert_eq!(c.dev_server.skin_ingest_interval, Duration::from_secs(5));
    let c = config(&[("SKIN_BUCKET", "s"), ("SKIN_INGEST_INTERVAL", "0")]).unwrap();
    assert_eq!(c.aws.skin_bucket, "s");
    assert_eq!(c.dev_server.skin_ingest_interval, Duration::ZERO);
}

#[test]
fn anonymous_entitlements_default_to_everything() {
    assert_eq!(
        config(&[]).unwrap().renders.anonymous_entitlements,
        Entitlements::default()
    );
    let c = config(&[
        ("ANONYMOUS_MAX_RESOLUTION", "720p"),
        ("ANONYMOUS_DENY", "video, motion_blur"),
    ])
    .unwrap();
    let entitlements = c.renders.anonymous_entitlements;
    assert_eq!(entitlements.max_resolution, Some(Resolution::Hd720));
    assert_eq!(
        entitlements.denied.to_string(),
        "motion_blur_960fps,load_video"
    );
    let c = config(&[("ANONYMOUS_MAX_RESOLUTION", ""), ("ANONYMOUS_DENY", "")]).unwrap();
    assert_eq!(c.renders.anonymous_entitlements, Entitlements::default());
    for (name, value) in [
        ("ANONYMOUS_MAX_RESOLUTION", "8k"),
        ("ANONYMOUS_DENY", "video,bg_dim"),
    ] {
        let error = config(&[(name, value)]).unwrap_err().to_string();
        assert!(error.contains(name), "{error}");
    }
}

#[test]
fn each_variable_is_read_by_one_group() {
    let groups = Config::variables_by_group();
    assert_eq!(groups.len(), 13, "{:?}", groups.keys());
    let mut readers = HashMap::new();
    for (group, names) in &groups {
        for name in names {
            if let Some(other) = readers.insert(name, group) {
                panic!("{name} is read by {other} and {group}");
            }
        }
    }
}
