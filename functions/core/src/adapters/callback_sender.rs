//! Sending callbacks over HTTPS (DESIGN.md §9, "Callbacks"). Every address a callback could
//! reach is checked where the connection is made: the client's resolver refuses a host that
//! resolves to any address `is_public` refuses, and the connection goes to the addresses it
//! checked. So a host that resolved to a public address at submission and to a private one
//! now (DNS rebinding) is refused now. A URL naming an address literally is checked before
//! the request, as no lookup is made for it. Redirects are not followed: one could lead
//! anywhere.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::domain::callback::{is_public, CallbackUrl, SIGNATURE_HEADER};
use crate::ports::callbacks::{CallbackAddresses, CallbackSender, SendError, SignedBody};

/// How long a lookup may take before the host counts as unresolved.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(3);

/// The submission-time check: the system's resolver, and `is_public` on every address.
pub struct CheckedAddresses {
    pub allow_private: bool,
}

#[async_trait]
impl CallbackAddresses for CheckedAddresses {
    async fn check(&self, url: &CallbackUrl) -> Result<(), SendError> {
        if let Some(address) = url.literal_address() {
            return check_literal(url, address, self.allow_private);
        }
        resolve_checked(&url.host_and_port().0, self.allow_private)
            .await
            .map(drop)
    }
}

fn check_literal(url: &CallbackUrl, address: IpAddr, allow_private: bool) -> Result<(), SendError> {
    if allow_private || is_public(address) {
        Ok(())
    } else {
        Err(SendError::Refused {
            host: url.host_and_port().0,
            address,
        })
    }
}

const USER_AGENT: &str = concat!("osurender-callbacks/", env!("CARGO_PKG_VERSION"));

/// The dispatcher's sender.
pub struct HttpCallbacks(GuardedClient);

impl HttpCallbacks {
    /// `timeout`: a whole send, connection included. `allow_private`:
    /// `ALLOW_PRIVATE_CALLBACKS` (development only).
    pub fn new(timeout: Duration, allow_private: bool) -> Self {
        Self(GuardedClient::new(timeout, allow_private, USER_AGENT))
    }
}

/// An HTTP client that reaches only what callbacks may: its resolver refuses what `is_public`
/// refuses (and connects to the addresses it checked), no redirects, no proxy; `timeout` for
/// the whole request, connection included. Also replay_fetch.rs's.
pub(super) struct GuardedClient {
    timeout: Duration,
    allow_private: bool,
    user_agent: &'static str,
    /// Built on first use, not when the function starts: loading the system's roots would
    /// lengthen every cold start, those that send nothing too.
    client: OnceLock<Result<reqwest::Client, String>>,
}

impl GuardedClient {
    /// `allow_private`: `ALLOW_PRIVATE_CALLBACKS` (development only), which also permits `http`.
    pub(super) fn new(timeout: Duration, allow_private: bool, user_agent: &'static str) -> Self {
        Self {
            timeout,
            allow_private,
            user_agent,
            client: OnceLock::new(),
        }
    }

    /// Refuses `url` if it names an address callbacks may not reach literally: no lookup is
    /// made for one, so the resolver never sees it.
    pub(super) fn check_literal_address(&self, url: &CallbackUrl) -> Result<(), SendError> {
        match url.literal_address() {
            Some(address) => check_literal(url, address, self.allow_private),
            None => Ok(()),
        }
    }

    /// The client, built on the first call; why it does not start.
    pub(super) fn get(&self) -> Result<&reqwest::Client, &str> {
        self.client
            .get_or_init(|| self.build())
            .as_ref()
            .map_err(String::as_str)
    }

    fn build(&self) -> Result<reqwest::Client, String> {
        reqwest::Client::builder()
            .dns_resolver(Arc::new(CheckedResolver {
                allow_private: self.allow_private,
            }))
            .redirect(reqwest::redirect::Policy::none())
            // A proxy from the environment would make the connection, to addresses this
            // resolver never checked.
            .no_proxy()
            .timeout(self.timeout)
            .connect_timeout(self.timeout)
            .user_agent(self.user_agent)
            .build()
            .map_err(|error| format!("the HTTP client does not start: {error}"))
    }
}

#[async_trait]
impl CallbackSender for HttpCallbacks {
    async fn send(&self, url: &CallbackUrl, signed: SignedBody) -> Result<(), SendError> {
        self.0.check_literal_address(url)?;
        let client = self
            .0
            .get()
            .map_err(|error| SendError::Failed(error.to_owned()))?;
        let response = client
            .post(url.url().clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, signed.signature)
            .body(signed.body)
            .send()
            .await
            .map_err(send_error)?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(SendError::Status(status.as_u16()))
        }
    }
}

