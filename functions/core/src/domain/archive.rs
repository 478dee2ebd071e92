//! What a valid skin is. An `.osk` is a zip archive, and we accept the plain kind that osu!
//! and every common zip tool write:
//!
//! - one disk, the end-of-central-directory record (zip64 too) at the end, no prepended data;
//! - 1..=`max_entries` entries, each stored or deflated, none encrypted, each a regular file or
//!   a directory (an entry whose Unix mode says symlink, device, FIFO or socket is refused: an
//!   extracting renderer would follow or open it);
//! - names that stay inside the skin folder: relative, `/`-separated, no `..`-like component,
//!   no backslash, drive letter or NUL, each name once;
//! - declared uncompressed sizes adding up to at most `max_total_bytes`, entries that do not
//!   overlap, and data that inflates to exactly the declared size with the declared CRC-32.
//!
//! A `skin.ini` is typical but not required: osu! and danser fall back to defaults for every
//! element a skin leaves out, so any such archive is a usable skin.
//!
//! Everything is bounded before it is done: the entry count is read from the end record before
//! a single entry is parsed, the declared sizes are summed before anything is inflated, and
//! inflating never produces more than one byte past an entry's declared size, so a zip bomb
//! costs at most `max_total_bytes` of inflation, and usually nothing.
//!
//! The archive is read through an `ArchiveSource` in two kinds of read: ranges of the end (the
//! end records, then the central directory, at most `MAX_DIRECTORY_BYTES`), and one pass front
//! to back over the entries, each inflated as it streams by. So the memory a check takes does
//! not grow with the archive: a direct upload is a slice already in memory; a presigned upload
//! of up to 200 MiB is read from S3 with ranged GETs (ingest.rs).

use std::collections::HashSet;
use std::fmt;
use std::io::{self, Read, Write};
use std::ops::Range;

use entries::{is_safe_name, special_kind, unix_type};

/// The caps of `inspect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchiveLimits {
    pub max_entries: u64,
    pub max_total_bytes: u64,
}

impl Default for ArchiveLimits {
    /// Real skins have a few hundred files and unpack to tens of MiB; these leave ample room.
    fn default() -> Self {
        Self {
            max_entries: 10_000,
            max_total_bytes: 256 * 1024 * 1024,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    #[error("not a zip archive")]
    NotZip,
    #[error("multi-disk archives are not supported")]
    MultiDisk,
    #[error("the archive holds no files")]
    Empty,
    #[error("the archive has {entries} entries; at most {limit} are allowed")]
    TooManyEntries { entries: u64, limit: u64 },
    #[error("the entries unpack to more than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("entry `{0}` has an unsafe name")]
    UnsafeName(String),
    #[error("entry `{0}` appears twice")]
    DuplicateName(String),
    #[error("entry `{0}` is encrypted")]
    Encrypted(String),
    #[error("entry `{name}` is a {kind}; only regular files and directories are allowed")]
    SpecialFile { name: String, kind: &'static str },
    #[error(
        "entry `{name}` uses compression method {method}; only stored and deflate are supported"
    )]
    UnsupportedMethod { name: String, method: u16 },
    #[error("corrupt archive: {0}")]
    Corrupt(String),
    /// The source failed (S3): says nothing about the archive, so the check is to be retried.
    #[error("the archive could not be read: {0}")]
    Unreadable(String),
}

/// Where an archive is read from (module docs): its length, ranges of it, and one front-to-back
/// stream. Every range asked for lies within `0..size()`.
pub trait ArchiveSource {
    fn size(&self) -> u64;
    /// The bytes of `range` (small: end records, the central directory).
    fn read_at(&mut self, range: Range<u64>) -> Result<Vec<u8>, SourceError>;
    /// The bytes of `range`, read once in order; a failure of the source surfaces as an
    /// `io::Error` carrying a `SourceError`.
    fn stream(&mut self, range: Range<u64>) -> Result<Box<dyn Read + '_>, SourceError>;
}

/// A failure of an `ArchiveSource` (not of the archive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceError(pub String);

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SourceError {}

impl From<SourceError> for ArchiveError {
    fn from(error: SourceError) -> Self {
        Self::Unreadable(error.0)
    }
}

/// An archive in memory.
impl ArchiveSource for &[u8] {
    fn size(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn read_at(&mut self, range: Range<u64>) -> Result<Vec<u8>, SourceError> {
        self.get(range.start as usize..range.end as usize)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| SourceError(format!("{range:?} is outside the archive")))
    }

    fn stream(&mut self, range: Range<u64>) -> Result<Box<dyn Read + '_>, SourceError> {
        let bytes = self
            .get(range.start as usize..range.end as usize)
            .ok_or_else(|| SourceError(format!("{range:?} is outside the archive")))?;
        Ok(Box::new(bytes))
    }
}

/// The central directory is read into memory whole; real skins' take tens of KiB.
pub const MAX_DIRECTORY_BYTES: u64 = 16 * 1024 * 1024;

/// What a valid archive holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchiveSummary {
    pub entries: u64,
    pub uncompressed_bytes: u64,
}

/// The fixed part of a kind of record: the signature it starts with, and its length.
struct Record {
    signature: u32,
    len: usize,
}

