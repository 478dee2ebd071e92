//! What an archive's entry may be: a name that stays inside the skin folder, and a regular
//! file or a directory.

/// A name that extracts inside the skin folder on every system: relative, `/`-separated, no
/// backslash, no `:` (drive letters, NTFS streams), no control characters, and no component
/// that names a parent.
pub(super) fn is_safe_name(name: &[u8]) -> bool {
    !name.is_empty()
        && !name.starts_with(b"/")
        && !name.iter().any(|&b| b == b'\\' || b == b':' || b < 0x20)
        && name.split(|&b| b == b'/').all(is_safe_component)
}

/// Windows trims trailing dots and spaces from a path component, so `.. `, `...` and `. .`
/// mean `..` there: only `.` (and the empty component of `a//b` or `dir/`) may be all dots and
/// spaces.
fn is_safe_component(component: &[u8]) -> bool {
    let only_dots_and_spaces = component.iter().all(|&b| b == b'.' || b == b' ');
    component.is_empty() || component == b"." || !only_dots_and_spaces
}

/// Hosts ("version made by", high byte) whose external attributes carry a Unix mode in their
/// high 16 bits: Unix (3), as Info-ZIP writes it, and OS X (19).
const UNIX_HOSTS: [u16; 2] = [3, 19];
const S_IFMT: u32 = 0o170000;

/// The file type bits of a central entry's Unix mode, if its host writes one.
pub(super) fn unix_type(made_by: u16, external_attributes: u32) -> Option<u32> {
    UNIX_HOSTS
        .contains(&(made_by >> 8))
        .then_some((external_attributes >> 16) & S_IFMT)
}

/// What a file type other than a regular file or a directory is (`None`: one of those, or no
/// type given, as some writers leave it).
pub(super) fn special_kind(file_type: u32) -> Option<&'static str> {
    match file_type {
        0 | 0o100000 | 0o040000 => None,
        0o120000 => Some("symbolic link"),
        0o020000 => Some("character device"),
        0o060000 => Some("block device"),
        0o010000 => Some("FIFO"),
        0o140000 => Some("socket"),
        _ => Some("special file"),
    }
}
