//! Presigned S3 POST uploads (AWS Signature Version 4), for skins larger than a Lambda
//! request can carry. The AWS SDK for Rust presigns requests but has no POST-policy helper, so
//! the policy is built here and signed with the SDK's own SigV4 key derivation: the signature is
//! the hex HMAC-SHA256, under the key derived from the secret, date, region and `s3`, of the
//! base64 policy. S3 then enforces the policy: this bucket, exactly this key, exactly `size`
//! bytes, before `expiration`.

use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::ports::skins::PresignedPost;
use base64::Engine;
use chrono::{DateTime, Utc};
use serde_json::json;
const ALGORITHM: &str = "AWS4-HMAC-SHA256";
const SERVICE: &str = "s3";

/// A POST policy about to be signed.
#[derive(Debug)]
pub struct PostPolicy<'a> {
    pub bucket: &'a str,
    pub key: &'a str,
    /// The upload must be exactly this many bytes.
    pub size: u64,
    pub region: &'a str,
    pub access_key_id: &'a str,
    pub secret_access_key: &'a str,
    /// Temporary credentials (a Lambda role's) must send their token, and sign it.
    pub session_token: Option<&'a str>,
    pub now: SystemTime,
    pub expires_at: SystemTime,
}

impl PostPolicy<'_> {
    /// Signs the policy for a form posted to `url`.
    pub fn sign(&self, url: String) -> PresignedPost {
        let now = DateTime::<Utc>::from(self.now);
        let amz_date = now.format("%Y%m%dT%H%M%SZ").to_string();
        let credential = format!(
            "{}/{}/{}/{SERVICE}/aws4_request",
            self.access_key_id,
            now.format("%Y%m%d"),
            self.region
        );
        let mut conditions = vec![
            json!({ "bucket": self.bucket }),
            json!({ "key": self.key }),
            json!(["content-length-range", self.size, self.size]),
            json!({ "x-amz-algorithm": ALGORITHM }),
            json!({ "x-amz-credential": credential }),
            json!({ "x-amz-date": amz_date }),
        ];
        if let Some(token) = self.session_token {
            conditions.push(json!({ "x-amz-security-token": token }));
        }
        let expiration = DateTime::<Utc>::from(self.expires_at)
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string();
        let policy = json!({ "expiration": expiration, "conditions": conditions });
        let policy = base64::engine::general_purpose::STANDARD.encode(policy.to_string());
        let signature = signature(self.secret_access_key, self.now, self.region, &policy);

        let mut fields = BTreeMap::from([
            ("key", self.key.to_owned()),
            ("policy", policy),
            ("x-amz-algorithm", ALGORITHM.to_owned()),
            ("x-amz-credential", credential),
            ("x-amz-date", amz_date),
            ("x-amz-signature", signature),
        ]);
        if let Some(token) = self.session_token {
            fields.insert("x-amz-security-token", token.to_owned());
        }
        PresignedPost { url, fields }
    }
}

/// The SigV4 signature of a base64 POST policy, dated `date` (its UTC day scopes the key).
pub fn signature(secret_access_key: &str, date: SystemTime, region: &str, policy: &str) -> String {
    let key = aws_sigv4::sign::v4::generate_signing_key(secret_access_key, date, region, SERVICE);
    aws_sigv4::sign::v4::calculate_signature(key, policy.as_bytes())
}