impl Record {
    const fn new(signature: u32, len: usize) -> Self {
        Self { signature, len }
    }
}

const END: Record = Record::new(0x0605_4b50, 22);
const ZIP64_LOCATOR: Record = Record::new(0x0706_4b50, 20);
const ZIP64_END: Record = Record::new(0x0606_4b50, 56);
const CENTRAL: Record = Record::new(0x0201_4b50, 46);
const LOCAL: Record = Record::new(0x0403_4b50, 30);
const ZIP64_EXTRA_ID: u16 = 0x0001;

const STORED: u16 = 0;
const DEFLATED: u16 = 8;
/// General-purpose flags: encrypted, strong encryption, masked (encrypted) central directory.
const ENCRYPTION_FLAGS: u16 = 0x0001 | 0x0040 | 0x2000;

/// Checks `bytes` is a valid skin archive within `limits`.
pub fn inspect(mut bytes: &[u8], limits: &ArchiveLimits) -> Result<ArchiveSummary, ArchiveError> {
    inspect_source(&mut bytes, limits)
}

/// Checks the archive `source` reads is a valid skin archive within `limits`.
pub fn inspect_source(
    source: &mut dyn ArchiveSource,
    limits: &ArchiveLimits,
) -> Result<ArchiveSummary, ArchiveError> {
    let directory = find_directory(source)?;
    if directory.entries == 0 {
        return Err(ArchiveError::Empty);
    }
    if directory.entries > limits.max_entries {
        return Err(ArchiveError::TooManyEntries {
            entries: directory.entries,
            limit: limits.max_entries,
        });
    }
    if directory.size > MAX_DIRECTORY_BYTES {
        return Err(ArchiveError::Corrupt(format!(
            "the central directory is larger than {MAX_DIRECTORY_BYTES} bytes"
        )));
    }
    let central = source.read_at(directory.offset..directory.offset + directory.size)?;
    let mut entries = read_central_directory(&central, &directory, limits)?;
    if entries.iter().all(|entry| entry.name.ends_with(b"/")) {
        return Err(ArchiveError::Empty);
    }
    let uncompressed_bytes = entries.iter().map(|e| e.size).sum();
    check_entry_data(source, &directory, &mut entries)?;
    Ok(ArchiveSummary {
        entries: directory.entries,
        uncompressed_bytes,
    })
}

/// Where the central directory is, from the end record.
#[derive(Debug)]
struct Directory {
    entries: u64,
    offset: u64,
    size: u64,
    /// The central directory ends at or before here: the (zip64) end record.
    end: u64,
}

/// The end record is the last 22 bytes but for a comment of up to 64 KiB; the last signature
/// whose comment fits is the one every reader takes.
fn find_directory(source: &mut dyn ArchiveSource) -> Result<Directory, ArchiveError> {
    let len = source.size();
    let last = len
        .checked_sub(END.len as u64)
        .ok_or(ArchiveError::NotZip)?;
    // The last 64 KiB + 22 bytes, which hold the end record; positions below are within them.
    let tail_start = last.saturating_sub(u64::from(u16::MAX));
    let bytes = source.read_at(tail_start..len)?;
    let bytes = bytes.as_slice();
    let last = (last - tail_start) as usize;
    let at = (0..=last)
        .rev()
        .find(|&at| {
            let record = Reader::at(bytes, at);
            record.u32(0) == Some(END.signature)
                && record
                    .u16(20)
                    .is_some_and(|comment| at + END.len + usize::from(comment) <= bytes.len())
        })
        .ok_or(ArchiveError::NotZip)?;
    let record = Reader::at(bytes, at);
    let field16 = |offset| record.u16(offset).ok_or(ArchiveError::NotZip);
    let field32 = |offset| record.u32(offset).ok_or(ArchiveError::NotZip);
    let (disk, directory_disk) = (field16(4)?, field16(6)?);
    let (entries_here, entries) = (field16(8)?, field16(10)?);
    let (size, offset) = (field32(12)?, field32(16)?);
    if disk != 0 || directory_disk != 0 || entries_here != entries {
        return Err(ArchiveError::MultiDisk);
    }
    let at = tail_start + at as u64;
    if entries == u16::MAX || size == u32::MAX || offset == u32::MAX {
        return find_zip64_directory(source, at);
    }
    let directory = Directory {
        entries: entries.into(),
        offset: offset.into(),
        size: size.into(),
        end: at,
    };
    check_directory_bounds(directory)
}

