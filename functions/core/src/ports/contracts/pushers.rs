//! The pusher's guarantees (`Pusher`): a frame to an open connection arrives intact and in
//! order, one to a connection that is closed or unknown is `Gone`, and one over the largest
//! frame is refused before it is sent.

use crate::domain::events::ConnectionId;
use crate::ports::events::{PushError, Pushed, Pusher, MAX_FRAME_BYTES};

/// `open` makes a connection that receives; `received` is what it received so far, in order;
/// `close` closes it as its client would.
pub async fn suite<P, O, R, C>(pusher: &P, open: O, received: R, close: C)
where
    P: Pusher + ?Sized,
    O: AsyncFn() -> ConnectionId,
    R: AsyncFn(&ConnectionId) -> Vec<String>,
    C: AsyncFn(&ConnectionId),
{
    let id = open().await;
    let first = r#"{"type":"job","status":"queued","note":"é ✓"}"#;
    let largest = format!(r#""{}""#, "x".repeat(MAX_FRAME_BYTES - 2));
    for frame in [first, largest.as_str()] {
        assert_eq!(
            pusher.push(&id, frame).await,
            Ok(Pushed::Delivered),
            "a frame to an open connection is delivered"
        );
    }
    assert_eq!(
        received(&id).await,
        vec![first.to_owned(), largest.clone()],
        "frames arrive intact and in order"
    );

    let over = "x".repeat(MAX_FRAME_BYTES + 1);
    assert_eq!(
        pusher.push(&id, &over).await,
        Err(PushError::TooLarge),
        "a frame over the largest is refused"
    );
    assert_eq!(received(&id).await.len(), 2, "and never sent");

    let unknown = ConnectionId::parse("contract-never-opened").expect("an id");
    assert_eq!(pusher.push(&unknown, first).await, Ok(Pushed::Gone));
    close(&id).await;
    assert_eq!(
        pusher.push(&id, first).await,
        Ok(Pushed::Gone),
        "a closed connection is gone"
    );
}
