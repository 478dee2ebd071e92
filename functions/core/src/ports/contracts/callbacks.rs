//! The callback ports' guarantees beyond the leased queue: what `CallbackAddresses` lets through,
//! and that a `CallbackSender` never connects where the check would refuse.

use crate::domain::callback::CallbackUrl;
use crate::ports::callbacks::{CallbackAddresses, CallbackSender, SendError, SignedBody};

/// Literal addresses only: a host name's answer depends on the resolver, not on the port.
const REFUSED: [&str; 4] = [
    "https://10.1.2.3/hook",
    "https://127.0.0.1:8443/hook",
    "https://[::1]/hook",
    "https://[::ffff:192.168.0.1]/hook",
];

fn url(text: &str) -> CallbackUrl {
    // Parsed as a private URL may be, so the check under test is the port's.
    CallbackUrl::parse(text, true).expect("a URL")
}

pub async fn addresses(check: &dyn CallbackAddresses) {
    for refused in REFUSED {
        assert!(
            matches!(
                check.check(&url(refused)).await,
                Err(SendError::Refused { .. })
            ),
            "{refused}: a private or local address is refused"
        );
    }
    assert_eq!(
        check.check(&url("https://93.184.216.34/hook")).await,
        Ok(()),
        "a public address passes"
    );
}

pub async fn sender(sender: &dyn CallbackSender) {
    for refused in REFUSED {
        let signed = SignedBody {
            body: b"{}".to_vec(),
            signature: "sig".into(),
        };
        let sent = sender.send(&url(refused), signed).await;
        assert!(
            matches!(sent, Err(SendError::Refused { .. })),
            "{refused}: nothing is sent to an address the check refuses, got {sent:?}"
        );
    }
}