/// Zip64: a locator just before the end record points at the zip64 end record, whose
/// 64-bit fields replace the saturated 16- and 32-bit ones.
fn find_zip64_directory(
    source: &mut dyn ArchiveSource,
    end_at: u64,
) -> Result<Directory, ArchiveError> {
    let corrupt = || ArchiveError::Corrupt("bad zip64 end of central directory".into());
    let locator_at = end_at
        .checked_sub(ZIP64_LOCATOR.len as u64)
        .ok_or_else(corrupt)?;
    let locator = source.read_at(locator_at..end_at)?;
    let locator = Reader::at(&locator, 0);
    if locator.u32(0) != Some(ZIP64_LOCATOR.signature) {
        return Err(corrupt());
    }
    if locator.u32(4) != Some(0) || locator.u32(16) != Some(1) {
        return Err(ArchiveError::MultiDisk);
    }
    let record_at = locator.u64(8).ok_or_else(corrupt)?;
    if record_at.saturating_add(ZIP64_END.len as u64) > locator_at {
        return Err(corrupt());
    }
    let record = source.read_at(record_at..record_at + ZIP64_END.len as u64)?;
    let record = Reader::at(&record, 0);
    if record.u32(0) != Some(ZIP64_END.signature) {
        return Err(corrupt());
    }
    let field32 = |offset| record.u32(offset).ok_or_else(corrupt);
    let field64 = |offset| record.u64(offset).ok_or_else(corrupt);
    let entries = field64(32)?;
    if field32(16)? != 0 || field32(20)? != 0 || field64(24)? != entries {
        return Err(ArchiveError::MultiDisk);
    }
    check_directory_bounds(Directory {
        entries,
        size: field64(40)?,
        offset: field64(48)?,
        end: record_at,
    })
}

/// The central directory lies before its end record. Prepended data (self-extracting
/// archives) shifts every offset and fails here or at the first entry's signature.
fn check_directory_bounds(directory: Directory) -> Result<Directory, ArchiveError> {
    match directory.offset.checked_add(directory.size) {
        Some(end) if end <= directory.end => Ok(directory),
        _ => Err(ArchiveError::Corrupt(
            "the central directory lies outside the archive".into(),
        )),
    }
}

/// One central directory entry, with the zip64 extra field applied.
#[derive(Debug)]
struct Entry<'a> {
    name: &'a [u8],
    /// The Unix file type bits (`S_IFMT`), when the entry carries a Unix mode.
    unix_type: Option<u32>,
    method: u16,
    crc: u32,
    compressed_size: u64,
    size: u64,
    local_offset: u64,
}

impl Entry<'_> {
    fn display_name(&self) -> String {
        display_name(self.name)
    }
}

/// Names are echoed in errors; keep them short and printable.
fn display_name(name: &[u8]) -> String {
    let lossy = String::from_utf8_lossy(name);
    let mut shown: String = lossy.chars().take(100).collect();
    if shown.len() < lossy.len() {
        shown.push('…');
    }
    shown.escape_debug().to_string()
}

/// Parses every entry of the central directory (`bytes`; at most `limits.max_entries`, checked
/// by the caller) and checks names, flags, methods and the declared total, before anything
/// inflates.
fn read_central_directory<'a>(
    bytes: &'a [u8],
    directory: &Directory,
    limits: &ArchiveLimits,
) -> Result<Vec<Entry<'a>>, ArchiveError> {
    let directory_end = directory.size;
    let mut entries = Vec::with_capacity(directory.entries as usize);
    let mut names = HashSet::with_capacity(directory.entries as usize);
    let mut total: u64 = 0;
    let mut at = 0u64;
    for index in 0..directory.entries {
        let truncated =
            || ArchiveError::Corrupt(format!("central directory entry {index} is truncated"));
        let header = Reader::at(bytes, at as usize);
        if at + CENTRAL.len as u64 > directory_end || header.u32(0) != Some(CENTRAL.signature) {
            return Err(ArchiveError::Corrupt(format!(
                "central directory entry {index} is missing"
            )));
        }
        let field16 = |offset| header.u16(offset).ok_or_else(truncated);
        let field32 = |offset| header.u32(offset).ok_or_else(truncated);
        let (name_len, extra_len, comment_len) = (field16(28)?, field16(30)?, field16(32)?);
        let next = at
            + CENTRAL.len as u64
            + u64::from(name_len)
            + u64::from(extra_len)
            + u64::from(comment_len);
        if next > directory_end {
            return Err(truncated());
        }
        let name = header
            .bytes(CENTRAL.len, name_len.into())
            .ok_or_else(truncated)?;
        let extra = header
            .bytes(CENTRAL.len + usize::from(name_len), extra_len.into())
            .ok_or_else(truncated)?;
        let mut entry = Entry {
            name,
            unix_type: unix_type(field16(4)?, field32(38)?),
            method: field16(10)?,
            crc: field32(16)?,
            compressed_size: field32(20)?.into(),
            size: field32(24)?.into(),
            local_offset: field32(42)?.into(),
        };
        apply_zip64_extra(&mut entry, field16(34)?, extra)?;
        check_entry_header(&entry, field16(8)?)?;
        if !names.insert(name) {
            return Err(ArchiveError::DuplicateName(entry.display_name()));
        }
        total = total.saturating_add(entry.size);
        if total > limits.max_total_bytes {
            return Err(ArchiveError::TooLarge {
                limit: limits.max_total_bytes,
            });
        }
        entries.push(entry);
        at = next;
    }
    Ok(entries)
}