/// The resolver's own refusal if that is why the send failed, else the error as text.
pub(super) fn send_error(error: reqwest::Error) -> SendError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(cause) = source {
        if let Some(refusal) = cause.downcast_ref::<SendError>() {
            return refusal.clone();
        }
        source = cause.source();
    }
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "failed"
    };
    SendError::Failed(format!("{kind}: {error}"))
}

/// The addresses `host` resolves to, if callbacks may reach every one of them.
async fn resolve_checked(host: &str, allow_private: bool) -> Result<Vec<SocketAddr>, SendError> {
    let unresolved = || SendError::Unresolved(host.to_owned());
    let addresses: Vec<SocketAddr> =
        tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((host, 0)))
            .await
            .map_err(|_| SendError::LookupFailed(host.to_owned()))?
            .map_err(|error| lookup_error(host, &error))?
            .collect();
    if addresses.is_empty() {
        return Err(unresolved());
    }
    if let Some(refused) = addresses
        .iter()
        .find(|address| !allow_private && !is_public(address.ip()))
    {
        return Err(SendError::Refused {
            host: host.to_owned(),
            address: refused.ip(),
        });
    }
    Ok(addresses)
}

/// A failed lookup: a name that does not exist is a no; anything else (getaddrinfo's
/// EAI_AGAIN, "Temporary failure in name resolution": a SERVFAIL or a resolver that did not
/// answer; an error of the system) is not known either way. std gives only getaddrinfo's text,
/// so the text is what is matched.
fn lookup_error(host: &str, error: &std::io::Error) -> SendError {
    let text = error.to_string();
    let no_such_name = [
        "not known",
        "No address associated",
        "no such host",
        "nodename nor servname",
    ]
    .iter()
    .any(|said| text.contains(said));
    if no_such_name {
        SendError::Unresolved(host.to_owned())
    } else {
        SendError::LookupFailed(host.to_owned())
    }
}

/// reqwest's resolver for callbacks: the system's, refusing what `is_public` refuses.
struct CheckedResolver {
    allow_private: bool,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let addresses = resolve_checked(name.as_str(), allow_private).await?;
            Ok(Box::new(addresses.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty body and a signature no receiver checks: these sends are refused before any.
    fn empty() -> SignedBody {
        SignedBody {
            body: b"{}".to_vec(),
            signature: "t=1,v1=00".into(),
        }
    }

    #[tokio::test]
    async fn a_host_that_resolves_to_a_private_address_is_refused_unless_allowed() {
        let localhost = CallbackUrl::parse("https://localhost/cb", false).unwrap();
        let strict = HttpCallbacks::new(Duration::from_secs(1), false);
        let strict_check = CheckedAddresses {
            allow_private: false,
        };
        assert!(matches!(
            strict_check.check(&localhost).await,
            Err(SendError::Refused { .. })
        ));
        // The send is refused by the resolver itself, before any connection.
        let sent = strict.send(&localhost, empty()).await;
        assert!(matches!(sent, Err(SendError::Refused { .. })), "{sent:?}");
        let metadata = CallbackUrl::parse("https://169.254.169.254/latest", false).unwrap();
        assert!(matches!(
            strict.send(&metadata, empty()).await,
            Err(SendError::Refused { .. })
        ));

        let lax = CheckedAddresses {
            allow_private: true,
        };
        assert_eq!(lax.check(&localhost).await, Ok(()));
        let nowhere = CallbackUrl::parse("https://nowhere.invalid/cb", false).unwrap();
        assert!(matches!(
            lax.check(&nowhere).await,
            Err(SendError::Unresolved(_))
        ));
    }

    #[tokio::test]
    async fn a_proxy_from_the_environment_is_not_used() {
        // A proxy would be handed the private host unchecked: the resolver must still refuse
        // it, and nothing may connect to the proxy.
        let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
        for name in ["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"] {
            std::env::set_var(name, &proxy_url);
        }
        let sender = HttpCallbacks::new(Duration::from_secs(1), false);
        let localhost = CallbackUrl::parse("https://localhost/cb", false).unwrap();
        let sent = sender.send(&localhost, empty()).await;
        for name in ["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"] {
            std::env::remove_var(name);
        }
        assert!(matches!(sent, Err(SendError::Refused { .. })), "{sent:?}");
        let connected = tokio::time::timeout(Duration::from_millis(200), proxy.accept()).await;
        assert!(connected.is_err(), "the proxy was connected to");
    }
}
