//! Skins: `.osk` archives (honest, hostile and malformed), the upload forms that carry them,
//! and the upload routes.

use std::io::{Cursor, Write};

use reqwest::multipart::{Form, Part};
use reqwest::Response;
use serde_json::Value;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

use crate::support::app::TestApp;

/// The skin upload routes: v1 (direct and presigned) and legacy (direct only).
pub const V1: &str = "/v1/skins/upload";
pub const LEGACY: &str = "/skins/upload";

/// An `.osk`: the `(name, content)` files, deflated.
pub fn osk(files: &[(&str, &[u8])]) -> Vec<u8> {
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    for (name, content) in files {
        writer.start_file(*name, options).unwrap();
        writer.write_all(content).unwrap();
    }
    writer.finish().unwrap().into_inner()
}

/// A small skin, made distinct by `marker`.
pub fn skin(marker: &str) -> Vec<u8> {
    osk(&[
        (
            "skin.ini",
            format!("[General]\nName: {marker}\n").as_bytes(),
        ),
        ("hitcircle.png", &[0x89, b'P', b'N', b'G', 0, 1, 2, 3]),
    ])
}

/// An honest bomb: 1 MiB of zeros deflated once and its compressed stream copied into 300
/// entries: 300 MiB declared, a few hundred KiB on the wire.
pub fn compressed_bomb() -> Vec<u8> {
    let seed = osk(&[("0.wav", &vec![0; 1 << 20])]);
    let mut seed = ZipArchive::new(Cursor::new(seed)).unwrap();
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    for i in 0..300 {
        let entry = seed.by_index(0).unwrap();
        writer
            .raw_copy_file_rename(entry, format!("{i}.wav"))
            .unwrap();
    }
    writer.finish().unwrap().into_inner()
}

/// Incompressible bytes (a xorshift stream), so a zip of them is as large as they are.
pub fn noise(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Offset of the first header with `signature` (the test data never contains one).
fn header_at(bytes: &[u8], signature: u32) -> usize {
    bytes
        .windows(4)
        .position(|w| w == signature.to_le_bytes())
        .expect("header present")
}

const CENTRAL: u32 = 0x0201_4b50;
const LOCAL: u32 = 0x0403_4b50;

/// Sets the single entry's declared uncompressed size, in the central directory and, unless
/// only there, in its local header.
pub fn declare_size(mut bytes: Vec<u8>, size: u32, local_too: bool) -> Vec<u8> {
    let central = header_at(&bytes, CENTRAL) + 24;
    bytes[central..central + 4].copy_from_slice(&size.to_le_bytes());
    if local_too {
        let local = header_at(&bytes, LOCAL) + 22;
        bytes[local..local + 4].copy_from_slice(&size.to_le_bytes());
    }
    bytes
}

/// Sets every entry's Unix mode (type and permissions) as Info-ZIP on Unix writes it: host 3 in
/// "version made by", the mode in the external attributes' high 16 bits.
pub fn with_unix_mode(mut bytes: Vec<u8>, mode: u32) -> Vec<u8> {
    let centrals: Vec<usize> = bytes
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == CENTRAL.to_le_bytes())
        .map(|(at, _)| at)
        .collect();
    for central in centrals {
        bytes[central + 5] = 3;
        bytes[central + 38..central + 42].copy_from_slice(&(mode << 16).to_le_bytes());
    }
    bytes
}

pub fn upload_form(bytes: Vec<u8>, file_name: &str, name: Option<&str>) -> Form {
    let form = Form::new().part("skin", Part::bytes(bytes).file_name(file_name.to_owned()));
    match name {
        Some(name) => form.text("name", name.to_owned()),
        None => form,
    }
}

/// Posts `file` to a presigned upload as a browser form would: the fields, then the file.
pub async fn post_to_s3(http: &reqwest::Client, upload: &Value, file: Vec<u8>) -> Response {
    let fields = upload["fields"].as_object().unwrap();
    let form = fields.iter().fold(Form::new(), |form, (name, value)| {
        form.text(name.clone(), value.as_str().unwrap().to_owned())
    });
    let form = form.part("file", Part::bytes(file).file_name("skin.osk"));
    http.post(upload["url"].as_str().unwrap())
        .multipart(form)
        .send()
        .await
        .unwrap()
}

impl TestApp {
    /// A skin stored under `name` as far as the registry knows (its row, confirmed), as an
    /// upload leaves it: what a render may name.
    pub async fn register_skin(&self, name: &str) {
        self.db
            .execute(
                "INSERT INTO skins (name, claim, stored_at) VALUES ($1, gen_random_uuid(), now())",
                &[&name],
            )
            .await
            .unwrap();
    }

    pub async fn upload_skin(&self, path: &str, client_ip: &str, form: Form) -> Response {
        self.http
            .post(self.url(path))
            .header("CF-Connecting-IP", client_ip)
            .multipart(form)
            .send()
            .await
            .expect("request completes")
    }
}
