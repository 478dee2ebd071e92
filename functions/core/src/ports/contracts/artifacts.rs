//! The artifact links' guarantee (`ArtifactLinks`): a link names the object it fetches.

use std::time::Duration;

use crate::ports::artifacts::ArtifactLinks;

pub async fn suite(links: &dyn ArtifactLinks) {
    let id = uuid::Uuid::new_v4();
    let (video, thumb) = (format!("renders/{id}.mp4"), format!("renders/{id}.jpg"));
    let ttl = Duration::from_secs(900);
    let video_link = links.link(&video, ttl).await.expect("linked");
    let thumb_link = links.link(&thumb, ttl).await.expect("linked");
    assert!(
        video_link.contains(&video) && thumb_link.contains(&thumb),
        "a link names its object: {video_link}, {thumb_link}"
    );
}
