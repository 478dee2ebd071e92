//! The PostgreSQL wire protocol (version 3.0) as far as tests follow it: one framer that splits
//! either side's byte stream into messages, however reads split it.

/// The codes of `SSLRequest` and `GSSENCRequest`: what follows may be encrypted, so the framer
/// follows such a connection no further.
pub const ENCRYPTION_REQUESTS: [u32; 2] = [80_877_103, 80_877_104];

/// `SSLRequest` as a client sends it: its length (8), then its code.
pub const SSL_REQUEST: [u8; 8] = {
    let code = ENCRYPTION_REQUESTS[0].to_be_bytes();
    [0, 0, 0, 8, code[0], code[1], code[2], code[3]]
};

/// What the framer finds in a stream, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A typed message's header is whole: its type (the untyped startup packet has none).
    Begins(u8),
    /// Bytes of the stream in order, as they arrive: every byte but a collected statement's.
    Bytes(&'a [u8]),
    /// A typed message (not a collected statement) is whole.
    Ends(u8),
    /// With `collecting_statements`, a Parse (`P`) or simple Query (`Q`) message whole: its
    /// bytes, and its SQL text.
    Statement {
        kind: u8,
        bytes: &'a [u8],
        text: String,
    },
}

/// Splits one direction of a PostgreSQL connection into messages, streaming: feed it reads as
/// they come. Cloning it peeks ahead without moving it.
#[derive(Debug, Clone)]
pub struct PgFramer {
    /// The next message is the frontend's untyped startup packet (length, then a code).
    untyped_next: bool,
    /// The current header as it accumulates (8 bytes untyped, 5 typed).
    header: Vec<u8>,
    /// The message being read: its type (0 for the startup packet) and the bytes still to come.
    current: Option<(u8, usize)>,
    /// Parse and Query messages are kept whole (`Frame::Statement`) rather than streamed.
    collect_statements: bool,
    collecting: Vec<u8>,
    /// After an encryption request the stream is passed on as bytes, not followed.
    opaque: bool,
}

impl PgFramer {
    /// A client's stream: the startup packet first.
    pub fn frontend() -> Self {
        Self {
            untyped_next: true,
            header: Vec::with_capacity(8),
            current: None,
            collect_statements: false,
            collecting: Vec::new(),
            opaque: false,
        }
    }

    /// A server's stream: typed messages only.
    pub fn backend() -> Self {
        Self {
            untyped_next: false,
            ..Self::frontend()
        }
    }

    /// Keeps each Parse and simple Query whole, so a statement's text is known before any of it
    /// is passed on.
    pub fn collecting_statements(self) -> Self {
        Self {
            collect_statements: true,
            ..self
        }
    }

    /// The stream asked for encryption: nothing after that is followed.
    pub fn opaque(&self) -> bool {
        self.opaque
    }

    /// Calls `on_message` with the type of each typed message whose header completes in `data`.
    pub fn message_types(&mut self, data: &[u8], mut on_message: impl FnMut(u8)) {
        self.push(data, |frame| {
            if let Frame::Begins(kind) = frame {
                on_message(kind);
            }
        });
    }