/// Zip64 extra field: the 64-bit values of the fields saturated in the fixed header, in order
/// uncompressed size, compressed size, local header offset, disk.
fn apply_zip64_extra(entry: &mut Entry, disk: u16, extra: &[u8]) -> Result<(), ArchiveError> {
    let saturated = |value: u64| value == u64::from(u32::MAX);
    let needs_zip64 = saturated(entry.size)
        || saturated(entry.compressed_size)
        || saturated(entry.local_offset)
        || disk == u16::MAX;
    if !needs_zip64 {
        return if disk == 0 {
            Ok(())
        } else {
            Err(ArchiveError::MultiDisk)
        };
    }
    let name = entry.name;
    let corrupt =
        || ArchiveError::Corrupt(format!("entry `{}`: bad zip64 field", display_name(name)));
    let field = find_extra_field(extra, ZIP64_EXTRA_ID).ok_or_else(corrupt)?;
    let mut values = field
        .chunks_exact(8)
        .map(|chunk| u64::from_le_bytes(chunk.try_into().expect("chunks of 8")));
    for value in [
        &mut entry.size,
        &mut entry.compressed_size,
        &mut entry.local_offset,
    ] {
        if saturated(*value) {
            *value = values.next().ok_or_else(corrupt)?;
        }
    }
    if disk == u16::MAX {
        // The disk number is the field's last 4 bytes.
        let tail = field.len().checked_sub(4).ok_or_else(corrupt)?;
        if field[tail..] != [0, 0, 0, 0] {
            return Err(ArchiveError::MultiDisk);
        }
    }
    Ok(())
}

fn find_extra_field(mut extra: &[u8], id: u16) -> Option<&[u8]> {
    while extra.len() >= 4 {
        let field_id = u16::from_le_bytes([extra[0], extra[1]]);
        let len = usize::from(u16::from_le_bytes([extra[2], extra[3]]));
        let data = extra.get(4..4 + len)?;
        if field_id == id {
            return Some(data);
        }
        extra = &extra[4 + len..];
    }
    None
}

/// The per-entry rules that need no data: name, encryption, file type, method, directory sizes.
fn check_entry_header(entry: &Entry, flags: u16) -> Result<(), ArchiveError> {
    if !is_safe_name(entry.name) {
        return Err(ArchiveError::UnsafeName(entry.display_name()));
    }
    if flags & ENCRYPTION_FLAGS != 0 {
        return Err(ArchiveError::Encrypted(entry.display_name()));
    }
    if let Some(kind) = entry.unix_type.and_then(special_kind) {
        return Err(ArchiveError::SpecialFile {
            name: entry.display_name(),
            kind,
        });
    }
    if entry.method != STORED && entry.method != DEFLATED {
        return Err(ArchiveError::UnsupportedMethod {
            name: entry.display_name(),
            method: entry.method,
        });
    }
    if entry.method == STORED && entry.compressed_size != entry.size {
        return Err(ArchiveError::Corrupt(format!(
            "stored entry `{}` declares two sizes",
            entry.display_name()
        )));
    }
    if entry.name.ends_with(b"/") && entry.size != 0 {
        return Err(ArchiveError::Corrupt(format!(
            "directory entry `{}` has content",
            entry.display_name()
        )));
    }
    Ok(())
}

/// Each entry's local header agrees with the central directory, entries do not overlap (one
/// compressed stream shared by many entries is the cheapest bomb), and the data inflates to
/// exactly the declared size and CRC. One pass over the entries in offset order, streamed.
fn check_entry_data(
    source: &mut dyn ArchiveSource,
    directory: &Directory,
    entries: &mut [Entry],
) -> Result<(), ArchiveError> {
    entries.sort_unstable_by_key(|entry| entry.local_offset);
    let start = entries
        .first()
        .map_or(directory.offset, |entry| entry.local_offset)
        .min(directory.offset);
    let mut stream = source.stream(start..directory.offset)?;
    let mut position = start;
    let mut free_from = 0u64;
    for entry in entries.iter() {
        let corrupt =
            |what: &str| ArchiveError::Corrupt(format!("entry `{}`: {what}", entry.display_name()));
        let read_failed = |error: io::Error| {
            unreadable(&error).unwrap_or_else(|| corrupt(&format!("unreadable: {error}")))
        };
        if entry.local_offset < free_from {
            return Err(corrupt("overlaps another entry"));
        }
        if entry.local_offset + LOCAL.len as u64 > directory.offset {
            return Err(corrupt("local header missing"));
        }
        skip(&mut stream, entry.local_offset - position).map_err(read_failed)?;
        let mut header = [0u8; LOCAL.len];
        stream.read_exact(&mut header).map_err(read_failed)?;
        let local = Reader::at(&header, 0);
        if local.u32(0) != Some(LOCAL.signature) {
            return Err(corrupt("local header missing"));
        }
        let truncated = || corrupt("local header truncated");
        let flags = local.u16(6).ok_or_else(truncated)?;
        let name_len = local.u16(26).ok_or_else(truncated)?;
        let extra_len = local.u16(28).ok_or_else(truncated)?;
        let data_start =
            entry.local_offset + LOCAL.len as u64 + u64::from(name_len) + u64::from(extra_len);
        let past_directory = || corrupt("data runs past the central directory");
        if entry.local_offset + LOCAL.len as u64 + u64::from(name_len) > directory.offset {
            return Err(past_directory());
        }
        // Streaming extractors read the local name: it must be the one checked above.
        let mut local_name = vec![0u8; name_len.into()];
        stream.read_exact(&mut local_name).map_err(read_failed)?;
        if local_name != entry.name {
            return Err(corrupt("local header names another file"));
        }
        if flags & ENCRYPTION_FLAGS != 0 {
            return Err(ArchiveError::Encrypted(entry.display_name()));
        }
        let data_end = data_start
            .checked_add(entry.compressed_size)
            .filter(|&end| end <= directory.offset)
            .ok_or_else(past_directory)?;
        skip(&mut stream, extra_len.into()).map_err(read_failed)?;
        let mut data = (&mut stream).take(entry.compressed_size);
        check_data(entry, &mut data)?;
        // What the inflater left of the entry's compressed bytes (none, for a well-formed one).
        io::copy(&mut data, &mut io::sink()).map_err(read_failed)?;
        position = data_end;
        free_from = data_end;
    }
    Ok(())
}

