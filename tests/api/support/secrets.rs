//! Secrets in the AWS stand-in's Secrets Manager, as an operator creates and rotates them.

use aws_sdk_secretsmanager::Client;

/// A secret of its own (a unique name) holding one string.
pub struct StoredSecret {
    client: Client,
    pub arn: String,
    name: String,
}

impl StoredSecret {
    pub async fn create(value: &str) -> StoredSecret {
        let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        let client = Client::new(&sdk);
        let name = format!("osurender-test/{}", uuid::Uuid::new_v4().simple());
        let created = client
            .create_secret()
            .name(&name)
            .secret_string(value)
            .send()
            .await
            .expect("the stand-in creates the secret");
        StoredSecret {
            client,
            arn: created.arn().unwrap().to_owned(),
            name,
        }
    }

    /// A name no secret has yet; `create_named` makes it later.
    pub fn unused_name() -> String {
        format!("osurender-test/{}", uuid::Uuid::new_v4().simple())
    }

    /// Creates the secret `name` (from `unused_name`).
    pub async fn create_named(name: &str, value: &str) {
        let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        Client::new(&sdk)
            .create_secret()
            .name(name)
            .secret_string(value)
            .send()
            .await
            .expect("the stand-in creates the secret");
    }

    /// Puts `value` as the new version, as a rotation does: it becomes `AWSCURRENT`, and the
    /// version it replaces `AWSPREVIOUS`.
    pub async fn rotate(&self, value: &str) {
        self.client
            .put_secret_value()
            .secret_id(&self.name)
            .secret_string(value)
            .send()
            .await
            .expect("the stand-in stores the new version");
    }

    /// Puts `value` as the version a rotation is installing (`AWSPENDING`, Secrets Manager's
    /// createSecret step); `AWSCURRENT` stays where it is. The new version's id.
    pub async fn stage_pending(&self, value: &str) -> String {
        self.client
            .put_secret_value()
            .secret_id(&self.name)
            .secret_string(value)
            .version_stages("AWSPENDING")
            .send()
            .await
            .expect("the stand-in stores the pending version")
            .version_id()
            .unwrap()
            .to_owned()
    }

    /// Makes `version` `AWSCURRENT` (a rotation's finishSecret step); the version it replaces
    /// becomes `AWSPREVIOUS`.
    pub async fn promote(&self, version: &str) {
        let versions = self
            .client
            .list_secret_version_ids()
            .secret_id(&self.name)
            .send()
            .await
            .unwrap();
        let current = versions
            .versions()
            .iter()
            .find(|v| v.version_stages().iter().any(|stage| stage == "AWSCURRENT"))
            .and_then(|v| v.version_id())
            .unwrap()
            .to_owned();
        self.client
            .update_secret_version_stage()
            .secret_id(&self.name)
            .version_stage("AWSCURRENT")
            .move_to_version_id(version)
            .remove_from_version_id(current)
            .send()
            .await
            .expect("the stand-in moves AWSCURRENT");
    }
}