    /// Hands each frame `data` completes or streams to `on_frame`, in stream order.
    pub fn push(&mut self, mut data: &[u8], mut on_frame: impl FnMut(Frame<'_>)) {
        while !data.is_empty() {
            if self.opaque {
                on_frame(Frame::Bytes(data));
                return;
            }
            if let Some((kind, left)) = self.current {
                let take = left.min(data.len());
                if self.collects(kind) {
                    self.collecting.extend_from_slice(&data[..take]);
                } else {
                    on_frame(Frame::Bytes(&data[..take]));
                }
                data = &data[take..];
                self.current = Some((kind, left - take));
                if left == take {
                    self.finish(&mut on_frame);
                }
                continue;
            }
            let need = if self.untyped_next { 8 } else { 5 };
            let take = (need - self.header.len()).min(data.len());
            self.header.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.header.len() < need {
                return;
            }
            let header = std::mem::replace(&mut self.header, Vec::with_capacity(8));
            let word = |at: usize| u32::from_be_bytes(header[at..at + 4].try_into().unwrap());
            if self.untyped_next {
                self.untyped_next = false;
                self.opaque = ENCRYPTION_REQUESTS.contains(&word(4));
                on_frame(Frame::Bytes(&header));
                self.current = Some((0, (word(0) as usize).saturating_sub(8)));
            } else {
                let kind = header[0];
                on_frame(Frame::Begins(kind));
                if self.collects(kind) {
                    self.collecting = header.clone();
                } else {
                    on_frame(Frame::Bytes(&header));
                }
                self.current = Some((kind, (word(1) as usize).saturating_sub(4)));
            }
            if self.current.is_some_and(|(_, left)| left == 0) {
                self.finish(&mut on_frame);
            }
        }
    }

    fn collects(&self, kind: u8) -> bool {
        self.collect_statements && matches!(kind, b'P' | b'Q')
    }

    /// The current message is complete.
    fn finish(&mut self, on_frame: &mut impl FnMut(Frame<'_>)) {
        let Some((kind, _)) = self.current.take() else {
            return;
        };
        if kind == 0 {
            return;
        }
        if !self.collects(kind) {
            on_frame(Frame::Ends(kind));
            return;
        }
        let bytes = std::mem::take(&mut self.collecting);
        let body = bytes.get(5..).unwrap_or_default();
        // Parse: statement name, then the text; Query: the text.
        let text = match kind {
            b'P' => body.splitn(3, |b| *b == 0).nth(1).unwrap_or_default(),
            _ => body.split(|b| *b == 0).next().unwrap_or_default(),
        };
        on_frame(Frame::Statement {
            kind,
            text: String::from_utf8_lossy(text).into_owned(),
            bytes: &bytes,
        });
    }
}

/// A typed message: its type, its length, its body.
pub fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut message = vec![kind];
    message.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    message.extend_from_slice(body);
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::in_pieces;

    fn types(framer: fn() -> PgFramer, pieces: &[&[u8]]) -> Vec<u8> {
        let mut framer = framer();
        let mut types = Vec::new();
        for piece in pieces {
            framer.message_types(piece, |t| types.push(t));
        }
        types
    }

    /// A startup packet, an extended-protocol statement (Parse, Bind, Describe, Execute, Sync),
    /// then a simple query whose text holds bytes that look like message types.
    fn client_stream() -> Vec<u8> {
        let mut stream = Vec::new();
        let startup = b"\0\x03\0\0user\0postgres\0database\0db\0\0";
        stream.extend_from_slice(&(startup.len() as u32 + 4).to_be_bytes());
        stream.extend_from_slice(startup);
        for (kind, body) in [
            (b'P', &b"\0SELECT 1\0\0\0"[..]),
            (b'B', b"\0\0\0\0\0\0\0\0"),
            (b'D', b"P\0"),
            (b'E', b"\0\0\0\0\0"),
            (b'S', b""),
            (b'Q', b"SELECT 'S', 'Q'\0"),
        ] {
            stream.extend(message(kind, body));
        }
        stream
    }

    #[test]
    fn frontend_messages_after_the_startup_packet() {
        let types = in_pieces(&client_stream(), |pieces| types(PgFramer::frontend, pieces));
        assert_eq!(types, b"PBDESQ");
    }

    #[test]
    fn backend_messages() {
        let mut stream = message(b'R', &[0; 4]);
        stream.extend(message(b'S', b"client_encoding\0UTF8\0"));
        stream.extend(message(b'Z', b"I"));
        stream.extend(message(b'1', b""));
        stream.extend(message(b'D', &[0, 1, 0, 0, 0, 1, b'Z']));
        stream.extend(message(b'Z', b"I"));
        let types = in_pieces(&stream, |pieces| types(PgFramer::backend, pieces));
        assert_eq!(types, b"RSZ1DZ");
    }

    /// Collecting statements, every byte still comes out once and in order, each statement
    /// whole with its text.
    #[test]
    fn statements_are_kept_whole_and_nothing_is_lost() {
        let stream = client_stream();
        let frames = in_pieces(&stream, |pieces| {
            let mut framer = PgFramer::frontend().collecting_statements();
            let (mut bytes, mut seen) = (Vec::new(), Vec::new());
            for piece in pieces {
                framer.push(piece, |frame| match frame {
                    Frame::Bytes(b) => bytes.extend_from_slice(b),
                    Frame::Statement {
                        kind,
                        bytes: b,
                        text,
                    } => {
                        bytes.extend_from_slice(b);
                        seen.push(format!("{}:{text}", kind as char));
                    }
                    Frame::Ends(kind) => seen.push(format!("end {}", kind as char)),
                    Frame::Begins(_) => {}
                });
            }
            (bytes, seen)
        });
        assert_eq!(frames.0, stream);
        assert_eq!(
            frames.1,
            [
                "P:SELECT 1",
                "end B",
                "end D",
                "end E",
                "end S",
                "Q:SELECT 'S', 'Q'"
            ]
        );
    }

    #[test]
    fn encryption_requests_are_not_followed() {
        let mut stream = SSL_REQUEST.to_vec();
        stream.extend(message(b'S', b""));
        let mut framer = PgFramer::frontend();
        let mut types = Vec::new();
        framer.message_types(&stream, |t| types.push(t));
        assert!(framer.opaque());
        assert!(types.is_empty());
    }
}
