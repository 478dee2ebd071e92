//! Reading a `multipart/form-data` body within fixed bounds: nothing past the replay limit is
//! ever buffered, and a body that promises or sends more is refused while it arrives.

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use multer::{Constraints, Multipart, SizeLimit};

/// Text fields are short settings; anything longer is refused at the field step.
pub const MAX_TEXT_FIELD_BYTES: usize = 1024;
/// Room for the text fields and the part headers next to the file.
const FORM_OVERHEAD_BYTES: usize = 64 * 1024;
/// A render form has at most about sixty parts (the replay, o!rdr's fifty-odd options, a few
/// of ours); a flood of tiny parts is not a form.
pub const MAX_PARTS: usize = 96;

/// An uploaded file, read whole but never past its limit.
#[derive(Debug, Clone)]
pub struct UploadedFile {
    pub file_name: String,
    pub bytes: Bytes,
}

/// A text field's value, or the fact it was longer than any valid value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextValue {
    Text(String),
    TooLong,
    NotUtf8,
}

/// The value of the form's field `name`: the last one when it was sent more than once.
pub fn last_field<'a>(fields: &'a [(String, TextValue)], name: &str) -> Option<&'a TextValue> {
    fields
        .iter()
        .rev()
        .find(|(field, _)| field == name)
        .map(|(_, value)| value)
}

#[derive(Debug, Default)]
pub struct Form {
    pub file: Option<UploadedFile>,
    /// Text fields in the order sent.
    pub fields: Vec<(String, TextValue)>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormError {
    #[error("the request must be multipart/form-data with a `{0}` file field")]
    NotMultipart(&'static str),
    #[error("malformed multipart body: {0}")]
    Malformed(String),
    #[error("more than {MAX_PARTS} form parts")]
    TooManyParts,
    #[error("more than one `{0}` file field")]
    DuplicateFile(&'static str),
    #[error("the `{field}` file is larger than {limit} bytes")]
    FileTooLarge { field: &'static str, limit: usize },
}

/// Shape of the form: which part is the file, and how large it may be.
#[derive(Debug, Clone, Copy)]
pub struct FormSpec {
    pub file_field: &'static str,
    pub max_file_bytes: usize,
}

impl FormSpec {
    fn max_body_bytes(&self) -> usize {
        self.max_file_bytes + FORM_OVERHEAD_BYTES
    }

    /// Refuses early on a declared `Content-Length` no valid form can have.
    pub fn check_declared_length(&self, content_length: Option<u64>) -> Result<(), FormError> {
        match content_length {
            Some(len) if len > self.max_body_bytes() as u64 => Err(self.too_large()),
            _ => Ok(()),
        }
    }

    fn too_large(&self) -> FormError {
        FormError::FileTooLarge {
            field: self.file_field,
            limit: self.max_file_bytes,
        }
    }
}

/// A request body as it arrives: byte chunks, or the error that cut the stream; what the
/// multipart reader takes, named once for every function that passes a body on.
pub trait BodyStream: Stream<Item = Result<Self::Chunk, Self::Failure>> + Send + 'static {
    type Chunk: Into<Bytes> + 'static;
    type Failure: Into<Box<dyn std::error::Error + Send + Sync>> + 'static;
}

impl<S, O, E> BodyStream for S
where
    S: Stream<Item = Result<O, E>> + Send + 'static,
    O: Into<Bytes> + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    type Chunk = O;
    type Failure = E;
}

pub async fn read_form<S: BodyStream>(
    spec: FormSpec,
    content_type: Option<&str>,
    body: S,
) -> Result<Form, FormError> {
    let boundary = content_type
        .and_then(|ct| multer::parse_boundary(ct).ok())
        .ok_or(FormError::NotMultipart(spec.file_field))?;
    let constraints =
        Constraints::new().size_limit(SizeLimit::new().whole_stream(spec.max_body_bytes() as u64));
    let mut multipart = Multipart::with_constraints(body, boundary, constraints);
    let mut form = Form::default();
    let mut parts = 0;
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|e| multipart_error(&spec, e))?
    {
        parts += 1;
        if parts > MAX_PARTS {
            return Err(FormError::TooManyParts);
        }
        let name = field.name().unwrap_or_default().to_owned();
        if name == spec.file_field {
            if form.file.is_some() {
                return Err(FormError::DuplicateFile(spec.file_field));
            }
            let file_name = field.file_name().unwrap_or_default().to_owned();
            let bytes = read_capped(&mut field, spec.max_file_bytes, Overflow::Stop, &spec)
                .await?
                .ok_or_else(|| spec.too_large())?;
            form.file = Some(UploadedFile { file_name, bytes });
        } else {
            let value = match read_capped(&mut field, MAX_TEXT_FIELD_BYTES, Overflow::Drain, &spec)
                .await?
            {
                None => TextValue::TooLong,
                Some(bytes) => String::from_utf8(bytes.to_vec())
                    .map(TextValue::Text)
                    .unwrap_or(TextValue::NotUtf8),
            };
            form.fields.push((name, value));
        }
    }
    Ok(form)
}

/// What to do with a field that turns out longer than its cap.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Overflow {
    /// Stop reading the body: the request is refused outright.
    Stop,
    /// Skip the rest (bounded by the whole-body limit) so later fields are still read.
    Drain,
}

