//! The HTTP/1.1 side of the proxy: requests followed on keep-alive connections and named by
//! their AWS operation.

/// A request head larger than this is not followed (SDK heads are about 1–2 KiB).
const MAX_HTTP_HEAD: usize = 64 * 1024;

/// Splits a client's HTTP/1.1 byte stream into requests, naming each one's AWS operation.
#[derive(Default, Clone)]
pub(super) struct HttpScanner {
    state: HttpState,
    /// Request heads read, and requests read whole.
    pub(super) heads: u64,
    pub(super) done: u64,
    /// The head, or the current chunk-size / trailer line, as it accumulates.
    line: Vec<u8>,
    pub(super) opaque: bool,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum HttpState {
    #[default]
    Head,
    Body(u64),
    ChunkSize,
    /// Chunk data plus its closing CRLF.
    ChunkData(u64),
    Trailers,
}

impl HttpScanner {
    /// Calls `on_request` with the operation of each request whose head completes in `data`.
    pub(super) fn feed(&mut self, mut data: &[u8], mut on_request: impl FnMut(String)) {
        while !data.is_empty() && !self.opaque {
            match self.state {
                HttpState::Body(left) | HttpState::ChunkData(left) => {
                    let skipped = left.min(data.len() as u64);
                    data = &data[skipped as usize..];
                    if matches!(self.state, HttpState::Body(_)) && left == skipped {
                        self.done += 1;
                    }
                    self.state = match (self.state, left - skipped) {
                        (HttpState::Body(_), 0) => HttpState::Head,
                        (HttpState::Body(_), left) => HttpState::Body(left),
                        (_, 0) => HttpState::ChunkSize,
                        (_, left) => HttpState::ChunkData(left),
                    };
                }
                HttpState::Head => {
                    if !self.accumulate(&mut data, b"\r\n\r\n") {
                        return;
                    }
                    match parse_head(&self.line) {
                        Some(head) => {
                            self.heads += 1;
                            if matches!(head.body, Body::Length(0)) {
                                self.done += 1;
                            }
                            on_request(head.operation);
                            self.state = match head.body {
                                Body::Chunked => HttpState::ChunkSize,
                                Body::Length(0) => HttpState::Head,
                                Body::Length(n) => HttpState::Body(n),
                            };
                        }
                        None => self.opaque = true,
                    }
                    self.line.clear();
                }
                HttpState::ChunkSize => {
                    if !self.accumulate(&mut data, b"\r\n") {
                        return;
                    }
                    let text = String::from_utf8_lossy(&self.line);
                    let size = text.trim().split(';').next().unwrap_or_default();
                    match u64::from_str_radix(size.trim(), 16) {
                        Ok(0) => self.state = HttpState::Trailers,
                        Ok(n) => self.state = HttpState::ChunkData(n + 2),
                        Err(_) => self.opaque = true,
                    }
                    self.line.clear();
                }
                HttpState::Trailers => {
                    if !self.accumulate(&mut data, b"\r\n") {
                        return;
                    }
                    // The empty line (just CRLF) ends the trailers and the request.
                    if self.line == b"\r\n" {
                        self.state = HttpState::Head;
                        self.done += 1;
                    }
                    self.line.clear();
                }
            }
        }
    }

    /// Moves bytes of `data` into `line` up to and including `end`; true once `line` ends
    /// with it (else `data` is used up). A line past `MAX_HTTP_HEAD` makes the connection
    /// opaque.
    fn accumulate(&mut self, data: &mut &[u8], end: &[u8]) -> bool {
        while let Some((&byte, rest)) = data.split_first() {
            self.line.push(byte);
            *data = rest;
            if self.line.ends_with(end) {
                return true;
            }
        }
        if self.line.len() > MAX_HTTP_HEAD {
            self.opaque = true;
        }
        false
    }
}

enum Body {
    Length(u64),
    Chunked,
}

struct Head {
    operation: String,
    body: Body,
}

fn parse_head(head: &[u8]) -> Option<Head> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let (method, target) = (request_line.next()?, request_line.next()?);
    let (mut amz_target, mut length, mut chunked) = (None, 0, false);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "x-amz-target" => amz_target = Some(value),
            "content-length" => length = value.parse().ok()?,
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            _ => {}
        }
    }
    Some(Head {
        operation: operation(method, target, amz_target),
        body: if chunked {
            Body::Chunked
        } else {
            Body::Length(length)
        },
    })
}