/// Where the form is posted: the bucket on the overridden endpoint, path-style as the S3
/// client addresses it there (`aws::s3`), or the bucket's regional virtual host on AWS.
pub fn bucket_url(endpoint: Option<&str>, bucket: &str, region: &str) -> String {
    match endpoint {
        Some(endpoint) => format!("{}/{bucket}", endpoint.trim_end_matches('/')),
        None => format!("https://{bucket}.s3.{region}.amazonaws.com"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// The worked example of the S3 API reference ("Example: Browser-Based Upload using HTTP
    /// POST (Using AWS Signature Version 4)"): its base64 policy and expected signature.
    #[test]
    fn signs_the_aws_documentation_example() {
        const POLICY: &str = "eyAiZXhwaXJhdGlvbiI6ICIyMDE1LTEyLTMwVDEyOjAwOjAwLjAwMFoiLA0KICAiY29uZGl0aW9ucyI6IFsNCiAgICB7ImJ1Y2tldCI6ICJzaWd2NGV4YW1wbGVidWNrZXQifSwNCiAgICBbInN0YXJ0cy13aXRoIiwgIiRrZXkiLCAidXNlci91c2VyMS8iXSwNCiAgICB7ImFjbCI6ICJwdWJsaWMtcmVhZCJ9LA0KICAgIHsic3VjY2Vzc19hY3Rpb25fcmVkaXJlY3QiOiAiaHR0cDovL3NpZ3Y0ZXhhbXBsZWJ1Y2tldC5zMy5hbWF6b25hd3MuY29tL3N1Y2Nlc3NmdWxfdXBsb2FkLmh0bWwifSwNCiAgICBbInN0YXJ0cy13aXRoIiwgIiRDb250ZW50LVR5cGUiLCAiaW1hZ2UvIl0sDQogICAgeyJ4LWFtei1tZXRhLXV1aWQiOiAiMTQzNjUxMjM2NTEyNzQifSwNCiAgICB7IngtYW16LXNlcnZlci1zaWRlLWVuY3J5cHRpb24iOiAiQUVTMjU2In0sDQogICAgWyJzdGFydHMtd2l0aCIsICIkeC1hbXotbWV0YS10YWciLCAiIl0sDQoNCiAgICB7IngtYW16LWNyZWRlbnRpYWwiOiAiQUtJQUlPU0ZPRE5ON0VYQU1QTEUvMjAxNTEyMjkvdXMtZWFzdC0xL3MzL2F3czRfcmVxdWVzdCJ9LA0KICAgIHsieC1hbXotYWxnb3JpdGhtIjogIkFXUzQtSE1BQy1TSEEyNTYifSwNCiAgICB7IngtYW16LWRhdGUiOiAiMjAxNTEyMjlUMDAwMDAwWiIgfQ0KICBdDQp9";
        // 2015-12-29T00:00:00Z, the policy's x-amz-date.
        let date = UNIX_EPOCH + Duration::from_secs(1_451_347_200);
        assert_eq!(
            signature(
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                date,
                "us-east-1",
                POLICY
            ),
            "8afdbf4008c03f22c2cd3cdb72e4afbb1f6a588f3255ac628749a66d7f09699e"
        );
    }

    fn policy(session_token: Option<&str>) -> PostPolicy<'_> {
        let now = UNIX_EPOCH + Duration::from_secs(1_451_347_200);
        PostPolicy {
            bucket: "skins-bucket",
            key: "incoming/abc/My Skin.osk",
            size: 12_345,
            region: "eu-west-1",
            access_key_id: "AKIDEXAMPLE",
            secret_access_key: "secret",
            session_token,
            now,
            expires_at: now + Duration::from_secs(900),
        }
    }

    #[test]
    fn policy_binds_bucket_key_size_and_expiry() {
        let post = policy(None).sign("https://example/skins-bucket".into());
        assert_eq!(
            post,
            policy(None).sign("https://example/skins-bucket".into())
        );
        assert_eq!(post.fields["key"], "incoming/abc/My Skin.osk");
        assert_eq!(
            post.fields["x-amz-credential"],
            "AKIDEXAMPLE/20151229/eu-west-1/s3/aws4_request"
        );
        assert_eq!(post.fields["x-amz-date"], "20151229T000000Z");
        assert!(!post.fields.contains_key("x-amz-security-token"));
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(&post.fields["policy"])
            .unwrap();
        let policy: serde_json::Value = serde_json::from_slice(&decoded).unwrap();
        assert_eq!(policy["expiration"], "2015-12-29T00:15:00.000Z");
        let conditions = policy["conditions"].as_array().unwrap();
        assert!(conditions.contains(&json!({ "bucket": "skins-bucket" })));
        assert!(conditions.contains(&json!({ "key": "incoming/abc/My Skin.osk" })));
        assert!(conditions.contains(&json!(["content-length-range", 12_345, 12_345])));
        assert_eq!(
            post.fields["x-amz-signature"],
            signature(
                "secret",
                UNIX_EPOCH + Duration::from_secs(1_451_347_200),
                "eu-west-1",
                &post.fields["policy"]
            )
        );
    }

    #[test]
    fn temporary_credentials_sign_their_token() {
        let post = policy(Some("TOKEN")).sign("u".into());
        assert_eq!(post.fields["x-amz-security-token"], "TOKEN");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(&post.fields["policy"])
            .unwrap();
        let policy: serde_json::Value = serde_json::from_slice(&decoded).unwrap();
        assert!(policy["conditions"]
            .as_array()
            .unwrap()
            .contains(&json!({ "x-amz-security-token": "TOKEN" })));
    }

    #[test]
    fn posts_to_the_bucket() {
        assert_eq!(
            bucket_url(Some("http://127.0.0.1:4566/"), "b", "us-east-1"),
            "http://127.0.0.1:4566/b"
        );
        assert_eq!(
            bucket_url(None, "b", "eu-west-1"),
            "https://b.s3.eu-west-1.amazonaws.com"
        );
    }
}
