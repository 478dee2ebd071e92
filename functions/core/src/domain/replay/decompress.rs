//! Streams the frame block through liblzma into the frame parser, reproducing what
//! `lzma.decompress(block, format=FORMAT_AUTO)` accepts, within bounds.
//!
//! Python's `lzma.decompress` decodes one stream (auto-detecting `.xz`, `.lzma` "alone" and,
//! with the liblzma 5.4 of Debian 12, `.lz`), then treats the bytes after it as another
//! stream, and so on. An error in the first stream fails; an error in a later stream discards
//! that stream's output and ends decoding successfully; any stream that runs out of input
//! before its end marker fails. Here output goes to a fixed buffer and straight into the frame
//! parser, so a later stream's frames are parsed on a copy of the parser that is dropped if
//! the stream turns out to be broken.

use liblzma::stream::{Action, Error as LzmaError, Status, Stream};

use super::frames::{FrameParser, FrameStats};
use super::{GameMode, ReplayError, ReplayLimits};

/// Decompressed text is parsed in chunks of this size: the only buffer besides liblzma's own.
const CHUNK_BYTES: usize = 64 * 1024;

/// How one stream of the block ended.
enum StreamEnd {
    /// Its end marker was reached after this many input bytes.
    Complete(usize),
    /// liblzma reported corrupt or unsupported data.
    Corrupt,
    /// The input ran out before the end marker.
    Truncated,
}

pub(super) fn decode_frames(
    block: &[u8],
    mode: GameMode,
    limits: &ReplayLimits,
) -> Result<FrameStats, ReplayError> {
    let mut decoder = Decoder {
        limits,
        out: vec![0; CHUNK_BYTES],
        total_out: 0,
    };
    let mut parser = FrameParser::new(mode, limits.max_frames);
    let mut rest = match decoder.run(block, &mut parser, true)? {
        StreamEnd::Complete(used) => block.get(used..).unwrap_or_default(),
        StreamEnd::Corrupt => return Err(ReplayError::CorruptFrameData),
        StreamEnd::Truncated => return Err(ReplayError::FrameDataEndsEarly),
    };
    while !rest.is_empty() {
        let mut tentative = parser.clone();
        match decoder.run(rest, &mut tentative, false)? {
            StreamEnd::Complete(used) => {
                parser = tentative;
                if let Some(error) = parser.error() {
                    return Err(error.clone());
                }
                rest = rest.get(used..).unwrap_or_default();
            }
            StreamEnd::Corrupt => break,
            StreamEnd::Truncated => return Err(ReplayError::FrameDataEndsEarly),
        }
    }
    parser.finish()
}

struct Decoder<'a> {
    limits: &'a ReplayLimits,
    out: Vec<u8>,
    /// Decompressed bytes so far, over all streams.
    total_out: u64,
}

impl Decoder<'_> {
    /// Decodes the stream at the start of `input` into `parser`. With `fail_fast`, a frame
    /// error ends decoding at once: it is final for the first stream.
    fn run(
        &mut self,
        input: &[u8],
        parser: &mut FrameParser,
        fail_fast: bool,
    ) -> Result<StreamEnd, ReplayError> {
        let mut stream = self.open(input)?;
        let mut pos = 0;
        loop {
            let (in_before, out_before) = (stream.total_in(), stream.total_out());
            let status = stream.process(
                input.get(pos..).unwrap_or_default(),
                &mut self.out,
                Action::Run,
            );
            let consumed = delta(stream.total_in(), in_before);
            let produced = delta(stream.total_out(), out_before).min(self.out.len());
            pos = pos.saturating_add(consumed).min(input.len());

            self.total_out = self.total_out.saturating_add(produced as u64);
            if self.total_out > self.limits.max_decompressed_bytes {
                return Err(ReplayError::FrameDataTooLarge {
                    limit: self.limits.max_decompressed_bytes,
                });
            }
            parser.feed(self.out.get(..produced).unwrap_or_default());
            if fail_fast {
                if let Some(error) = parser.error() {
                    return Err(error.clone());
                }
            }

            match status {
                Ok(Status::StreamEnd) => return Ok(StreamEnd::Complete(pos)),
                Ok(_) if consumed == 0 && produced == 0 => {
                    // No progress: liblzma wants input that is not there (Python's "ended
                    // before the end-of-stream marker"), or is stuck on what it has.
                    return Ok(if pos >= input.len() {
                        StreamEnd::Truncated
                    } else {
                        StreamEnd::Corrupt
                    });
                }
                Ok(_) => {}
                Err(LzmaError::MemLimit | LzmaError::Mem) => return Err(self.memory_error()),
                Err(_) => return Ok(StreamEnd::Corrupt),
            }
        }
    }

    /// The decoder Python's `FORMAT_AUTO` would pick for this stream.
    fn open(&self, input: &[u8]) -> Result<Stream, ReplayError> {
        let memlimit = self.limits.decoder_memlimit;
        // The bundled liblzma is built without lzip in its auto decoder; the system one
        // Python uses routes a leading 'L' to the lzip decoder, so do that by hand.
        let stream = if input.first() == Some(&b'L') {
            Stream::new_lzip_decoder(memlimit, 0)
        } else {
            Stream::new_auto_decoder(memlimit, 0)
        };
        stream.map_err(|_| self.memory_error())
    }

    fn memory_error(&self) -> ReplayError {
        ReplayError::DecoderMemory {
            limit: self.limits.decoder_memlimit,
        }
    }
}

/// Bytes liblzma moved in one call (its counters only grow, by at most the buffer sizes).
fn delta(after: u64, before: u64) -> usize {
    usize::try_from(after.saturating_sub(before)).unwrap_or(usize::MAX)
}