/// `DynamoDB.UpdateItem` from `X-Amz-Target: DynamoDB_20120810.UpdateItem`, `SQS.SendMessage`
/// from `AmazonSQS.SendMessage`; otherwise an S3 operation from the method and whether the
/// (path-style) target names a bucket (`/bucket`, `/bucket/`) or an object (`/bucket/key`).
fn operation(method: &str, target: &str, amz_target: Option<&str>) -> String {
    if let Some((service, op)) = amz_target.and_then(|t| t.split_once('.')) {
        let service = service.split('_').next().unwrap_or(service);
        return format!("{}.{op}", service.trim_start_matches("Amazon"));
    }
    let path = target.split('?').next().unwrap_or_default();
    let object = path
        .trim_start_matches('/')
        .split_once('/')
        .is_some_and(|(_, key)| !key.is_empty());
    let op = match (method, object) {
        ("PUT", true) => "PutObject",
        ("GET", true) => "GetObject",
        ("HEAD", true) => "HeadObject",
        ("DELETE", true) => "DeleteObject",
        ("PUT", false) => "CreateBucket",
        ("GET", false) => "ListObjects",
        ("HEAD", false) => "HeadBucket",
        ("DELETE", false) => "DeleteBucket",
        (other, _) => return format!("S3.{other}"),
    };
    format!("S3.{op}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::in_pieces;

    fn http_ops(pieces: &[&[u8]]) -> (Vec<String>, bool) {
        let mut scanner = HttpScanner::default();
        let mut ops = Vec::new();
        for piece in pieces {
            scanner.feed(piece, |op| ops.push(op));
        }
        (ops, scanner.opaque)
    }

    #[test]
    fn http_requests_on_one_keep_alive_connection() {
        let stream = [
            "POST / HTTP/1.1\r\nx-amz-target: DynamoDB_20120810.UpdateItem\r\n",
            "content-length: 29\r\n\r\n{\"TableName\":\"PUT /b/k HTTP\"}",
            "PUT /bucket/replays/a.osr?x-id=PutObject HTTP/1.1\r\n",
            "Transfer-Encoding: chunked\r\n\r\n",
            "5;ext=1\r\nGET /\r\n10\r\n0123456789abcdef\r\n0\r\nx-amz-checksum: a\r\n\r\n",
            "POST / HTTP/1.1\r\nX-Amz-Target: AmazonSQS.SendMessageBatch\r\n",
            "Content-Length: 2\r\n\r\n{}",
            "DELETE /bucket/replays/a.osr HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            "HEAD /bucket HTTP/1.1\r\n\r\n",
            "HEAD /bucket/ HTTP/1.1\r\n\r\n",
            "GET /bucket/?list-type=2 HTTP/1.1\r\n\r\n",
        ]
        .concat();
        let (ops, opaque) = in_pieces(stream.as_bytes(), http_ops);
        assert!(!opaque);
        assert_eq!(
            ops,
            [
                "DynamoDB.UpdateItem",
                "S3.PutObject",
                "SQS.SendMessageBatch",
                "S3.DeleteObject",
                "S3.HeadBucket",
                "S3.HeadBucket",
                "S3.ListObjects"
            ]
        );
    }

    #[test]
    fn an_endless_http_head_is_given_up_on() {
        let stream = vec![b'a'; MAX_HTTP_HEAD + 10];
        let (ops, opaque) = http_ops(&[&stream]);
        assert!(ops.is_empty());
        assert!(opaque);
    }
}