/// Reads a field up to `cap` bytes; `None` when it is longer.
async fn read_capped(
    field: &mut multer::Field<'static>,
    cap: usize,
    overflow: Overflow,
    spec: &FormSpec,
) -> Result<Option<Bytes>, FormError> {
    let mut buf = BytesMut::new();
    let mut over = false;
    while let Some(chunk) = field.chunk().await.map_err(|e| multipart_error(spec, e))? {
        if over || buf.len() + chunk.len() > cap {
            over = true;
            if overflow == Overflow::Stop {
                return Ok(None);
            }
            continue;
        }
        buf.extend_from_slice(&chunk);
    }
    Ok((!over).then(|| buf.freeze()))
}

fn multipart_error(spec: &FormSpec, error: multer::Error) -> FormError {
    match error {
        multer::Error::StreamSizeExceeded { .. } | multer::Error::FieldSizeExceeded { .. } => {
            spec.too_large()
        }
        other => FormError::Malformed(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: FormSpec = FormSpec {
        file_field: "replay",
        max_file_bytes: 100,
    };

    async fn read(body: Vec<u8>) -> Result<Form, FormError> {
        let stream = futures_util::stream::iter(
            body.chunks(7)
                .map(|c| Ok::<_, std::io::Error>(Bytes::copy_from_slice(c)))
                .collect::<Vec<_>>(),
        );
        read_form(SPEC, Some("multipart/form-data; boundary=XX"), stream).await
    }

    fn part(name: &str, file_name: Option<&str>, value: &[u8]) -> Vec<u8> {
        let mut out = format!("--XX\r\nContent-Disposition: form-data; name=\"{name}\"");
        if let Some(file_name) = file_name {
            out += &format!("; filename=\"{file_name}\"");
        }
        out += "\r\n\r\n";
        let mut out = out.into_bytes();
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
        out
    }

    fn body(parts: &[Vec<u8>]) -> Vec<u8> {
        let mut out = parts.concat();
        out.extend_from_slice(b"--XX--\r\n");
        out
    }

    #[tokio::test]
    async fn reads_file_and_fields_in_order() {
        let form = read(body(&[
            part("skin", None, b"Cool"),
            part("replay", Some("a.osr"), &[1, 2, 3]),
            part("bg_dim", None, b"0.5"),
        ]))
        .await
        .unwrap();
        let file = form.file.unwrap();
        assert_eq!(file.file_name, "a.osr");
        assert_eq!(&file.bytes[..], &[1, 2, 3]);
        assert_eq!(
            form.fields,
            vec![
                ("skin".into(), TextValue::Text("Cool".into())),
                ("bg_dim".into(), TextValue::Text("0.5".into()))
            ]
        );
    }

    #[tokio::test]
    async fn refuses_oversized_file_and_marks_long_text() {
        let too_big = read(body(&[part("replay", Some("a.osr"), &[0; 101])])).await;
        assert_eq!(
            too_big.unwrap_err(),
            FormError::FileTooLarge {
                field: "replay",
                limit: 100
            }
        );
        let exact = read(body(&[part("replay", Some("a.osr"), &[0; 100])])).await;
        assert_eq!(exact.unwrap().file.unwrap().bytes.len(), 100);

        let long = read(body(&[part("skin", None, &[b'a'; 2000])]))
            .await
            .unwrap();
        assert_eq!(long.fields[0].1, TextValue::TooLong);
    }

    #[tokio::test]
    async fn refuses_malformed_bodies() {
        assert!(matches!(
            read(b"garbage without a boundary".to_vec()).await,
            Err(FormError::Malformed(_))
        ));
        let many: Vec<_> = (0..=MAX_PARTS)
            .map(|i| part(&format!("f{i}"), None, b"x"))
            .collect();
        assert_eq!(
            read(body(&many)).await.unwrap_err(),
            FormError::TooManyParts
        );
        let twice = body(&[
            part("replay", Some("a.osr"), b"1"),
            part("replay", Some("b.osr"), b"2"),
        ]);
        assert_eq!(
            read(twice).await.unwrap_err(),
            FormError::DuplicateFile("replay")
        );
        let no_boundary = read_form(
            SPEC,
            Some("application/json"),
            futures_util::stream::empty::<Result<Bytes, std::io::Error>>(),
        )
        .await;
        assert_eq!(no_boundary.unwrap_err(), FormError::NotMultipart("replay"));
    }

    #[tokio::test]
    async fn refuses_a_body_past_the_whole_limit() {
        let huge: Vec<_> = (0..20)
            .map(|i| part(&format!("f{i}"), None, &[b'a'; 4000]))
            .collect();
        assert!(matches!(
            read(body(&huge)).await.unwrap_err(),
            FormError::FileTooLarge { .. }
        ));
    }
}