/// Reads and drops `count` bytes of `stream` (the gaps between entries, extra fields).
fn skip(stream: &mut dyn Read, count: u64) -> io::Result<()> {
    let skipped = io::copy(&mut stream.take(count), &mut io::sink())?;
    if skipped < count {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// The source's failure inside an I/O error, as `Unreadable`; `None` for anything else (an
/// inflate error, the end of the data: faults of the archive).
fn unreadable(error: &io::Error) -> Option<ArchiveError> {
    let source = error.get_ref()?.downcast_ref::<SourceError>()?;
    Some(ArchiveError::Unreadable(source.0.clone()))
}

/// Inflates (or reads) `data`, never more than one byte past the declared size.
fn check_data(entry: &Entry, data: &mut dyn Read) -> Result<(), ArchiveError> {
    let corrupt =
        |what: String| ArchiveError::Corrupt(format!("entry `{}`: {what}", entry.display_name()));
    let mut sink = CrcSink::default();
    let cap = entry.size.saturating_add(1);
    let copied = match entry.method {
        STORED => io::copy(&mut data.take(cap), &mut sink),
        _ => io::copy(
            &mut flate2::read::DeflateDecoder::new(data).take(cap),
            &mut sink,
        ),
    }
    .map_err(|e| {
        unreadable(&e).unwrap_or_else(|| corrupt(format!("data does not inflate: {e}")))
    })?;
    if copied > entry.size {
        return Err(corrupt(format!(
            "data unpacks to more than the declared {} bytes",
            entry.size
        )));
    }
    if copied < entry.size {
        return Err(corrupt(format!(
            "data unpacks to {copied} bytes, not the declared {}",
            entry.size
        )));
    }
    if sink.hasher.finalize() != entry.crc {
        return Err(corrupt("CRC-32 mismatch".into()));
    }
    Ok(())
}

#[derive(Default)]
struct CrcSink {
    hasher: crc32fast::Hasher,
}

impl Write for CrcSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.hasher.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Little-endian fields at an offset of `bytes`; `None` past the end.
#[derive(Clone, Copy)]
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn at(bytes: &'a [u8], offset: usize) -> Self {
        Self {
            bytes: bytes.get(offset..).unwrap_or_default(),
        }
    }

    fn bytes(&self, offset: usize, len: usize) -> Option<&'a [u8]> {
        self.bytes.get(offset..offset.checked_add(len)?)
    }

    fn array<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        self.bytes(offset, N)?.try_into().ok()
    }

    fn u16(&self, offset: usize) -> Option<u16> {
        self.array(offset).map(u16::from_le_bytes)
    }

    fn u32(&self, offset: usize) -> Option<u32> {
        self.array(offset).map(u32::from_le_bytes)
    }

    fn u64(&self, offset: usize) -> Option<u64> {
        self.array(offset).map(u64::from_le_bytes)
    }
}

