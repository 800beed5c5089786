//! User content parts that are not text → Gemini `inlineData` / `fileData` parts.

use serde_json::{json, Value};

use super::parts::str_at;
use crate::providers::translate::TranslateError;

/// Image types Vertex reads from a Cloud Storage object, by the object's extension (`fileData`
/// needs the type, and a `gs://` URI carries none).
const GCS_IMAGE_TYPES: &[(&str, &str)] = &[
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("webp", "image/webp"),
    ("heic", "image/heic"),
    ("heif", "image/heif"),
];

/// `image_url`: a `data:` URL → `inlineData`; a `gs://` URI → `fileData`. An http(s) URL is
/// refused: Vertex reads Cloud Storage, and the gateway does not fetch URLs for the client.
/// `detail` has no per-part equivalent and is dropped.
pub(super) fn image(item: &Value, field: &str) -> Result<Value, TranslateError> {
    let url = str_at(item, "/image_url/url", field)?;
    let url_field = format!("{field}.image_url.url");
    if url.starts_with("data:") {
        let (mime_type, data) = data_url(url, &url_field)?;
        if !mime_type.starts_with("image/") {
            return Err(TranslateError::new(url_field, format!("{mime_type:?} is not an image type")));
        }
        return Ok(inline(mime_type, data));
    }
    if url.starts_with("gs://") {
        let extension = url.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
        let Some((_, mime_type)) = GCS_IMAGE_TYPES.iter().find(|(e, _)| *e == extension) else {
            let reason =
                "a gs:// image must end in .png, .jpg, .jpeg, .webp, .heic or .heif (its type is read from it)";
            return Err(TranslateError::new(url_field, reason));
        };
        return Ok(json!({ "fileData": { "mimeType": mime_type, "fileUri": url } }));
    }
    Err(TranslateError::new(
        url_field,
        "Vertex Gemini models take images as a data: URL or a gs:// URI, not an http(s) URL",
    ))
}

/// `input_audio` (`wav` or `mp3`, base64) → `inlineData`.
pub(super) fn audio(item: &Value, field: &str) -> Result<Value, TranslateError> {
    let data = str_at(item, "/input_audio/data", field)?;
    let mime_type = match item.pointer("/input_audio/format").and_then(Value::as_str) {
        Some("wav") => "audio/wav",
        Some("mp3") => "audio/mp3",
        _ => return Err(TranslateError::new(format!("{field}.input_audio.format"), "must be \"wav\" or \"mp3\"")),
    };
    Ok(inline(mime_type, data))
}

/// `file` with `file_data` (a `data:` URL, e.g. a PDF) → `inlineData`. A `file_id` names a file
/// uploaded to OpenAI, which Vertex cannot read.
pub(super) fn file(item: &Value, field: &str) -> Result<Value, TranslateError> {
    if item.pointer("/file/file_id").is_some_and(|id| !id.is_null()) {
        return Err(TranslateError::new(format!("{field}.file.file_id"), "is not supported for Vertex Gemini models"));
    }
    let url = str_at(item, "/file/file_data", field)?;
    let (mime_type, data) = data_url(url, &format!("{field}.file.file_data"))?;
    Ok(inline(mime_type, data))
}

/// `data:<type>;base64,<data>` → (type, data).
fn data_url<'a>(url: &'a str, field: &str) -> Result<(&'a str, &'a str), TranslateError> {
    url.strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
        .filter(|(mime_type, _)| !mime_type.is_empty())
        .ok_or_else(|| TranslateError::new(field, "must be a base64 data: URL (data:<type>;base64,<data>)"))
}

fn inline(mime_type: &str, data: &str) -> Value {
    json!({ "inlineData": { "mimeType": mime_type, "data": data } })
}