mod entries;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;
    use zip::write::SimpleFileOptions;
    use zip::CompressionMethod;

    fn deflated() -> SimpleFileOptions {
        SimpleFileOptions::default().compression_method(CompressionMethod::Deflated)
    }

    fn stored() -> SimpleFileOptions {
        SimpleFileOptions::default().compression_method(CompressionMethod::Stored)
    }

    /// A zip of `(name, content)` files, deflated.
    fn zip_of(files: &[(&str, &[u8])]) -> Vec<u8> {
        zip_with(files, deflated())
    }

    fn zip_with(files: &[(&str, &[u8])], options: SimpleFileOptions) -> Vec<u8> {
        let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for (name, content) in files {
            writer.start_file(*name, options).unwrap();
            writer.write_all(content).unwrap();
        }
        writer.finish().unwrap().into_inner()
    }

    fn inspect_default(bytes: &[u8]) -> Result<ArchiveSummary, ArchiveError> {
        inspect(bytes, &ArchiveLimits::default())
    }

    /// Offset of the `index`th header with `signature` (the test data never contains one).
    fn header_at(bytes: &[u8], signature: u32, index: usize) -> usize {
        bytes
            .windows(4)
            .enumerate()
            .filter(|(_, w)| *w == signature.to_le_bytes())
            .nth(index)
            .expect("header present")
            .0
    }

    fn patch(bytes: &mut [u8], at: usize, value: &[u8]) {
        bytes[at..at + value.len()].copy_from_slice(value);
    }

    /// Moves the end record's fields into a zip64 end record, as writers of huge archives do.
    fn with_zip64_end(mut bytes: Vec<u8>) -> Vec<u8> {
        let end = header_at(&bytes, END.signature, 0);
        let field = |at: usize, len: usize| {
            let mut value = [0u8; 8];
            value[..len].copy_from_slice(&bytes[end + at..end + at + len]);
            u64::from_le_bytes(value)
        };
        let (entries, size, offset) = (field(10, 2), field(12, 4), field(16, 4));
        bytes.truncate(end);
        bytes.extend(ZIP64_END.signature.to_le_bytes());
        bytes.extend(44u64.to_le_bytes());
        bytes.extend([45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        for value in [entries, entries, size, offset] {
            bytes.extend(value.to_le_bytes());
        }
        bytes.extend(ZIP64_LOCATOR.signature.to_le_bytes());
        bytes.extend(0u32.to_le_bytes());
        bytes.extend((end as u64).to_le_bytes());
        bytes.extend(1u32.to_le_bytes());
        bytes.extend(END.signature.to_le_bytes());
        bytes.extend([0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF]);
        bytes.extend([0xFF; 8]);
        bytes.extend([0, 0]);
        bytes
    }

    fn skin_ini() -> Vec<u8> {
        b"[General]\r\nName: Test\r\nAuthor: osurender\r\n".repeat(20)
    }

    #[test]
    fn accepts_a_plain_skin() {
        let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
        writer.add_directory("sounds/", stored()).unwrap();
        writer.start_file("skin.ini", deflated()).unwrap();
        writer.write_all(&skin_ini()).unwrap();
        writer.start_file("hitcircle@2x.png", stored()).unwrap();
        writer
            .write_all(&[0x89, b'P', b'N', b'G', 1, 2, 3])
            .unwrap();
        writer
            .start_file("./sounds/normal-hitclap.wav", deflated())
            .unwrap();
        writer.write_all(&[0; 5000]).unwrap();
        let bytes = writer.finish().unwrap().into_inner();
        assert_eq!(
            inspect_default(&bytes),
            Ok(ArchiveSummary {
                entries: 4,
                uncompressed_bytes: skin_ini().len() as u64 + 7 + 5000,
            })
        );
    }

    #[test]
    fn accepts_zip64_records() {
        let bytes = zip_with(&[("skin.ini", &skin_ini())], deflated().large_file(true));
        let central = header_at(&bytes, CENTRAL.signature, 0);
        assert_eq!(
            bytes[central + 24..central + 28],
            [0xFF; 4],
            "sizes in the extra field"
        );
        assert_eq!(inspect_default(&bytes).unwrap().entries, 1);
        let bytes = with_zip64_end(bytes);
        assert_eq!(inspect_default(&bytes).unwrap().entries, 1);

        // A 64-bit entry count is capped before a single entry is parsed.
        let mut many = bytes;
        let record = header_at(&many, ZIP64_END.signature, 0);
        patch(&mut many, record + 24, &(1u64 << 40).to_le_bytes());
        patch(&mut many, record + 32, &(1u64 << 40).to_le_bytes());
        assert_eq!(
            inspect_default(&many),
            Err(ArchiveError::TooManyEntries {
                entries: 1 << 40,
                limit: 10_000
            })
        );
    }

    #[test]
    fn refuses_what_is_not_a_zip() {
        for bytes in [
            &b""[..],
            b"PK",
            b"not a zip at all, just text",
            &[0u8; 4096],
        ] {
            assert_eq!(inspect_default(bytes), Err(ArchiveError::NotZip));
        }
        let zip = zip_of(&[("skin.ini", &skin_ini())]);
        assert!(inspect_default(&zip[..zip.len() / 2]).is_err());
        assert!(
            inspect_default(&zip[10..]).is_err(),
            "prepended bytes shift every offset"
        );
    }

    #[test]
    fn refuses_archives_without_files() {
        assert_eq!(inspect_default(&zip_of(&[])), Err(ArchiveError::Empty));
        let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
        writer.add_directory("only/", stored()).unwrap();
        let bytes = writer.finish().unwrap().into_inner();
        assert_eq!(inspect_default(&bytes), Err(ArchiveError::Empty));
    }

    #[test]
    fn caps_the_entry_count_before_parsing() {
        let files: Vec<(String, Vec<u8>)> = (0..5).map(|i| (format!("{i}.png"), vec![1])).collect();
        let files: Vec<(&str, &[u8])> = files.iter().map(|(n, c)| (n.as_str(), &c[..])).collect();
        let limits = ArchiveLimits {
            max_entries: 4,
            ..ArchiveLimits::default()
        };
        assert_eq!(
            inspect(&zip_of(&files), &limits),
            Err(ArchiveError::TooManyEntries {
                entries: 5,
                limit: 4
            })
        );
    }

    #[test]
    fn caps_the_declared_total() {
        let limits = ArchiveLimits {
            max_total_bytes: 10_000,
            ..ArchiveLimits::default()
        };
        let bytes = zip_of(&[("a.wav", &[0; 6000]), ("b.wav", &[0; 6000])]);
        assert_eq!(
            inspect(&bytes, &limits),
            Err(ArchiveError::TooLarge { limit: 10_000 })
        );
        // One entry declaring 4 GiB: refused from the directory alone, nothing inflated.
        let mut bomb = zip_of(&[("a.wav", &[0; 100])]);
        let central = header_at(&bomb, CENTRAL.signature, 0);
        patch(&mut bomb, central + 24, &0xFFFF_FFF0u32.to_le_bytes());
        assert_eq!(
            inspect_default(&bomb),
            Err(ArchiveError::TooLarge {
                limit: ArchiveLimits::default().max_total_bytes
            })
        );
    }

    #[test]
    fn inflates_no_more_than_declared() {
        // 1 MiB of zeros that claims to be 10 bytes: inflating stops at 11.
        let mut liar = zip_of(&[("a.wav", &vec![0; 1 << 20])]);
        let central = header_at(&liar, CENTRAL.signature, 0);
        patch(&mut liar, central + 24, &10u32.to_le_bytes());
        let local = header_at(&liar, LOCAL.signature, 0);
        patch(&mut liar, local + 22, &10u32.to_le_bytes());
        match inspect_default(&liar) {
            Err(ArchiveError::Corrupt(reason)) => {
                assert!(reason.contains("more than the declared 10"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn checks_the_data() {
        let mut bytes = zip_with(&[("skin.ini", &skin_ini())], stored());
        let local = header_at(&bytes, LOCAL.signature, 0);
        bytes[local + LOCAL.len + "skin.ini".len() + 3] ^= 0xFF;
        assert_eq!(
            inspect_default(&bytes),
            Err(ArchiveError::Corrupt(
                "entry `skin.ini`: CRC-32 mismatch".into()
            ))
        );
        let mut garbage = zip_of(&[("skin.ini", &skin_ini())]);
        let local = header_at(&garbage, LOCAL.signature, 0);
        let data = local + LOCAL.len + "skin.ini".len();
        patch(&mut garbage, data, &[0xFF; 8]);
        assert!(matches!(
            inspect_default(&garbage),
            Err(ArchiveError::Corrupt(_))
        ));
    }

    #[test]
    fn refuses_unsafe_names() {
        for name in [
            "../evil.png",
            "skin/../../evil.png",
            "/etc/passwd",
            "a\\b.png",
            "..\\evil.png",
            "C:/evil.png",
            "skin.ini:stream",
            "... /evil.png",
            "dir/.. /evil.png",
            "a\u{1}b.png",
        ] {
            assert_eq!(
                inspect_default(&zip_of(&[(name, b"x")])),
                Err(ArchiveError::UnsafeName(display_name(name.as_bytes()))),
                "{name:?}"
            );
        }
        for name in [
            "./skin.ini",
            "a//b.png",
            "hit..png",
            ".hidden",
            "sounds/soft hit.wav",
        ] {
            assert!(
                inspect_default(&zip_of(&[(name, b"x")])).is_ok(),
                "{name:?}"
            );
        }
    }

    /// Sets every central entry's host to `host` and its Unix mode to `mode`.
    fn with_unix_mode(mut bytes: Vec<u8>, host: u8, mode: u32) -> Vec<u8> {
        let entries = bytes
            .windows(4)
            .filter(|w| *w == CENTRAL.signature.to_le_bytes())
            .count();
        for index in 0..entries {
            let central = header_at(&bytes, CENTRAL.signature, index);
            bytes[central + 5] = host;
            patch(&mut bytes, central + 38, &(mode << 16).to_le_bytes());
        }
        bytes
    }

    #[test]
    fn refuses_links_devices_fifos_and_sockets() {
        let plain = zip_of(&[("skin.ini", &skin_ini()), ("hit.png", b"png")]);
        for (mode, kind) in [
            (0o120777, "symbolic link"),
            (0o020644, "character device"),
            (0o060644, "block device"),
            (0o010644, "FIFO"),
            (0o140755, "socket"),
            (0o170644, "special file"),
        ] {
            for host in [3, 19] {
                assert_eq!(
                    inspect_default(&with_unix_mode(plain.clone(), host, mode)),
                    Err(ArchiveError::SpecialFile {
                        name: "skin.ini".into(),
                        kind
                    }),
                    "{mode:o} on host {host}"
                );
            }
            // Another host's attributes are not a Unix mode (MS-DOS bits, say).
            assert!(inspect_default(&with_unix_mode(plain.clone(), 0, mode)).is_ok());
        }
        for mode in [0o100644, 0o100755, 0o000644, 0] {
            assert!(inspect_default(&with_unix_mode(plain.clone(), 3, mode)).is_ok());
        }
        // As the zip crate writes a link: its target as the entry's content.
        let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
        writer.start_file("skin.ini", deflated()).unwrap();
        writer.write_all(&skin_ini()).unwrap();
        writer
            .add_symlink("hitcircle.png", "/etc/passwd", deflated())
            .unwrap();
        let linked = writer.finish().unwrap().into_inner();
        assert!(matches!(
            inspect_default(&linked),
            Err(ArchiveError::SpecialFile { name, kind: "symbolic link" }) if name == "hitcircle.png"
        ));
        // A directory keeps its type.
        let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
        writer
            .add_directory("sounds/", stored().unix_permissions(0o755))
            .unwrap();
        writer.start_file("sounds/a.wav", stored()).unwrap();
        writer.write_all(b"RIFF").unwrap();
        assert!(inspect_default(&writer.finish().unwrap().into_inner()).is_ok());
    }

    #[test]
    fn refuses_a_local_name_other_than_the_central_one() {
        let mut bytes = zip_of(&[("good.png", b"x")]);
        let local = header_at(&bytes, LOCAL.signature, 0);
        patch(&mut bytes, local + LOCAL.len, b"../d.png");
        assert!(matches!(
            inspect_default(&bytes),
            Err(ArchiveError::Corrupt(reason)) if reason.contains("names another file")
        ));
    }

    #[test]
    fn refuses_duplicates_encryption_and_other_methods() {
        let mut twice = zip_of(&[("a.png", b"1"), ("b.png", b"2")]);
        for index in 0..2 {
            let at = header_at(&twice, CENTRAL.signature, 1) + CENTRAL.len;
            let local = header_at(&twice, LOCAL.signature, 1) + LOCAL.len;
            patch(&mut twice, if index == 0 { at } else { local }, b"a");
        }
        assert_eq!(
            inspect_default(&twice),
            Err(ArchiveError::DuplicateName("a.png".into()))
        );

        let mut encrypted = zip_of(&[("a.png", b"1")]);
        let central = header_at(&encrypted, CENTRAL.signature, 0);
        encrypted[central + 8] |= 1;
        assert_eq!(
            inspect_default(&encrypted),
            Err(ArchiveError::Encrypted("a.png".into()))
        );

        let mut bzip2 = zip_of(&[("a.png", b"1")]);
        let central = header_at(&bzip2, CENTRAL.signature, 0);
        patch(&mut bzip2, central + 10, &12u16.to_le_bytes());
        assert_eq!(
            inspect_default(&bzip2),
            Err(ArchiveError::UnsupportedMethod {
                name: "a.png".into(),
                method: 12
            })
        );
    }

    #[test]
    fn refuses_multi_disk_archives() {
        let mut bytes = zip_of(&[("a.png", b"1")]);
        let end = header_at(&bytes, END.signature, 0);
        patch(&mut bytes, end + 4, &1u16.to_le_bytes());
        assert_eq!(inspect_default(&bytes), Err(ArchiveError::MultiDisk));
    }

    /// An archive whose reads fail: at once (`read_at`), or after `stream_ok` streamed bytes.
    struct Failing {
        bytes: Vec<u8>,
        ranges_fail: bool,
        stream_ok: u64,
    }

    impl ArchiveSource for Failing {
        fn size(&self) -> u64 {
            self.bytes.len() as u64
        }

        fn read_at(&mut self, range: Range<u64>) -> Result<Vec<u8>, SourceError> {
            if self.ranges_fail {
                return Err(SourceError("connection reset".into()));
            }
            self.bytes.as_slice().read_at(range)
        }

        fn stream(&mut self, range: Range<u64>) -> Result<Box<dyn Read + '_>, SourceError> {
            let bytes = &self.bytes[range.start as usize..range.end as usize];
            let failure = io::Error::other(SourceError("connection reset".into()));
            let fails = io::Read::chain(bytes.take(self.stream_ok), FailingRead(Some(failure)));
            Ok(Box::new(fails))
        }
    }

    struct FailingRead(Option<io::Error>);

    impl Read for FailingRead {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(self.0.take().unwrap_or_else(|| io::ErrorKind::Other.into()))
        }
    }

    /// A source that fails says nothing about the archive: `Unreadable` (the ingest retries),
    /// never `Corrupt` (which would refuse and delete the upload). The same archive read in
    /// full is valid.
    #[test]
    fn a_failing_source_is_unreadable_not_corrupt() {
        let bytes = zip_of(&[
            ("skin.ini", &b"[General]\n".repeat(5000)),
            ("a.png", b"png"),
        ]);
        let limits = ArchiveLimits::default();
        let mut whole = Failing {
            bytes: bytes.clone(),
            ranges_fail: false,
            stream_ok: u64::MAX,
        };
        assert!(inspect_source(&mut whole, &limits).is_ok());
        for stream_ok in [0, 10, 40, 100] {
            let mut failing = Failing {
                bytes: bytes.clone(),
                ranges_fail: false,
                stream_ok,
            };
            assert_eq!(
                inspect_source(&mut failing, &limits),
                Err(ArchiveError::Unreadable("connection reset".into())),
                "failing after {stream_ok} bytes"
            );
        }
        let mut failing = Failing {
            bytes,
            ranges_fail: true,
            stream_ok: u64::MAX,
        };
        assert_eq!(
            inspect_source(&mut failing, &limits),
            Err(ArchiveError::Unreadable("connection reset".into()))
        );
    }
}
